package tb_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/store/storetest/tb"
)

// failRecorder is a TB that records a failure and ends the goroutine that
// failed, as testing.T's FailNow does.
type failRecorder struct{ failure string }

func (r *failRecorder) Helper()                           {}
func (r *failRecorder) Errorf(format string, args ...any) { r.failure = fmt.Sprintf(format, args...) }
func (r *failRecorder) FailNow()                          { runtime.Goexit() }

// TestWaitGivesUp: a condition that never holds fails the test, saying
// what it waited for, once the deadline passes: the wait never outlives
// it (the two poll loops it replaced waited forever).
func TestWaitGivesUp(t *testing.T) {
	t.Parallel()
	r := &failRecorder{}
	polls := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		tb.WaitUpTo(r, 50*time.Millisecond, "the moon turns blue", func() bool { polls++; return false })
		r.failure = "returned without failing"
	}()
	<-done
	require.Equal(t, "the moon turns blue: not after 50ms", r.failure)
	require.Greater(t, polls, 1, "it polled")
}

// TestWaitReturnsOnceTrue: the wait ends on the poll that sees cond hold.
func TestWaitReturnsOnceTrue(t *testing.T) {
	t.Parallel()
	polls := 0
	tb.WaitFor(t, "the third poll", func() bool { polls++; return polls == 3 })
	require.Equal(t, 3, polls)
}
