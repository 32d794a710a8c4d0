package storetest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store"
	"github.com/billsync/billsync/store/storetest"
)

// deliver stores a delivery as the intake does.
func deliver(t *testing.T, st *store.Store, key, customer, remote string) {
	t.Helper()
	_, err := st.StoreReceipt(context.Background(), reconcile.Receipt{RemoteAddr: remote, Event: reconcile.Event{
		Provider: "stripe", DedupeKey: key, EventID: "id_" + key, Type: "invoice.paid", CustomerID: customer,
		APIVersion: "2025-08-27.basil", Payload: []byte(`{"id":"` + key + `"}`)}})
	require.NoError(t, err)
}

// applyPro reconciles the customer's queued job to Pro, as a worker would.
func applyPro(t *testing.T, st *store.Store) reconcile.Account {
	t.Helper()
	ctx := context.Background()
	plans, err := reconcile.ParsePlans(reconcile.ExamplePlans)
	require.NoError(t, err)
	jobs, err := st.Claim(ctx, "test", 1, time.Minute)
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	now, err := st.Now(ctx)
	require.NoError(t, err)
	start := now.Truncate(time.Hour)
	snap := reconcile.Snapshot{Provider: "stripe", CustomerID: jobs[0].CustomerID, Subscriptions: []reconcile.Subscription{{
		ID: "sub_1", Status: "active", Items: []reconcile.Item{{PriceRefs: []string{"price_pro"}, Quantity: 1,
			PeriodStart: start, PeriodEnd: start.AddDate(0, 1, 0)}}}}}
	_, err = st.Apply(ctx, jobs[0], now, reconcile.NewDecider(jobs[0], snap, plans, now))
	require.NoError(t, err)
	a, err := st.Account(ctx, "stripe", jobs[0].CustomerID)
	require.NoError(t, err)
	return a
}

// TestReadsShowWhatTheIntakeStored: the reads return the rows the product
// wrote, with the columns its own reads leave out.
func TestReadsShowWhatTheIntakeStored(t *testing.T) {
	t.Parallel()
	st := storetest.NewStore(t)
	deliver(t, st, "evt_a", "cus_1", "10.0.0.1")
	deliver(t, st, "evt_a", "cus_1", "10.0.0.2") // a copy
	deliver(t, st, "evt_b", "cus_2", "10.0.0.3")

	events := storetest.Events(t, st)
	require.Len(t, events, 2)
	a := storetest.EventByKey(t, st, "stripe", "evt_a")
	require.Equal(t, events[0], a)
	require.Equal(t, "id_evt_a", a.EventID)
	require.Equal(t, "cus_1", a.CustomerID)
	require.Equal(t, "2025-08-27.basil", a.APIVersion)
	require.Equal(t, `{"id":"evt_a"}`, string(a.Payload))
	require.Nil(t, a.EventTime)
	require.Equal(t, 2, a.SeenCount)
	require.Equal(t, 2, a.Receipts)
	require.Equal(t, reconcile.EventPending, a.Status)
	require.Equal(t, []storetest.EventRow{events[1]}, storetest.CustomerEvents(t, st, "stripe", "cus_2"))
	require.Empty(t, storetest.CustomerEvents(t, st, "kinde", "cus_2"))

	receipts := storetest.Receipts(t, st)
	require.Len(t, receipts, 3)
	require.Equal(t, storetest.ReceiptRow{EventID: a.ID, RemoteAddr: "10.0.0.2", Duplicate: true, Source: reconcile.SourceWebhook}, receipts[1])

	queue := storetest.Queue(t, st)
	require.Len(t, queue, 2)
	require.Equal(t, "cus_1", queue[0].CustomerID)
	require.Equal(t, reconcile.TriggerWebhook, queue[0].Trigger)
	require.True(t, queue[0].Due)
	require.Equal(t, queue[1], storetest.QueueRowOf(t, st, "stripe", "cus_2"))

	counts := storetest.Counts(t, st)
	require.Equal(t, 2, counts["inbox_events"])
	require.Equal(t, 3, counts["receipts"])
	require.Equal(t, 2, counts["reconcile_queue"])
	require.Zero(t, counts["accounts"])
	require.NotContains(t, counts, "schema_migrations")
}

