package fault_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/mocks/fault"
)

// throws records a run of dice throws of every kind.
func throws(s *fault.State) []int64 {
	var out []int64
	for range 20 {
		c := int64(0)
		if s.Chance(0.5) {
			c = 1
		}
		out = append(out, c, int64(s.Upto(9)), int64(s.Delay(time.Second)))
	}
	return out
}

// TestStateSameSeedSameChoices: the same faults with the same seed make
// the same choices, and knobs that are off throw no dice (turning one off
// leaves the others' sequence as it was).
func TestStateSameSeedSameChoices(t *testing.T) {
	var a, b fault.State
	a.Set(fault.Faults{Seed: 7})
	b.Set(fault.Faults{Seed: 7})
	first := throws(&a)
	require.Equal(t, first, throws(&b))

	var c fault.State
	c.Set(fault.Faults{Seed: 7})
	require.False(t, c.Chance(0))
	require.Zero(t, c.Upto(0))
	require.Zero(t, c.Delay(0))
	require.Equal(t, first, throws(&c), "an off knob threw no dice")

	var d fault.State
	d.Set(fault.Faults{Seed: 8})
	require.NotEqual(t, first, throws(&d))
}

// TestStateRequest: the request faults decide a 429 over the rate or by
// chance, and a 500 by chance; with none set, nothing fails.
func TestStateRequest(t *testing.T) {
	var s fault.State
	require.Equal(t, fault.NoFailure, first(s.Request()), "the zero State has no faults")
	s.Set(fault.Faults{RateLimitRate: 1})
	require.Equal(t, fault.RateLimited, first(s.Request()))
	s.Set(fault.Faults{Error5xxRate: 1})
	require.Equal(t, fault.ServerError, first(s.Request()))
	// On a synctest clock, so "at once" is exactly that however busy the
	// machine is.
	synctest.Test(t, func(t *testing.T) {
		var s fault.State
		s.Set(fault.Faults{RequestsPerSecond: 1})
		require.Equal(t, fault.NoFailure, first(s.Request()), "the first request of the second is within the rate")
		require.Equal(t, fault.RateLimited, first(s.Request()), "the next one at once is over it")
		time.Sleep(time.Second)
		require.Equal(t, fault.NoFailure, first(s.Request()), "a second later it is within the rate again")
	})
}

// first is the decision of Request, without its knobs.
func first(f fault.Failure, _ fault.Faults) fault.Failure { return f }
