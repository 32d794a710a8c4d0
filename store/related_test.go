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

// TestResolveTurnsTheObjectsRow: a thin event's object resolved to a
// customer with no queue row: the object's row becomes the customer's (its
// id and lease kept, its failed reads forgotten), its events the
// customer's, and the customer's reconcile answers them.
func TestResolveTurnsTheObjectsRow(t *testing.T) {
	ctx := context.Background()
	st := storetest.NewStore(t)
	key := reconcile.Related{Type: "subscription", ID: "sub_1"}.Key()
	receive(t, st, "evt_thin_1", key)
	receive(t, st, "evt_thin_2", key)
	job := claimOne(t, st)
	require.Equal(t, key, job.CustomerID)
	_, err := st.Retry(ctx, job, dbNow(t, st), reconcile.Outcome{Result: reconcile.ResultRetry, Text: "stripe down"}, 0)
	require.NoError(t, err)
	job = claimOne(t, st)
	require.Equal(t, 1, job.Attempts)

	next, ok, err := st.Resolve(ctx, job, "cus_1")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, job.ID, next.ID, "the same row, under the same lease")
	require.Equal(t, "cus_1", next.CustomerID)
	require.Zero(t, next.Attempts)
	q := storetest.QueueRowOf(t, st, "stripe", "cus_1")
	require.True(t, q.Leased())
	require.Zero(t, q.Attempts)
	require.Len(t, storetest.Queue(t, st), 1)
	require.Len(t, storetest.CustomerEvents(t, st, "stripe", "cus_1"), 2)

	out, err := applySnap(ctx, st, next, dbNow(t, st), liveSnap("cus_1", "price_pro"), testenv.Plans())
	require.NoError(t, err)
	require.Equal(t, 2, out.Events)
	require.Equal(t, map[string]string{"evt_thin_1": "applied", "evt_thin_2": "applied"}, storetest.EventStatuses(t, st, "stripe", "cus_1"))
	require.Empty(t, storetest.Queue(t, st))
}

// TestResolveFoldsIntoTheCustomersRow: the customer is queued already
// (here: dead, and held by nobody): the object's row is folded into it,
// which is revived and due now; the object's row is gone and its events
// are the customer's, answered by that row's reconcile.
func TestResolveFoldsIntoTheCustomersRow(t *testing.T) {
	ctx := context.Background()
	st := storetest.NewStore(t)
	receive(t, st, "evt_plain", "cus_1")
	dead := claimOne(t, st)
	_, err := st.Retry(ctx, dead, dbNow(t, st), reconcile.Outcome{Result: reconcile.ResultDead, Text: "dead"}, time.Hour)
	require.NoError(t, err)

	key := reconcile.Related{Type: "invoice", ID: "in_1"}.Key()
	receive(t, st, "evt_thin", key)
	job := claimOne(t, st)
	require.Equal(t, key, job.CustomerID)
	_, ok, err := st.Resolve(ctx, job, "cus_1")
	require.NoError(t, err)
	require.False(t, ok, "folded: the customer's row answers")

	rows := storetest.Queue(t, st)
	require.Len(t, rows, 1)
	require.Equal(t, "cus_1", rows[0].CustomerID)
	require.Equal(t, "pending", rows[0].Status, "revived")
	require.True(t, rows[0].Due)
	require.Zero(t, rows[0].Attempts)
	require.Equal(t, map[string]string{"evt_plain": "dead", "evt_thin": "pending"}, storetest.EventStatuses(t, st, "stripe", "cus_1"))

	next := claimOne(t, st)
	require.Equal(t, dead.ID, next.ID)
	out, err := applySnap(ctx, st, next, dbNow(t, st), liveSnap("cus_1", "price_pro"), testenv.Plans())
	require.NoError(t, err)
	require.Equal(t, 2, out.Events)
}
