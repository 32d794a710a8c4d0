package bench

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store/storetest"
)

// TestDriftMeasuresEverySilentChange: at toy sizes, the sweep heals every
// silent change and times each; the sample (compressed, a large
// allocation) compares accounts a round and reads one customer each,
// detects the drifts and has the worker heal them; the defaults' cost
// reads what the carried credit pays for: the first account at once, then
// SampleSize a round.
func TestDriftMeasuresEverySilentChange(t *testing.T) {
	ctx := context.Background()
	st := storetest.NewStore(t)
	cfg := toy()
	// The sample stops once every drift is found (about 15 rounds, a
	// second each, on a quiet machine); the long bound is for a loaded
	// one, whose rounds come slower. The cost is counted over a fifth.
	cfg.DriftSizes, cfg.DriftFor, cfg.DriftScale = []int{200}, time.Minute, 60
	var res DriftResult
	require.NoError(t, runDriftSize(ctx, st, cfg, 200, true, &res))
	res.finish()

	require.Len(t, res.Sweep, 1)
	sw := res.Sweep[0]
	require.Equal(t, driftChanges, sw.Healed, "the sweep heals exactly the silent changes")
	require.Greater(t, sw.InSweep.P99Ms, 0.0)
	require.GreaterOrEqual(t, sw.P50Hours, 12.0)
	require.Equal(t, driftProjectTo, res.Projected.Accounts)

	sm := res.Sample
	require.Equal(t, 200, sm.Accounts)
	require.Positive(t, sm.Minutes)
	require.Positive(t, sm.Compared)
	// One read an account compared, and one each heal by the worker.
	require.GreaterOrEqual(t, sm.ReadsPerMinute, sm.ComparedPerMinute-0.1)
	require.LessOrEqual(t, sm.ReadsPerMinute, sm.ComparedPerMinute+float64(driftChanges)/float64(sm.Minutes-1)+0.2, "%+v", sm)
	require.Equal(t, driftChanges, sm.Detected, "92 of 200 accounts a round: every drift found and healed within the run")
	require.Positive(t, sm.Detect.P99Ms)

	c := res.Cost
	require.Equal(t, 10000.0, c.Allocation)
	size := reconcile.SampleSize(reconcile.DefaultSampleShare, reconcile.SampleBudget{Rate: c.Allocation, Allocation: c.Allocation, ReadsPerAccount: 1})
	want := math.Floor(1 + size*float64(c.Minutes))
	require.InDelta(t, want, float64(c.Reads), 1, "%d rounds", c.Minutes)
	require.Len(t, res.Detection, 4)
}

// TestDriftArithmetic: the nightly wait's percentiles added to the
// sweep's, the projection by accounts, and the exponential detection of
// the uniform half: mean 2 × accounts ÷ rate.
func TestDriftArithmetic(t *testing.T) {
	p50, p99 := nightly(Percent{P50Ms: 36000, P99Ms: 72000})
	require.Equal(t, 12.01, p50)
	require.Equal(t, 23.78, p99)
	r := DriftResult{Sweep: []DriftSweep{{Accounts: 10000, Seconds: 5}}, Sample: DriftSample{ComparedPerMinute: 100},
		Cost: DriftCost{Reads: 1, Minutes: 100}}
	r.finish()
	require.Equal(t, 50.0, r.Projected.Seconds)
	require.Equal(t, 25000.0, r.Projected.InSweep.P50Ms)
	first := r.Detection[0]
	require.Equal(t, 1000, first.Accounts)
	require.Equal(t, 0.33, first.MeanHours, "2 × 1,000 ÷ 100 a minute = 20 min")
	require.Equal(t, round(20*math.Ln2/60, 2), first.P50Hours)
	require.Equal(t, round(20*math.Log(100)/60, 2), first.P99Hours)
	require.Equal(t, 333333.33, r.Detection[3].MeanHours, "defaults at 0.01 a minute, 100,000 accounts")
	require.Equal(t, Percent{P50Ms: 120000, P99Ms: -1, MaxMs: 180000},
		censoredPercent(map[string]int64{"a": 1, "b": 2, "c": 3}, 4), "a fourth drift not found: p99 not measured")
}
