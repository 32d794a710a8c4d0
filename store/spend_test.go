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

// TestSpendIsSharedByReplicas: two stores on one database, as two
// replicas: what one reports the other reads, each counts the replicas
// running workers (itself included), a replica that leaves is no longer
// counted, and a process without a worker is never counted.
func TestSpendIsSharedByReplicas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := storetest.URL(t)
	a := storetest.OpenStore(t, url, store.Options{})
	b := storetest.OpenStore(t, url, store.Options{})

	sp, err := a.ReportSpend(ctx, "stripe", "a", map[string]int64{"GET /v1/customers/{id}": 3}, true)
	require.NoError(t, err)
	require.Empty(t, sp.Reads, "the record before this report")
	require.Equal(t, 1, sp.Replicas)

	sp, err = b.ReportSpend(ctx, "stripe", "b", map[string]int64{"GET /v1/customers/{id}": 2, "GET /v1/events": 1}, true)
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"GET /v1/customers/{id}": 3}, sp.Reads, "b sees what a read")
	require.Equal(t, 2, sp.Replicas)
	day := sp.Now.UTC().Truncate(24 * time.Hour)
	require.True(t, sp.Since.Equal(day), "since the start of today (UTC): %s", sp.Since)

	sp, err = a.ReportSpend(ctx, "stripe", "a", nil, true)
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"GET /v1/customers/{id}": 5, "GET /v1/events": 1}, sp.Reads)
	require.Equal(t, 2, sp.Replicas)

	sp, err = a.ReportSpend(ctx, "kinde", "a", nil, true)
	require.NoError(t, err)
	require.Empty(t, sp.Reads, "each provider its own")
	require.Equal(t, 1, sp.Replicas)

	sp, err = storetest.OpenStore(t, url, store.Options{}).ReportSpend(ctx, "stripe", "cli", map[string]int64{"GET /v1/customers": 1}, false)
	require.NoError(t, err)
	require.Equal(t, 2, sp.Replicas, "a command without a worker takes no share")

	require.NoError(t, b.LeaveSpend(ctx, "stripe", "b"))
	sp, err = a.ReportSpend(ctx, "stripe", "a", nil, true)
	require.NoError(t, err)
	require.Equal(t, 1, sp.Replicas, "b left")
	require.EqualValues(t, 1, sp.Reads["GET /v1/customers"], "the command's reads count")
}

// TestSpendWindow: reads and transactions count over the last 30 UTC
// days, today included; older days are dropped after 60; replicas not seen
// lately are not counted.
func TestSpendWindow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.NewStore(t)
	pool := st.Pool()
	_, err := pool.Exec(ctx, `
		INSERT INTO provider_reads (provider, day, operation, reads) VALUES
			('stripe', (now() AT TIME ZONE 'UTC')::date - 29, 'GET /v1/events', 10),
			('stripe', (now() AT TIME ZONE 'UTC')::date - 30, 'GET /v1/events', 100),
			('stripe', (now() AT TIME ZONE 'UTC')::date - 61, 'GET /v1/events', 1000);
		INSERT INTO provider_transactions (provider, day, transactions) VALUES
			('stripe', (now() AT TIME ZONE 'UTC')::date - 29, 4),
			('stripe', (now() AT TIME ZONE 'UTC')::date - 30, 40);
		INSERT INTO budget_replicas (provider, holder, seen_at) VALUES ('stripe', 'gone', now() - interval '1 minute')`)
	require.NoError(t, err)

	sp, err := st.ReportSpend(ctx, "stripe", "me", map[string]int64{"GET /v1/events": 1}, true)
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"GET /v1/events": 10}, sp.Reads, "29 days ago counts; 30 does not")
	require.EqualValues(t, 4, sp.Transactions)
	require.Equal(t, 1, sp.Replicas, "a replica not seen for a minute is not counted")
	require.Equal(t, sp.Now.UTC().Truncate(24*time.Hour).Add(-29*24*time.Hour), sp.Since.UTC())

	var days int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM provider_reads WHERE provider = 'stripe'`).Scan(&days))
	require.Equal(t, 3, days, "61 days ago is dropped; 29, 30 and today stay")
}

// TestTransactionsCountedOnce: a payment's event counts once however many
// copies arrive, by webhook or by the feed; other events never.
func TestTransactionsCountedOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.NewStore(t)
	paid := reconcile.Event{Provider: "stripe", DedupeKey: "evt_paid", EventID: "evt_paid", Type: "invoice.paid",
		CustomerID: "cus_1", Payload: []byte(`{}`), Transaction: true}
	other := reconcile.Event{Provider: "stripe", DedupeKey: "evt_upd", EventID: "evt_upd", Type: "customer.subscription.updated",
		CustomerID: "cus_1", Payload: []byte(`{}`)}
	for _, d := range []reconcile.Receipt{
		{Event: paid}, {Event: paid}, {Event: paid, Source: reconcile.SourceFeed}, {Event: other},
	} {
		_, err := st.StoreReceipt(ctx, d)
		require.NoError(t, err)
	}
	sp, err := st.ReportSpend(ctx, "stripe", "me", nil, false)
	require.NoError(t, err)
	require.EqualValues(t, 1, sp.Transactions)
}

// TestConnectTransactionsCountedApart: a payment of a connected account's
// customer ("acct_…/cus_…") counts toward the connected accounts'
// transactions, once, never the platform's; a row counted before Connect
// (no connect_transactions written) reads as the platform's. Reads on
// behalf of connected accounts are kept under their own operation names.
func TestConnectTransactionsCountedApart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.NewStore(t)
	_, err := st.Pool().Exec(ctx, `
		INSERT INTO provider_transactions (provider, day, transactions) VALUES ('stripe', (now() AT TIME ZONE 'UTC')::date - 1, 5)`)
	require.NoError(t, err)
	paid := func(account, id string) reconcile.Event {
		return reconcile.Event{Provider: "stripe", DedupeKey: reconcile.Connected(account, id), EventID: id, Type: "invoice.paid",
			CustomerID: reconcile.Connected(account, "cus_1"), Payload: []byte(`{}`), Transaction: true}
	}
	for _, ev := range []reconcile.Event{
		paid("", "evt_1"), paid("acct_a", "evt_1"), paid("acct_a", "evt_1"), paid("acct_b", "evt_1"), paid("acct_b", "evt_2"),
	} {
		_, err := st.StoreReceipt(ctx, reconcile.Receipt{Event: ev})
		require.NoError(t, err)
	}
	connectOp := reconcile.ConnectOperation("GET /v1/events")
	_, err = st.ReportSpend(ctx, "stripe", "me", map[string]int64{"GET /v1/events": 1, connectOp: 2}, false)
	require.NoError(t, err)
	sp, err := st.ReportSpend(ctx, "stripe", "me", nil, false)
	require.NoError(t, err)
	require.EqualValues(t, 6, sp.Transactions, "the platform's: the row written before Connect and its one payment")
	require.EqualValues(t, 3, sp.ConnectTransactions, "the connected accounts' three payments, a copy counted once")
	require.Equal(t, map[string]int64{"GET /v1/events": 1, connectOp: 2}, sp.Reads)
}
