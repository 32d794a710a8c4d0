package reconcile_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/reconcile"
)

func TestSampleWindowBurn(t *testing.T) {
	require.Zero(t, reconcile.SampleWindow{}.Burn(0.999), "nothing sampled")
	require.InDelta(t, 1.0, reconcile.SampleWindow{Sampled: 1000, Drifted: 1}.Burn(0.999), 1e-9, "the budget's own rate")
	require.InDelta(t, 14.4, reconcile.SampleWindow{Sampled: 10000, Drifted: 144}.Burn(0.999), 1e-9)
}

// TestCorrectnessSignals: each window's equal share and burn, bad at the
// pages' thresholds (14.4x over the hour, 6x over six hours), and the
// budget the 30 days left, bad once spent; nothing without samples.
func TestCorrectnessSignals(t *testing.T) {
	windows := func(hour, six, month [2]int64) []reconcile.SampleWindow {
		return []reconcile.SampleWindow{
			{Window: time.Hour, Sampled: hour[0], Drifted: hour[1]},
			{Window: 6 * time.Hour, Sampled: six[0], Drifted: six[1]},
			{Window: 30 * 24 * time.Hour, Sampled: month[0], Drifted: month[1]},
		}
	}
	require.Empty(t, reconcile.CorrectnessSignals(windows([2]int64{}, [2]int64{}, [2]int64{}), 0.999))

	healthy := reconcile.CorrectnessSignals(windows([2]int64{60, 0}, [2]int64{360, 0}, [2]int64{43200, 10}), 0.999)
	require.Len(t, healthy, 4)
	require.Equal(t, "correctness, last 1h", healthy[0].Name)
	require.Equal(t, "100.00% equal", healthy[0].Value)
	require.Equal(t, "correctness, last 30d", healthy[2].Name)
	require.Equal(t, "correctness error budget, 30d", healthy[3].Name)
	require.Equal(t, "77% left", healthy[3].Value, "10 of the 43.2 the budget allows")
	for _, s := range healthy {
		require.False(t, s.Bad, s.Name)
	}

	burst := reconcile.CorrectnessSignals(windows([2]int64{1000, 15}, [2]int64{6000, 15}, [2]int64{43200, 60}), 0.999)
	require.True(t, burst[0].Bad, "15x over the hour pages")
	require.False(t, burst[1].Bad, "2.5x over six hours does not")
	require.True(t, burst[3].Bad, "60 drifted spend the 30 days' budget of 43.2")
	require.Equal(t, "0% left", burst[3].Value)

	slow := reconcile.CorrectnessSignals(windows([2]int64{1000, 5}, [2]int64{6000, 37}, [2]int64{43200, 40}), 0.999)
	require.False(t, slow[0].Bad, "5x over the hour")
	require.True(t, slow[1].Bad, "over 6x over six hours pages")
}
