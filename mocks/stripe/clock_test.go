package stripe_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	stripemock "github.com/billsync/billsync/mocks/stripe"
	"github.com/billsync/billsync/store/storetest/tb"
)

// TestStoppedClockStarts: a stopped clock moves only with Advance until
// Start; then it runs with the wall clock from what it read, never back.
func TestStoppedClockStarts(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := stripemock.NewStoppedClock(t0)
	c.Advance(time.Minute)
	require.Equal(t, t0.Add(time.Minute), c.Now(), "stopped: only Advance moves it")
	c.Start()
	require.False(t, c.Now().Before(t0.Add(time.Minute)), "it runs from what it read")
	tb.WaitFor(t, "it runs", func() bool { return c.Now().After(t0.Add(time.Minute)) })
	c.Start() // a running clock is left as it is
	require.False(t, c.Now().Before(t0.Add(time.Minute)))
}
