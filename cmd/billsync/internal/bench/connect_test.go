package bench

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store/storetest"
)

// TestConnectRoundPollsEveryAccount: at toy sizes, the baseline polls
// one account at a time; the round at serve's pool polls every served
// account once (the fake answered each, the store recorded each feed),
// measured whole at the smaller count and computed from its timed polls
// at the larger; the budget's round is billsync's own at the
// allocation's floor, and the fake refused nothing.
func TestConnectRoundPollsEveryAccount(t *testing.T) {
	ctx := context.Background()
	cfg := toy()
	cfg.ConnectSizes, cfg.ConnectPolls, cfg.ConnectBaselinePolls = []int{40, 80}, 40, 10
	require.NoError(t, cfg.Validate())

	st := storetest.NewStore(t)
	base, err := runConnectBaseline(ctx, st, cfg, 40)
	require.NoError(t, err)
	require.Equal(t, 10, base.Polls)
	require.Positive(t, base.PollsPerSec)

	res := ConnectResult{LatencyMs: ms(cfg.Latency), Pool: reconcile.DefaultConnectPool, Baseline: base}
	for _, n := range cfg.ConnectSizes {
		st := storetest.NewStore(t)
		r, err := runConnectRound(ctx, st, cfg, n, base)
		require.NoError(t, err)
		require.Equal(t, n == 40, r.Measured, "%d accounts", n)
		require.Equal(t, 40, r.Polls)
		require.Positive(t, r.PollsPerSec)
		if r.Measured {
			require.Equal(t, r.Seconds, r.RoundSeconds)
		} else {
			require.InEpsilon(t, float64(n)/r.PollsPerSec, r.RoundSeconds, 0.05)
		}
		require.Zero(t, r.RateLimited, "the client keeps within the fake's limits")
		require.Positive(t, r.Requests)
		require.Equal(t, reconcile.ConnectRound(n, r.Allocation, reconcile.DefaultFeedShare, reconcile.DefaultFeedInterval).Seconds(),
			r.BudgetRoundSeconds)
		require.Equal(t, 10000.0, r.Allocation, "the floor: no transaction stored")
		require.Positive(t, r.Speedup)
		// The fake answered r.Polls polls, each of another account (the
		// run checks it); the store recorded them but those in flight
		// when the run stopped.
		polled := 0
		for _, f := range storetest.ConnectedFeeds(t, st, "stripe") {
			if f.Polls > 0 {
				polled++
			}
		}
		require.GreaterOrEqual(t, polled, r.Polls-reconcile.DefaultConnectPool, "feeds polled, as the store records them")
		res.Rounds = append(res.Rounds, r)
	}
	rep := Report{Connect: []ConnectResult{res}}
	rep.evaluate()
	require.Len(t, rep.Targets, 2)
	var out bytes.Buffer
	rep.Print(&out)
	require.Contains(t, out.String(), "computed from 40 polls")
	require.Contains(t, out.String(), "CONNECT:")
}
