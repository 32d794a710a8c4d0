package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store/storetest"
)

func TestSweepRunResumesAndRemembersCustomers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.NewStore(t)
	run, err := st.StartSweep(ctx, "stripe", "", reconcile.RunSweep)
	require.NoError(t, err)
	require.False(t, run.Resumed)
	run.Cursor, run.Healed = "cus_9", 1
	seen, err := st.SweepPage(ctx, run, []string{"cus_a", "cus_b"})
	require.NoError(t, err)
	require.Equal(t, 2, seen)

	// The sweeper dies; the next one resumes the run where it stopped.
	again, err := st.StartSweep(ctx, "stripe", "", reconcile.RunSweep)
	require.NoError(t, err)
	require.True(t, again.Resumed)
	require.Equal(t, run.ID, again.ID)
	require.Equal(t, "cus_9", again.Cursor)
	require.Equal(t, 2, again.Seen)
	require.Equal(t, 1, again.Healed)
	again.Cursor = "cus_7"
	seen, err = st.SweepPage(ctx, again, []string{"cus_b", "cus_c"})
	require.NoError(t, err)
	require.Equal(t, 3, seen, "a customer recorded before the crash is counted once")

	require.NoError(t, st.FinishSweep(ctx, again, nil))
	var status string
	require.NoError(t, st.Pool().QueryRow(ctx, `
		SELECT status, (SELECT count(*) FROM sweep_seen) FROM sweep_runs WHERE id = $1`, run.ID).Scan(&status, &seen))
	require.Equal(t, "succeeded", status)
	require.Zero(t, seen, "the run's memory goes with it")
	next, err := st.StartSweep(ctx, "stripe", "", reconcile.RunSweep)
	require.NoError(t, err)
	require.False(t, next.Resumed)
	require.NotEqual(t, run.ID, next.ID)

	// A run whose sweeper stopped long ago is closed, not resumed.
	_, err = st.SweepPage(ctx, next, []string{"cus_a"})
	require.NoError(t, err)
	_, err = st.Pool().Exec(ctx, `UPDATE sweep_runs SET heartbeat_at = now() - interval '7 hours' WHERE id = $1`, next.ID)
	require.NoError(t, err)
	fresh2, err := st.StartSweep(ctx, "stripe", "", reconcile.RunSweep)
	require.NoError(t, err)
	require.False(t, fresh2.Resumed)
	var errText string
	require.NoError(t, st.Pool().QueryRow(ctx, `SELECT status || ': ' || error FROM sweep_runs WHERE id = $1`, next.ID).Scan(&errText))
	require.Contains(t, errText, "failed: abandoned")
	require.NoError(t, st.Pool().QueryRow(ctx, `SELECT count(*) FROM sweep_seen`).Scan(&seen))
	require.Zero(t, seen, "an abandoned run's memory goes with it")
}

// TestEnqueueUnsweptPlansWithTheRunKnown: the run's rows are written after
// the table's statistics were taken (they know only an older run), so
// without fresh ones the planner expects one row for the run and joins
// every account against all of them, quadratic in the account count.
// EnqueueUnswept must plan with statistics that hold the current run.
func TestEnqueueUnsweptPlansWithTheRunKnown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.NewStore(t)
	ids := func(prefix string) []string {
		out := make([]string, 500)
		for i := range out {
			out[i] = fmt.Sprintf("%s_%d", prefix, i)
		}
		return out
	}
	old, err := st.StartSweep(ctx, "stripe", "", reconcile.RunSweep)
	require.NoError(t, err)
	_, err = st.SweepPage(ctx, old, ids("cus_old"))
	require.NoError(t, err)
	_, err = st.Pool().Exec(ctx, `ANALYZE sweep_seen`) // as autovacuum would, during the old run
	require.NoError(t, err)
	require.NoError(t, st.FinishSweep(ctx, old, nil))

	run, err := st.StartSweep(ctx, "stripe", "", reconcile.RunSweep)
	require.NoError(t, err)
	_, err = st.SweepPage(ctx, run, ids("cus_new"))
	require.NoError(t, err)
	_, err = st.EnqueueUnswept(ctx, run.ID, "stripe", "", time.Time{}, 0)
	require.NoError(t, err)
	var known []int64
	require.NoError(t, st.Pool().QueryRow(ctx, `
		SELECT most_common_vals::text::bigint[] FROM pg_stats WHERE tablename = 'sweep_seen' AND attname = 'run_id'`).Scan(&known))
	require.Equal(t, []int64{run.ID}, known, "the statistics the anti-join was planned with hold the current run")
}