// TestReadsShowWhatAReconcileWrote: accounts, grants, ledger sums and the
// log as a reconcile left them.
func TestReadsShowWhatAReconcileWrote(t *testing.T) {
	t.Parallel()
	st := storetest.NewStore(t)
	deliver(t, st, "evt_a", "cus_1", "")
	a := applyPro(t, st)

	require.Equal(t, []reconcile.Account{a}, storetest.Accounts(t, st))
	require.Equal(t, []storetest.Grant{{Plan: "pro", PeriodStart: a.PeriodStart.UTC(), Delta: 500, Current: true}},
		storetest.Grants(t, st, "stripe", "cus_1"))
	rows, sum := storetest.LedgerTotal(t, st, a.ID, "grant")
	require.Equal(t, 1, rows)
	require.EqualValues(t, 500, sum)
	rows, _ = storetest.LedgerTotal(t, st, a.ID, "usage")
	require.Zero(t, rows)
	rows, sum = storetest.LedgerTotal(t, st, 0, "")
	require.Equal(t, 1, rows)
	require.EqualValues(t, 500, sum)
	log := storetest.ReconcileLog(t, st)
	require.Len(t, log, 1)
	require.Equal(t, storetest.LogRow{AccountID: a.ID, Provider: "stripe", CustomerID: "cus_1", Trigger: reconcile.TriggerWebhook,
		Actor: log[0].Actor, Result: reconcile.ResultApplied, Outcome: log[0].Outcome}, log[0])
	require.Contains(t, log[0].Outcome, "Pro allowance granted")
	require.Empty(t, storetest.Queue(t, st), "the reconcile answered the queue row")
	require.Equal(t, reconcile.EventApplied, storetest.EventByKey(t, st, "stripe", "evt_a").Status)
}

// TestSetupChangesWhatItSays: each setup helper changes exactly its rows,
// as the store's own reads then see them.
func TestSetupChangesWhatItSays(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.NewStore(t)
	deliver(t, st, "evt_a", "cus_1", "")
	a := applyPro(t, st)

	storetest.DriftAccount(t, st, a.ID, "free", "")
	got, err := st.AccountByID(ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, "free", got.Plan)
	require.Equal(t, "active", got.Status, "an empty status keeps it")
	storetest.DriftAccount(t, st, a.ID, "team", "canceled")
	got, err = st.AccountByID(ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, []string{"team", "canceled"}, []string{got.Plan, got.Status})

	ev := storetest.EventByKey(t, st, "stripe", "evt_a")
	storetest.SetEventStatus(t, st, ev.ID, reconcile.EventDead, "gave up")
	storetest.SetEventPayload(t, st, ev.ID, []byte(`{"x":1}`))
	stored, err := st.Event(ctx, ev.ID)
	require.NoError(t, err)
	require.Equal(t, []string{"dead", "gave up"}, []string{string(stored.Status), stored.Outcome})
	payload, err := st.EventPayload(ctx, ev.ID)
	require.NoError(t, err)
	require.Equal(t, `{"x":1}`, string(payload))

	id := storetest.InsertEvent(t, st, storetest.EventRow{Provider: "stripe", DedupeKey: "evt_p", EventID: "evt_p",
		Type: "product.created", Payload: []byte(`{}`), Status: reconcile.EventIgnored, Outcome: "names no customer"})
	p := storetest.EventByKey(t, st, "stripe", "evt_p")
	require.Equal(t, id, p.ID)
	require.Empty(t, p.CustomerID)
	require.Zero(t, p.Receipts)
	require.Equal(t, reconcile.EventIgnored, p.Status)

	storetest.SetQueueDead(t, st, "stripe", "cus_1", 8, "stripe: 503")
	retries, err := st.Retries(ctx, 10)
	require.NoError(t, err)
	require.Len(t, retries, 1)
	require.Equal(t, []any{"cus_1", a.ID, "dead", 8, "stripe: 503"},
		[]any{retries[0].CustomerID, retries[0].AccountID, retries[0].Status, retries[0].Attempts, retries[0].LastError})
	storetest.SetQueueDead(t, st, "stripe", "cus_1", 0, "") // the row exists now: updated
	q := storetest.QueueRowOf(t, st, "stripe", "cus_1")
	require.Equal(t, []any{"dead", 0, ""}, []any{q.Status, q.Attempts, q.LastError})

	deliver(t, st, "evt_b", "cus_2", "")
	storetest.LeaseQueueRow(t, st, "stripe", "cus_2", "host-1-worker-0", time.Hour)
	_, err = st.Hold(ctx, "stripe", "cus_2", reconcile.TriggerResync, "me", time.Minute)
	require.ErrorIs(t, err, reconcile.ErrHeld)
	require.ErrorContains(t, err, "host-1-worker-0")
	q = storetest.QueueRowOf(t, st, "stripe", "cus_2")
	require.Equal(t, "host-1-worker-0", q.LockedBy)
	require.NotNil(t, q.LockedUntil)

	storetest.LoseWebhooks(t, st, "stripe", "cus_2")
	require.Empty(t, storetest.CustomerEvents(t, st, "stripe", "cus_2"))
	require.Len(t, storetest.Queue(t, st), 1, "cus_1's row stays")
	require.Equal(t, 1, storetest.Counts(t, st)["receipts"], "cus_2's receipt went with its event")

	run, err := st.StartSweep(ctx, "stripe", "", reconcile.RunSweep)
	require.NoError(t, err)
	require.Equal(t, 1, storetest.SweepRunCount(t, st, "stripe", "running"))
	require.NoError(t, st.FinishSweep(ctx, run, errors.New("test")))
	require.Zero(t, storetest.SweepRunCount(t, st, "", "running"))
	require.Equal(t, 1, storetest.SweepRunCount(t, st, "", "failed"))
	require.Zero(t, storetest.SweepRunCount(t, st, "kinde", ""))

	require.NoError(t, st.StartSession(ctx, []byte("session"), time.Hour))
	storetest.ExpireSessions(t, st)
	active, err := st.SessionActive(ctx, []byte("session"))
	require.NoError(t, err)
	require.False(t, active)

	storetest.Checkpoint(t, st)
}

