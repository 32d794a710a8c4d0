// Package tb is what billsync's test helpers need of a test, in one place
// for every helper package (store/storetest, mocks/testenv, and tests that
// can import neither): TB and CleanupTB, the test a helper fails, and
// WaitFor, the one way a test waits for a condition, with a deadline.
//
// It imports nothing of billsync's, nor package testing: the harness the
// demo links (mocks/testenv) uses it without carrying a test framework.
package tb

import "time"

// TB is what a helper fails a test through: *testing.T or *testing.B, and
// rapid's *rapid.T in property tests, so that a failure inside a property
// is shrunk and replayable (testify's require.TestingT, plus Helper).
type TB interface {
	Helper()
	Errorf(format string, args ...any)
	FailNow()
}

// CleanupTB is a TB that runs cleanups (a test's *testing.T).
type CleanupTB interface {
	TB
	Cleanup(func())
}

// Fatalf fails the test now.
func Fatalf(t TB, format string, args ...any) {
	t.Helper()
	t.Errorf(format, args...)
	t.FailNow()
}

// WaitFor polls cond in the test's own goroutine until it is true, and
// fails the test after a minute with what. Unlike require.Eventually,
// whose condition runs in a goroutine of its own, cond may call helpers
// and require: a failing read fails the test instead of hanging it. The
// minute is a deadline for a broken test, not a timing check: a loaded
// machine only makes the wait longer.
func WaitFor(t TB, what string, cond func() bool) {
	t.Helper()
	WaitUpTo(t, time.Minute, what, cond)
}

// WaitUpTo is WaitFor with its own deadline, for a wait that is long by
// design (say, retries on a backoff).
func WaitUpTo(t TB, deadline time.Duration, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(deadline)
	for !cond() {
		if time.Now().After(end) {
			Fatalf(t, "%s: not after %v", what, deadline)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
