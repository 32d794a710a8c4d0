package store_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store"
	"github.com/billsync/billsync/store/scratch"
	"github.com/billsync/billsync/store/storetest"
)

var (
	periodStart = time.Date(2026, 11, 3, 0, 0, 0, 0, time.UTC)
	periodEnd   = time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
)

// liveSnap is customer with one active subscription of one item on price
// for the period periodStart–periodEnd.
func liveSnap(customer, price string) reconcile.Snapshot {
	return reconcile.Snapshot{Provider: "stripe", CustomerID: customer, Subscriptions: []reconcile.Subscription{{
		ID: "sub_" + customer, Status: "active",
		Items: []reconcile.Item{{PriceRefs: []string{price}, Quantity: 1, PeriodStart: periodStart, PeriodEnd: periodEnd}},
	}}}
}

// applySnap applies snap as the worker does: Decide runs inside the
// store's transaction, on the locked account.
func applySnap(ctx context.Context, st *store.Store, job reconcile.Job, obs time.Time, snap reconcile.Snapshot, plans *reconcile.Plans) (reconcile.Outcome, error) {
	return st.Apply(ctx, job, obs, reconcile.NewDecider(job, snap, plans, obs))
}

// receive stores a delivery of a new event for customer, as the intake does.
func receive(t *testing.T, st *store.Store, id, customer string) {
	t.Helper()
	_, err := st.StoreReceipt(context.Background(), reconcile.Receipt{Event: reconcile.Event{
		Provider: "stripe", DedupeKey: id, EventID: id, Type: "customer.subscription.updated",
		CustomerID: customer, Payload: []byte(`{}`)}})
	require.NoError(t, err)
}

// claimedJob returns a fresh store holding one stored event (evt_1, for
// cus_1) whose queue row this test has claimed.
func claimedJob(t *testing.T) (*store.Store, reconcile.Job) {
	t.Helper()
	st := storetest.NewStore(t)
	receive(t, st, "evt_1", "cus_1")
	return st, claimOne(t, st)
}

// dbNow reads the database clock, as a worker does for observed_at.
func dbNow(t *testing.T, st *store.Store) time.Time {
	t.Helper()
	now, err := st.Now(context.Background())
	require.NoError(t, err)
	return now
}

func claimOne(t *testing.T, st *store.Store) reconcile.Job {
	t.Helper()
	jobs, err := st.Claim(context.Background(), "test", 10, time.Minute)
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	return jobs[0]
}

// TestApplyCrashBetweenWrites injects a crash after the plan write and
// before the ledger write: nothing may be half-applied, and the re-run
// (after the lease) must end correct.
func TestApplyCrashBetweenWrites(t *testing.T) {
	ctx := context.Background()
	st, job := claimedJob(t)
	plans := testenv.Plans()

	scratch.CrashAfterAccountWrite(st, func() error { return errors.New("killed") })
	_, err := applySnap(ctx, st, job, dbNow(t, st), liveSnap("cus_1", "pro"), plans)
	require.ErrorContains(t, err, "killed")

	s := storetest.Customer(t, st, "stripe", "cus_1")
	require.Empty(t, s.Plan, "the plan write must roll back with the ledger write")
	require.Zero(t, s.Grants)
	require.Equal(t, map[string]string{"evt_1": "pending"}, storetest.EventStatuses(t, st, "stripe", "cus_1"))
	require.NotEmpty(t, s.Queue.Status, "the job must survive the crash")

	scratch.CrashAfterAccountWrite(st, nil)
	out, err := applySnap(ctx, st, job, dbNow(t, st), liveSnap("cus_1", "pro"), plans)
	require.NoError(t, err)
	require.Equal(t, reconcile.ResultApplied, out.Result)
	require.Equal(t, "account created on plan pro (active), Pro allowance granted (+500)", out.Text)
	require.Equal(t, 1, out.Events)
	s = storetest.Customer(t, st, "stripe", "cus_1")
	require.Equal(t, storetest.CustomerState{Plan: "pro", Status: "active", Balance: 500, Grants: 1,
		Events: map[string]int{"applied": 1}}, s, "nothing queued")
	require.Equal(t, map[string]string{"evt_1": "applied"}, storetest.EventStatuses(t, st, "stripe", "cus_1"))
	a, err := st.Account(ctx, "stripe", "cus_1")
	require.NoError(t, err)
	require.False(t, a.ObservedAt.IsZero(), "the account records when its snapshot was observed")
}

