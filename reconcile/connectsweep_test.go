package reconcile_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/mocks/mock"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store/storetest/tb"
)

// TestConnectSweepsLeaveAnAccountSweptElsewhere: an account whose sweep
// lock another replica or a support engineer's command holds is left out
// for a while, not tried again at every look, while the other accounts are
// swept; each account's sweep runs under its own account's lock, listed by
// its own lister.
func TestConnectSweepsLeaveAnAccountSweptElsewhere(t *testing.T) {
	var mu sync.Mutex
	locks := map[string]int{}   // SweepLock calls by account
	listed := map[string]bool{} // accounts whose lister listed
	finished := map[string]bool{}
	looks := 0
	sweepStore := &mock.SweepStore{
		NowFn: func(context.Context) (time.Time, error) { return time.Now(), nil },
		SweepLockFn: func(ctx context.Context, _, account string) (context.Context, func(), error) {
			mu.Lock()
			defer mu.Unlock()
			locks[account]++
			if account == "acct_held" {
				return nil, nil, reconcile.ErrLeaseHeld
			}
			return ctx, func() {}, nil
		},
		ImportedFn: func(context.Context, string, string) (bool, error) { return true, nil },
		StartSweepFn: func(_ context.Context, provider, account, kind string) (reconcile.SweepRun, error) {
			return reconcile.SweepRun{ID: 1, Provider: provider, Account: account, Kind: kind}, nil
		},
		SweepPageFn: func(context.Context, reconcile.SweepRun, []string) (int, error) { return 0, nil },
		EnqueueUnsweptFn: func(context.Context, int64, string, string, time.Time, time.Duration) (int, error) {
			return 0, nil
		},
		FinishSweepFn: func(_ context.Context, run reconcile.SweepRun, _ error) error {
			mu.Lock()
			defer mu.Unlock()
			finished[run.Account] = true
			return nil
		},
	}
	platform, err := reconcile.NewSweeper(reconcile.SweeperConfig{Store: sweepStore, Provider: "stripe",
		Lister: &mock.Lister{}, Plans: examplePlans()})
	require.NoError(t, err)
	t0 := time.Now()
	sweeps, err := reconcile.NewConnectSweeps(reconcile.ConnectSweepsConfig{
		Provider: "stripe",
		SweeperOf: func(account string) (*reconcile.Sweeper, error) {
			return platform.ForAccount(account, &mock.Lister{ListPageFn: func(context.Context, string) ([]reconcile.Snapshot, string, bool, error) {
				mu.Lock()
				defer mu.Unlock()
				listed[account] = true
				return nil, "", false, nil
			}})
		},
		Store: &mock.ConnectSweepStore{
			NowFn: func(context.Context) (time.Time, error) { return time.Now(), nil },
			ConnectSweepLockFn: func(ctx context.Context, _ string) (context.Context, func(), error) {
				return ctx, func() {}, nil
			},
			DueConnectSweepsFn: func(_ context.Context, _ string, q reconcile.ConnectSweepQuery) ([]reconcile.ConnectSweepDue, int, error) {
				mu.Lock()
				defer mu.Unlock()
				looks++
				var due []reconcile.ConnectSweepDue
				for _, a := range []string{"acct_held", "acct_free"} {
					switch {
					case slices.Contains(q.Skip, a):
					case finished[a]: // swept: due a day after
						due = append(due, reconcile.ConnectSweepDue{Account: a,
							Last: &reconcile.SweepRecord{Status: "succeeded", StartedAt: t0}})
					default:
						due = append(due, reconcile.ConnectSweepDue{Account: a})
					}
				}
				return due, len(due), nil
			},
		},
		Policy: reconcile.ConnectPolicy{Mode: reconcile.ConnectAll},
		Look:   time.Millisecond,
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); sweeps.Run(ctx) }()
	tb.WaitFor(t, "the free account swept and many looks since", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return finished["acct_free"] && looks >= 50
	})
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, 1, locks["acct_held"], "an account swept elsewhere is tried once, then left out for a while")
	require.True(t, listed["acct_free"], "listed by its own account's lister")
	require.False(t, listed["acct_held"])
	require.Equal(t, 1, locks["acct_free"], "swept once: due again only a day later")
	require.EqualValues(t, 1, sweeps.View().Succeeded)
}