// failRecorder is a TB that records a failure instead of ending the test.
type failRecorder struct {
	testing.TB
	failed bool
}

func (f *failRecorder) Errorf(string, ...any) { f.failed = true }
func (f *failRecorder) FailNow()              { panic(f) }

// failsWith runs fn and reports whether it failed its TB.
func failsWith(t *testing.T, fn func(storetest.TB)) (failed bool) {
	f := &failRecorder{TB: t}
	defer func() {
		if r := recover(); r != nil && r != any(f) {
			panic(r)
		}
		failed = f.failed
	}()
	fn(f)
	return false
}

// TestSetupThatChangesNothingFails: a setup that finds nothing to change
// fails the test, so a test never passes for the wrong reason.
func TestSetupThatChangesNothingFails(t *testing.T) {
	t.Parallel()
	st := storetest.NewStore(t)
	for name, fn := range map[string]func(storetest.TB){
		"DriftAccount":   func(tb storetest.TB) { storetest.DriftAccount(tb, st, 99, "free", "") },
		"LeaseQueueRow":  func(tb storetest.TB) { storetest.LeaseQueueRow(tb, st, "stripe", "cus_none", "w", time.Hour) },
		"SetEventStatus": func(tb storetest.TB) { storetest.SetEventStatus(tb, st, 99, reconcile.EventDead, "x") },
		"LoseWebhooks":   func(tb storetest.TB) { storetest.LoseWebhooks(tb, st, "stripe", "cus_none") }, // no event to lose
		"ExpireSessions": func(tb storetest.TB) { storetest.ExpireSessions(tb, st) },
		"EventByKey":     func(tb storetest.TB) { storetest.EventByKey(tb, st, "stripe", "evt_none") },
		"QueueRowOf":     func(tb storetest.TB) { storetest.QueueRowOf(tb, st, "stripe", "cus_none") },
	} {
		require.True(t, failsWith(t, fn), name)
	}
}

// TestTableLockHoldsTheStore: a statement of the store on a locked table
// waits in the server until the lock is released.
func TestTableLockHoldsTheStore(t *testing.T) {
	t.Parallel()
	st := storetest.NewStore(t)
	lock := storetest.LockTable(t, st, "inbox_events")
	stored := make(chan error, 1)
	go func() {
		_, err := st.StoreReceipt(context.Background(), reconcile.Receipt{Event: reconcile.Event{
			Provider: "stripe", DedupeKey: "evt_wait", EventID: "evt_wait", Type: "invoice.paid", Payload: []byte(`{}`)}})
		stored <- err
	}()
	lock.WaitForWaiter(t)
	select {
	case err := <-stored:
		t.Fatalf("the delivery was stored through the lock: %v", err)
	default:
	}
	lock.Release(t)
	require.NoError(t, <-stored)
	lock.WaitIdle(t)
	require.Equal(t, 1, storetest.Counts(t, st)["inbox_events"])
}

// TestDatabasesByPrefix lists the server's databases by name.
func TestDatabasesByPrefix(t *testing.T) {
	t.Parallel()
	st := storetest.NewStore(t)
	require.NotEmpty(t, storetest.Databases(t, st, "billsync_test_"), "this test's own database")
	require.Empty(t, storetest.Databases(t, st, "billsync_none_"))
}
