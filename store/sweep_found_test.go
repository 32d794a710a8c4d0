package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store/storetest"
)

// TestEnqueueFoundQueuesPacedWithTheReference: the customers a Finder
// found are queued with the run's trigger, Pace apart in the order found
// (a customer found twice once), each with the reference found, which
// beats an older event's and is never cleared by a page naming none; a row
// due sooner (a webhook's) keeps its time, a dead row is revived, and the
// next page's first customer follows the last one.
func TestEnqueueFoundQueuesPacedWithTheReference(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.NewStore(t)
	// cus_k (the hinted helper's customer) is queued by a webhook naming
	// kp_old, an hour old by the provider's clock.
	hinted(t, st, "evt_1", time.Now().Add(-time.Hour), "kp_old", "")
	storetest.SetQueueDead(t, st, "kinde", "cus_dead", 8, "kinde: 503")
	before := dbNow(t, st)

	const pace = time.Minute
	found := []reconcile.Found{
		{CustomerID: "cus_a", UserRef: "kp_a"},
		{CustomerID: "cus_k", UserRef: "kp_new"},
		{CustomerID: "cus_a", UserRef: "kp_a"}, // on the page twice
		{CustomerID: "cus_dead", UserRef: "org_dead"},
		{CustomerID: "cus_none"},
	}
	n, next, err := st.EnqueueFound(ctx, "kinde", reconcile.TriggerImport, found, time.Time{}, pace)
	require.NoError(t, err)
	require.Equal(t, 4, n, "one row per customer")
	require.WithinDuration(t, before.Add(5*pace), next, 5*time.Second, "after the page's last place")

	rows := map[string]storetest.QueueRow{}
	for _, q := range storetest.Queue(t, st) {
		rows[q.CustomerID] = q
	}
	require.Len(t, rows, 4)
	for c, q := range rows {
		require.Equal(t, reconcile.TriggerImport, q.Trigger, c)
		require.Equal(t, "pending", q.Status, c)
	}
	require.Zero(t, rows["cus_dead"].Attempts, "revived")
	require.True(t, rows["cus_dead"].Due, "revived, due at its old, sooner time")
	require.True(t, rows["cus_k"].Due, "the webhook's row keeps its sooner time")
	require.WithinDuration(t, before, rows["cus_a"].DueAt, 5*time.Second, "the first found is due now")
	require.Equal(t, 4*pace, rows["cus_none"].DueAt.Sub(rows["cus_a"].DueAt), "its place on the page, pace apart")

	refs := map[string]string{}
	for c := range rows {
		job, err := st.Hold(ctx, "kinde", c, reconcile.TriggerResync, "test", time.Minute)
		require.NoError(t, err)
		refs[c] = job.UserRef
		require.NoError(t, st.Release(ctx, "test", []reconcile.Job{job}))
	}
	require.Equal(t, map[string]string{"cus_a": "kp_a", "cus_k": "kp_new", "cus_dead": "org_dead", "cus_none": ""}, refs,
		"the reference found, newer than the webhook's")

	// The next page follows the last one; a page naming no reference
	// keeps the one found.
	n, next2, err := st.EnqueueFound(ctx, "kinde", reconcile.TriggerImport,
		[]reconcile.Found{{CustomerID: "cus_b"}, {CustomerID: "cus_a"}}, next, pace)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.Equal(t, next.Add(2*pace), next2)
	for _, q := range storetest.Queue(t, st) {
		if q.CustomerID == "cus_b" {
			require.Equal(t, next, q.DueAt, "the next page's first follows the last")
		}
	}
	job, err := st.Hold(ctx, "kinde", "cus_a", reconcile.TriggerResync, "test", time.Minute)
	require.NoError(t, err)
	require.Equal(t, "kp_a", job.UserRef, "not cleared by a page naming none")
}

// TestEnqueueUnsweptFollowsFrom: the accounts a Finder did not find are
// queued after the last customer it found, not beside them.
func TestEnqueueUnsweptFollowsFrom(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.NewStore(t)
	storetest.BareAccount(t, st, "kinde", "customer_1")
	run, err := st.StartSweep(ctx, "kinde", "", reconcile.RunSweep)
	require.NoError(t, err)
	from := dbNow(t, st).Add(time.Hour).Truncate(time.Microsecond).UTC()
	n, err := st.EnqueueUnswept(ctx, run.ID, "kinde", "", from, time.Second)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, from, storetest.QueueRowOf(t, st, "kinde", "customer_1").DueAt.UTC())
}

// TestEnqueueUnsweptLeavesConnectedAccounts: the platform's sweep queues
// the platform's own customers it did not list, never a Stripe Connect
// account's (their account's own sweep lists them).
func TestEnqueueUnsweptLeavesConnectedAccounts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.NewStore(t)
	storetest.BareAccount(t, st, "stripe", "cus_1")
	storetest.BareAccount(t, st, "stripe", reconcile.Connected("acct_a", "cus_1"))
	run, err := st.StartSweep(ctx, "stripe", "", reconcile.RunSweep)
	require.NoError(t, err)
	n, err := st.EnqueueUnswept(ctx, run.ID, "stripe", "", time.Time{}, 0)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	storetest.QueueRowOf(t, st, "stripe", "cus_1")
}
