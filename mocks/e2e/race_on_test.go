//go:build race

package e2e_test

// raceEnabled: the race detector slows database round trips and JSON
// decoding several times over, so the largest tests size down under it.
const raceEnabled = true
