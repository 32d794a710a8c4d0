package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store"
	"github.com/billsync/billsync/store/storetest"
)

// TestStoreCallsHaveADeadline: a call the database never answers (here: a
// row lock held by another transaction) ends at the store's timeout with
// ErrUnavailable, even when its caller's context has no deadline, as the
// worker's finishing calls do on shutdown.
func TestStoreCallsHaveADeadline(t *testing.T) {
	ctx := context.Background()
	url := storetest.URL(t)
	st := storetest.OpenStore(t, url, store.Options{Timeout: 200 * time.Millisecond})
	receive(t, st, "evt_1", "cus_1")
	job := claimOne(t, st)

	blocker, err := st.Pool().Begin(ctx)
	require.NoError(t, err)
	defer blocker.Rollback(ctx) //nolint:errcheck // only a lock holder
	_, err = blocker.Exec(ctx, `SELECT 1 FROM reconcile_queue WHERE id = $1 FOR UPDATE`, job.ID)
	require.NoError(t, err)

	_, err = applySnap(context.WithoutCancel(ctx), st, job, dbNow(t, st), liveSnap("cus_1", "pro"), testPlans(t))
	require.ErrorIs(t, err, reconcile.ErrUnavailable)
	_, err = st.Retry(ctx, job, time.Time{}, reconcile.Outcome{Result: reconcile.ResultRetry, Text: "x"}, time.Second)
	require.ErrorIs(t, err, reconcile.ErrUnavailable)
	require.NoError(t, blocker.Rollback(ctx))
	require.Equal(t, "pending", stateOf(t, st, "cus_1").eventStatus["evt_1"], "nothing was written")
}

// TestExtendRenewsOnlyLeasesStillHeld: the heartbeat moves locked_until
// forward for the worker's own jobs, and reports a job it lost.
func TestExtendRenewsOnlyLeasesStillHeld(t *testing.T) {
	ctx := context.Background()
	st := storetest.NewStore(t)
	receive(t, st, "evt_1", "cus_1")
	receive(t, st, "evt_2", "cus_2")
	jobs, err := st.Claim(ctx, "a", 10, time.Second)
	require.NoError(t, err)
	require.Len(t, jobs, 2)

	lockedUntil := func(id int64) time.Time {
		var until time.Time
		require.NoError(t, st.Pool().QueryRow(ctx, `SELECT locked_until FROM reconcile_queue WHERE id = $1`, id).Scan(&until))
		return until
	}
	before := lockedUntil(jobs[0].ID)
	n, err := st.Extend(ctx, "a", jobs, time.Hour)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.True(t, lockedUntil(jobs[0].ID).After(before.Add(50*time.Minute)))

	// Another worker took the second job after the lease ran out.
	_, err = st.Pool().Exec(ctx, `UPDATE reconcile_queue SET locked_by = 'b' WHERE id = $1`, jobs[1].ID)
	require.NoError(t, err)
	n, err = st.Extend(ctx, "a", jobs, time.Hour)
	require.NoError(t, err)
	require.Equal(t, 1, n, "a lease another worker holds is not renewed")
}

// TestRetryBeforeTheClockWasRead: a failure recorded before observed_at
// was known is logged at the time it was written.
func TestRetryBeforeTheClockWasRead(t *testing.T) {
	ctx := context.Background()
	st, job := claimedJob(t)
	out, err := st.Retry(ctx, job, time.Time{}, reconcile.Outcome{Result: reconcile.ResultDead, Text: "dead after 1 attempts: store: boom"}, time.Second)
	require.NoError(t, err)
	require.Equal(t, 1, out.Events)
	var observed time.Time
	var result string
	require.NoError(t, st.Pool().QueryRow(ctx, `SELECT observed_at, result FROM reconcile_log`).Scan(&observed, &result))
	require.False(t, observed.IsZero())
	require.Equal(t, "dead", result)
	require.Equal(t, map[string]string{"evt_1": "dead"}, stateOf(t, st, "cus_1").eventStatus)
}