// TestApplyOutOfOrder applies a newer snapshot, then an older one: the
// older changes nothing, whatever it says.
func TestApplyOutOfOrder(t *testing.T) {
	ctx := context.Background()
	st, job := claimedJob(t)
	plans := testenv.Plans()
	older := dbNow(t, st)
	newer := older.Add(time.Millisecond)

	_, err := applySnap(ctx, st, job, newer, liveSnap("cus_1", "pro"), plans)
	require.NoError(t, err)
	canceled := liveSnap("cus_1", "free")
	canceled.Subscriptions[0].Status = "canceled"
	for _, at := range []time.Time{older, newer} { // an equal observed_at must not win either
		out, err := applySnap(ctx, st, job, at, canceled, plans)
		require.NoError(t, err)
		require.Equal(t, reconcile.ResultStale, out.Result)
		require.Contains(t, out.Text, "stale: a newer snapshot")
	}
	s := storetest.Customer(t, st, "stripe", "cus_1")
	require.Equal(t, "pro", s.Plan)
	require.EqualValues(t, 500, s.Balance)
	require.Equal(t, 1, s.Grants)
}

// TestApplyGrantsOncePerPeriodAndPlan: repeats grant nothing; free → pro
// tops up to 500; pro → free claws nothing back; back to pro grants nothing
// more; a new period grants again.
func TestApplyGrantsOncePerPeriodAndPlan(t *testing.T) {
	ctx := context.Background()
	st, job := claimedJob(t)
	plans := testenv.Plans()
	at := dbNow(t, st)
	steps := []struct {
		snap    reconcile.Snapshot
		balance int64
		grants  int
	}{
		{liveSnap("cus_1", "free"), 10, 1},
		{liveSnap("cus_1", "free"), 10, 1},
		{liveSnap("cus_1", "pro"), 500, 2},
		{liveSnap("cus_1", "pro"), 500, 2},
		{liveSnap("cus_1", "free"), 500, 2},
		{liveSnap("cus_1", "pro"), 500, 2},
	}
	for i, step := range steps {
		at = at.Add(time.Second)
		_, err := applySnap(ctx, st, job, at, step.snap, plans)
		require.NoError(t, err)
		s := storetest.Customer(t, st, "stripe", "cus_1")
		require.Equal(t, step.balance, s.Balance, "step %d", i)
		require.Equal(t, step.grants, s.Grants, "step %d", i)
	}
	next := liveSnap("cus_1", "pro")
	next.Subscriptions[0].Items[0].PeriodStart, next.Subscriptions[0].Items[0].PeriodEnd = periodEnd, periodEnd.AddDate(0, 1, 0)
	out, err := applySnap(ctx, st, job, at.Add(time.Second), next, plans)
	require.NoError(t, err)
	require.Equal(t, "period now starts 2026-12-03, Pro allowance granted (+500)", out.Text)
	s := storetest.Customer(t, st, "stripe", "cus_1")
	require.EqualValues(t, 500, s.Balance, "the balance is the current period's")
	require.Equal(t, 3, s.Grants)
}

