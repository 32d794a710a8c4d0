// Package e2e holds billsync's end-to-end tests: the fakes (mocks/stripe,
// mocks/kinde) send signed webhooks to billsync's real intake, which stores
// them in a fresh PostgreSQL database, and the workers fetch through the
// real provider clients (the harness, mocks/testenv). They test reconcile's
// Worker, Sweeper and Reconciler on the store they run on in production,
// with faults (duplicates, drops, stale reads, crashes, a restarted
// database) that a unit test cannot produce.
//
// Its tests sit beside the harness, not in package reconcile, so that
// reconcile's own tests stay pure: `go test ./reconcile` starts no database
// and links no fake. The package has no code of its own; it must never be
// imported.
package e2e
