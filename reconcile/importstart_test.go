package reconcile_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/mocks/mock"
	"github.com/billsync/billsync/reconcile"
)

// TestStartImportsLooksAgainUnderTheLock: a replica that found no import
// completed, while another replica was finishing one, starts none once it
// holds the lock and sees it completed; and one that finds it not
// completed starts an import.
func TestStartImportsLooksAgainUnderTheLock(t *testing.T) {
	for _, tc := range []struct {
		name         string
		underTheLock bool // what Imported says once the lock is held
		started      int
	}{
		{"CompletedMeanwhile", true, 0},
		{"NotCompleted", false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var locked, runs atomic.Int32
			finished := make(chan struct{})
			st := &mock.SweepStore{
				SweepLockFn: func(ctx context.Context, _, _ string) (context.Context, func(), error) {
					locked.Add(1)
					return ctx, func() { locked.Add(-1) }, nil
				},
				ImportedFn: func(context.Context, string, string) (bool, error) {
					return locked.Load() > 0 && tc.underTheLock, nil
				},
				StartSweepFn: func(_ context.Context, provider, _, kind string) (reconcile.SweepRun, error) {
					runs.Add(1)
					return reconcile.SweepRun{ID: 1, Provider: provider, Kind: kind, Progress: -1}, nil
				},
				EnqueueUnsweptFn: func(context.Context, int64, string, string, time.Time, time.Duration) (int, error) { return 0, nil },
				FinishSweepFn: func(context.Context, reconcile.SweepRun, error) error {
					close(finished)
					return nil
				},
			}
			sw, err := reconcile.NewSweeper(reconcile.SweeperConfig{Store: st, Provider: "kinde", Plans: &reconcile.Plans{}})
			require.NoError(t, err)
			runner, err := reconcile.NewSweepRunner(reconcile.SweepRunnerConfig{Sweepers: []*reconcile.Sweeper{sw}})
			require.NoError(t, err)
			starts := runner.StartImports(context.Background())
			require.Len(t, starts, tc.started)
			require.EqualValues(t, tc.started, runs.Load())
			if tc.started > 0 {
				require.Equal(t, reconcile.RunImport, starts[0].Run.Kind)
				<-finished
			}
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			runner.Run(ctx)
			require.Zero(t, locked.Load(), "the lock is released")
		})
	}
}

// TestSweepOfANeverImportedProviderIsItsImport: a sweep asked for (the
// schedule, billsync sweep, the admin) of a provider whose customers were
// never all listed starts as its import; once imported, as a sweep. The
// store is asked under the lock.
func TestSweepOfANeverImportedProviderIsItsImport(t *testing.T) {
	for _, tc := range []struct {
		name     string
		imported bool
		want     string
	}{
		{"NeverImported", false, reconcile.RunImport},
		{"Imported", true, reconcile.RunSweep},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var locked atomic.Int32
			var started string
			st := &mock.SweepStore{
				SweepLockFn: func(ctx context.Context, _, _ string) (context.Context, func(), error) {
					locked.Add(1)
					return ctx, func() { locked.Add(-1) }, nil
				},
				ImportedFn: func(context.Context, string, string) (bool, error) {
					require.EqualValues(t, 1, locked.Load(), "asked under the lock")
					return tc.imported, nil
				},
				StartSweepFn: func(_ context.Context, provider, _, kind string) (reconcile.SweepRun, error) {
					started = kind
					return reconcile.SweepRun{ID: 1, Provider: provider, Kind: kind, Progress: -1}, nil
				},
				EnqueueUnsweptFn: func(context.Context, int64, string, string, time.Time, time.Duration) (int, error) { return 0, nil },
				FinishSweepFn:    func(context.Context, reconcile.SweepRun, error) error { return nil },
			}
			sw, err := reconcile.NewSweeper(reconcile.SweeperConfig{Store: st, Provider: "kinde", Plans: &reconcile.Plans{}})
			require.NoError(t, err)
			rep, err := sw.Run(context.Background())
			require.NoError(t, err)
			require.Equal(t, tc.want, started)
			require.Equal(t, tc.want, rep.Run.Kind)
			require.Zero(t, locked.Load(), "the lock is released")
		})
	}
}