// TestApplyPastDueWaitsForPayment: a failed renewal (past_due on the next
// period) keeps pro and its balance without a new grant, however often it
// is reconciled; paid again (active), the new period is granted once.
func TestApplyPastDueWaitsForPayment(t *testing.T) {
	ctx := context.Background()
	st, job := claimedJob(t)
	plans := testenv.Plans()
	at := dbNow(t, st)
	inPeriod := func(status string, start time.Time) reconcile.Snapshot {
		s := liveSnap("cus_1", "pro")
		s.Subscriptions[0].Status = status
		s.Subscriptions[0].Items[0].PeriodStart, s.Subscriptions[0].Items[0].PeriodEnd = start, start.AddDate(0, 1, 0)
		return s
	}
	steps := []struct {
		snap        reconcile.Snapshot
		status      string
		periodStart time.Time
		balance     int64
		grants      int
	}{
		{inPeriod("active", periodStart), "active", periodStart, 500, 1},
		{inPeriod("past_due", periodEnd), "past_due", periodStart, 500, 1}, // the renewal failed
		{inPeriod("past_due", periodEnd), "past_due", periodStart, 500, 1},
		{inPeriod("active", periodEnd), "active", periodEnd, 500, 2}, // paid: the new period's grant
		{inPeriod("active", periodEnd), "active", periodEnd, 500, 2},
	}
	for i, step := range steps {
		at = at.Add(time.Second)
		_, err := applySnap(ctx, st, job, at, step.snap, plans)
		require.NoError(t, err)
		a, err := st.Account(ctx, "stripe", "cus_1")
		require.NoError(t, err)
		require.Equal(t, "pro", a.Plan, "step %d", i)
		require.Equal(t, step.status, a.Status, "step %d", i)
		require.Equal(t, step.periodStart, a.PeriodStart.UTC(), "step %d", i)
		s := storetest.Customer(t, st, "stripe", "cus_1")
		require.Equal(t, step.balance, s.Balance, "step %d", i)
		require.Equal(t, step.grants, s.Grants, "step %d", i)
	}
}

// TestApplyKeepsJobWhenAnEventArrivesDuringTheFetch: an event received
// after observed_at is not answered by this snapshot; the job stays due.
func TestApplyKeepsJobWhenAnEventArrivesDuringTheFetch(t *testing.T) {
	ctx := context.Background()
	st, job := claimedJob(t)
	obs := dbNow(t, st)
	receive(t, st, "evt_2", "cus_1") // arrives while the fetch is in flight

	_, err := applySnap(ctx, st, job, obs, liveSnap("cus_1", "pro"), testenv.Plans())
	require.NoError(t, err)
	require.Equal(t, map[string]string{"evt_1": "applied", "evt_2": "pending"}, storetest.EventStatuses(t, st, "stripe", "cus_1"))
	require.NotEmpty(t, storetest.Customer(t, st, "stripe", "cus_1").Queue.Status, "queued")
	again := claimOne(t, st)
	require.Equal(t, job.ID, again.ID, "the kept row is due now and claimable")
}

func TestRetryThenDeadThenRevived(t *testing.T) {
	ctx := context.Background()
	st, job := claimedJob(t)
	obs := dbNow(t, st)

	out, err := st.Retry(ctx, job, obs, reconcile.Outcome{Result: reconcile.ResultRetry, Text: "stripe: 503"}, time.Hour)
	require.NoError(t, err)
	require.Equal(t, reconcile.ResultRetry, out.Result)
	jobs, err := st.Claim(ctx, "test", 10, time.Minute)
	require.NoError(t, err)
	require.Empty(t, jobs, "a job in backoff is not due")

	out, err = st.Retry(ctx, job, obs, reconcile.Outcome{Result: reconcile.ResultDead, Text: "stripe: 503"}, time.Hour)
	require.NoError(t, err)
	require.Equal(t, reconcile.ResultDead, out.Result)
	require.Equal(t, map[string]string{"evt_1": "dead"}, storetest.EventStatuses(t, st, "stripe", "cus_1"))
	var status, lastErr string
	var attempts int
	require.NoError(t, st.Pool().QueryRow(ctx, `SELECT status, attempts, last_error FROM reconcile_queue`).Scan(&status, &attempts, &lastErr))
	require.Equal(t, "dead", status)
	require.Equal(t, 2, attempts)
	require.Equal(t, "stripe: 503", lastErr)

	// A new signal revives the customer; its reconcile answers the dead event too.
	receive(t, st, "evt_2", "cus_1")
	job = claimOne(t, st)
	require.Zero(t, job.Attempts)
	obs = dbNow(t, st)
	_, err = applySnap(ctx, st, job, obs, liveSnap("cus_1", "pro"), testenv.Plans())
	require.NoError(t, err)
	require.Equal(t, map[string]string{"evt_1": "applied", "evt_2": "applied"}, storetest.EventStatuses(t, st, "stripe", "cus_1"))
	require.Empty(t, storetest.Customer(t, st, "stripe", "cus_1").Queue.Status, "nothing queued")
}