// An import is a run of its own kind: a sweep that finds it interrupted
// resumes it as an import, its progress is kept for every replica to
// read, and the provider counts as imported once any run has succeeded.
func TestImportRunKindProgressAndImported(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.NewStore(t)
	imported, err := st.Imported(ctx, "stripe", "")
	require.NoError(t, err)
	require.False(t, imported, "a new database has imported nobody")

	run, err := st.StartSweep(ctx, "stripe", "", reconcile.RunImport)
	require.NoError(t, err)
	require.Equal(t, reconcile.RunImport, run.Kind)
	require.Equal(t, reconcile.TriggerImport, run.Trigger())
	require.Negative(t, run.Progress, "nothing listed yet: unknown")
	run.Cursor, run.Progress = "cus_9", 0.25
	_, err = st.SweepPage(ctx, run, []string{"cus_a"})
	require.NoError(t, err)

	again, err := st.StartSweep(ctx, "stripe", "", reconcile.RunSweep)
	require.NoError(t, err)
	require.True(t, again.Resumed)
	require.Equal(t, reconcile.RunImport, again.Kind, "a sweep resumes the import it finds, as an import")
	require.InDelta(t, 0.25, again.Progress, 1e-6)
	runs, err := st.SweepRuns(ctx, 10)
	require.NoError(t, err)
	require.Len(t, runs, 1)
	require.Equal(t, reconcile.RunImport, runs[0].Kind)
	require.NotNil(t, runs[0].Progress)
	require.InDelta(t, 0.25, *runs[0].Progress, 1e-6)
	imported, err = st.Imported(ctx, "stripe", "")
	require.NoError(t, err)
	require.False(t, imported, "a running import has not imported")

	require.NoError(t, st.FinishSweep(ctx, again, nil))
	imported, err = st.Imported(ctx, "stripe", "")
	require.NoError(t, err)
	require.True(t, imported)
	imported, err = st.Imported(ctx, "kinde", "")
	require.NoError(t, err)
	require.False(t, imported, "per provider")
}

// TestEnqueueUnsweptQueuesAsTheRunsKind: the accounts an import's listing
// did not cover are queued with trigger import (and a sweep's with sweep),
// so their reconciles are recorded as the run's.
func TestEnqueueUnsweptQueuesAsTheRunsKind(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, kind := range []string{reconcile.RunImport, reconcile.RunSweep} {
		t.Run(kind, func(t *testing.T) {
			st := storetest.NewStore(t)
			storetest.BareAccount(t, st, "kinde", "customer_1")
			run, err := st.StartSweep(ctx, "kinde", "", kind)
			require.NoError(t, err)
			n, err := st.EnqueueUnswept(ctx, run.ID, "kinde", "", time.Time{}, 0)
			require.NoError(t, err)
			require.Equal(t, 1, n)
			require.Equal(t, run.Trigger(), storetest.QueueRowOf(t, st, "kinde", "customer_1").Trigger)
		})
	}
}

// TestRunningImports: only running imports, for /metrics.
func TestRunningImports(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.NewStore(t)
	sweep, err := st.StartSweep(ctx, "kinde", "", reconcile.RunSweep)
	require.NoError(t, err)
	imp, err := st.StartSweep(ctx, "stripe", "", reconcile.RunImport)
	require.NoError(t, err)
	runs, err := st.RunningImports(ctx)
	require.NoError(t, err)
	require.Len(t, runs, 1)
	require.Equal(t, imp.ID, runs[0].ID)
	require.NoError(t, st.FinishSweep(ctx, imp, nil))
	require.NoError(t, st.FinishSweep(ctx, sweep, nil))
	runs, err = st.RunningImports(ctx)
	require.NoError(t, err)
	require.Empty(t, runs)
}
