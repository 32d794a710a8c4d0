package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store/storetest"
)

// TestHold: a resync leases the customer's row to itself (creating it, or
// reviving it from dead with its attempts reset), and is refused with
// ErrHeld, leaving the request queued, while a worker holds it.
func TestHold(t *testing.T) {
	ctx := context.Background()
	st := storetest.NewStore(t)

	job, err := st.Hold(ctx, "stripe", "cus_new", reconcile.TriggerResync, "cli-1", time.Minute)
	require.NoError(t, err)
	require.Equal(t, reconcile.TriggerResync, job.Trigger)
	jobs, err := st.Claim(ctx, "w", 10, time.Minute)
	require.NoError(t, err)
	require.Empty(t, jobs, "a held row is not claimable")

	receive(t, st, "evt_1", "cus_1")
	claimed := claimOne(t, st)
	_, err = st.Retry(ctx, claimed, time.Time{}, reconcile.Outcome{Result: reconcile.ResultDead, Text: "dead"}, 0)
	require.NoError(t, err)
	job, err = st.Hold(ctx, "stripe", "cus_1", reconcile.TriggerResync, "cli-2", time.Minute)
	require.NoError(t, err)
	require.Equal(t, claimed.ID, job.ID)
	require.Equal(t, 0, job.Attempts, "a resync revives a dead row with a fresh try")

	_, err = st.Hold(ctx, "stripe", "cus_1", reconcile.TriggerReplay, "cli-3", time.Minute)
	require.ErrorIs(t, err, reconcile.ErrHeld)
	require.ErrorContains(t, err, "held by cli-2")
	var n int
	require.NoError(t, st.Pool().QueryRow(ctx, `SELECT count(*) FROM reconcile_queue WHERE customer_id = 'cus_1' AND status = 'pending'`).Scan(&n))
	require.Equal(t, 1, n)
}

// TestFindAccounts matches an id, a customer id, a user reference, or an
// email in any case, and nothing else.
func TestFindAccounts(t *testing.T) {
	ctx := context.Background()
	st := storetest.NewStore(t)
	for _, c := range []struct{ cus, ref, email string }{{"cus_a", "u_a", "Ann@Example.com"}, {"cus_b", "u_b", ""}} {
		job, err := st.Hold(ctx, "stripe", c.cus, reconcile.TriggerResync, "t", time.Minute)
		require.NoError(t, err)
		snap := liveSnap(c.cus, "pro")
		snap.UserRef, snap.Email = c.ref, c.email
		_, err = applySnap(ctx, st, job, dbNow(t, st), snap, testenv.Plans())
		require.NoError(t, err)
	}
	for q, want := range map[string]string{"1": "cus_a", "2": "cus_b", "cus_b": "cus_b", "u_a": "cus_a", "ann@EXAMPLE.COM": "cus_a"} {
		found, err := st.FindAccounts(ctx, q)
		require.NoError(t, err, q)
		require.Len(t, found, 1, q)
		require.Equal(t, want, found[0].CustomerID, q)
	}
	a, err := st.Account(ctx, "stripe", "cus_a")
	require.NoError(t, err)
	require.Equal(t, "Ann@Example.com", a.Email)
	for _, q := range []string{"3", "ann", "", "%", "99999999999999999999", "-1"} {
		_, err := st.FindAccounts(ctx, q)
		require.ErrorIs(t, err, reconcile.ErrNotFound, q)
	}
	// What PostgreSQL's text cannot hold is refused before it reaches it
	// (a 400 for the admin API and the console, not a 500).
	for _, q := range []string{"\x00", "a\x00b", "\xff", "cus_\xc3"} {
		_, err := st.FindAccounts(ctx, q)
		require.ErrorIs(t, err, reconcile.ErrInvalid, "%q", q)
	}
}