func TestClaimSkipsLockedAndReclaimsExpiredLeases(t *testing.T) {
	ctx := context.Background()
	st := storetest.NewStore(t)
	for i := range 5 {
		receive(t, st, fmt.Sprintf("evt_%d", i), fmt.Sprintf("cus_%d", i))
	}
	a, err := st.Claim(ctx, "a", 3, time.Minute)
	require.NoError(t, err)
	b, err := st.Claim(ctx, "b", 10, time.Minute)
	require.NoError(t, err)
	require.Len(t, a, 3)
	require.Len(t, b, 2, "a second claimer gets only what the first did not hold")
	seen := map[int64]bool{}
	for _, j := range append(a, b...) {
		require.False(t, seen[j.ID])
		seen[j.ID] = true
	}
	require.NoError(t, st.Release(ctx, "a", a[:1]))
	c, err := st.Claim(ctx, "c", 10, time.Millisecond)
	require.NoError(t, err)
	require.Len(t, c, 1, "a released lease is claimable at once")
	var d []reconcile.Job
	storetest.WaitFor(t, "an expired lease (its worker died) is claimable again", func() bool { // c's 1 ms lease runs out: c "died"
		d, err = st.Claim(ctx, "d", 10, time.Minute)
		return err == nil && len(d) == 1
	})
	require.Equal(t, c[0].ID, d[0].ID)
}

// TestApplyWaitsForAnIntakeInFlight: an intake transaction that has stored
// a new event and touched the customer's queue row, but not yet committed,
// when the reconcile starts. Its event was received before observed_at, so
// the reconcile must answer it (or keep the customer queued): it may never
// be left pending with no queue row.
func TestApplyWaitsForAnIntakeInFlight(t *testing.T) {
	ctx := context.Background()
	st, job := claimedJob(t)

	intake, err := st.Pool().Begin(ctx)
	require.NoError(t, err)
	defer intake.Rollback(ctx) //nolint:errcheck // committed below
	_, err = intake.Exec(ctx, `
		INSERT INTO inbox_events (provider, dedupe_key, event_id, type, customer_id, payload)
		VALUES ('stripe', 'evt_2', 'evt_2', 'invoice.paid', 'cus_1', '\x7b7d')`)
	require.NoError(t, err)
	_, err = intake.Exec(ctx, `UPDATE reconcile_queue SET requested_at = now(), due_at = now() WHERE id = $1`, job.ID)
	require.NoError(t, err)
	obs, err := st.Now(ctx) // after the intake's now(): its event counts as received before
	require.NoError(t, err)

	plans := testenv.Plans()
	applied := make(chan error, 1)
	go func() {
		_, err := applySnap(ctx, st, job, obs, liveSnap("cus_1", "pro"), plans)
		applied <- err
	}()
	// Apply must be waiting for the row the intake holds before it commits.
	storetest.WaitFor(t, "Apply waits for the intake's row lock", func() bool {
		var waiting bool
		err := st.Pool().QueryRow(ctx, `
			SELECT EXISTS (SELECT 1 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
			               WHERE NOT l.granted AND a.datname = current_database())`).Scan(&waiting)
		return err == nil && waiting
	})
	require.NoError(t, intake.Commit(ctx))
	require.NoError(t, <-applied)

	s, keys := storetest.Customer(t, st, "stripe", "cus_1"), storetest.EventStatuses(t, st, "stripe", "cus_1")
	lost := keys["evt_2"] == "pending" && s.Queue.Status == ""
	require.False(t, lost, "evt_2 left pending with nothing queued to answer it: %+v %v", s, keys)
	require.Equal(t, map[string]string{"evt_1": "applied", "evt_2": "applied"}, keys)
}
