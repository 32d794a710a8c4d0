package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store"
	"github.com/billsync/billsync/store/storetest"
)

const retention = 90 * 24 * time.Hour

// age moves an event's receipt times, the event's own and its customer's
// reconcile log rows days into the past.
func age(t *testing.T, st *store.Store, dedupeKey string, days int) {
	t.Helper()
	ctx := context.Background()
	_, err := st.Pool().Exec(ctx, `
		WITH e AS (UPDATE inbox_events SET received_at = now() - make_interval(days => $2),
		               last_seen_at = now() - make_interval(days => $2), processed_at = now() - make_interval(days => $2)
		           WHERE dedupe_key = $1 RETURNING id, provider, customer_id),
		     r AS (UPDATE receipts SET received_at = now() - make_interval(days => $2) WHERE event_id IN (SELECT id FROM e))
		UPDATE reconcile_log l SET created_at = now() - make_interval(days => $2)
		FROM e WHERE l.provider = e.provider AND l.customer_id = e.customer_id`, dedupeKey, days)
	require.NoError(t, err)
}

// reconciled stores a delivery of event key for customer (copies more
// deliveries of it) and applies a Pro snapshot as the worker does: the
// event is answered, the account, its grant and a log row written.
func reconciled(t *testing.T, st *store.Store, key, customer, userRef string, copies int) {
	t.Helper()
	ctx := context.Background()
	for range copies + 1 {
		_, err := st.StoreReceipt(ctx, reconcile.Receipt{Event: reconcile.Event{
			Provider: "stripe", DedupeKey: key, EventID: key, Type: "customer.subscription.updated",
			CustomerID: customer, UserRef: userRef, Payload: []byte(`{"id":"` + key + `"}`)}})
		require.NoError(t, err)
	}
	jobs, err := st.Claim(ctx, "test", 10, time.Minute)
	require.NoError(t, err)
	for _, job := range jobs {
		out, err := applySnap(ctx, st, job, dbNow(t, st), liveSnap(job.CustomerID, "price_pro"), testenv.Plans())
		require.NoError(t, err)
		require.NotEqual(t, reconcile.ResultRetry, out.Result)
	}
}

func eventKeys(t *testing.T, st *store.Store) map[string]string {
	t.Helper()
	keys := map[string]string{}
	for _, e := range storetest.Events(t, st) {
		keys[e.DedupeKey] = string(e.Status)
	}
	return keys
}

func count(t *testing.T, st *store.Store, sql string) int {
	t.Helper()
	var n int
	require.NoError(t, st.Pool().QueryRow(context.Background(), sql).Scan(&n))
	return n
}

// TestPruneDeletesOnlyOldHandledWork: a prune deletes handled events older
// than the cutoff with their receipts, and old reconcile log rows; it
// keeps pending and dead events (and their receipts), recent events (a
// copy of one is still a copy), an old event seen again lately, the
// newest event naming a user reference the account lacks, accounts and
// the ledger.
func TestPruneDeletesOnlyOldHandledWork(t *testing.T) {
	ctx := context.Background()
	st := storetest.NewStore(t)
	reconciled(t, st, "evt_old", "cus_old", "", 2)
	reconciled(t, st, "evt_recent", "cus_recent", "", 1)
	reconciled(t, st, "evt_seen_again", "cus_again", "", 0)
	receive(t, st, "evt_pending", "cus_pending")
	receive(t, st, "evt_dead", "cus_dead")
	storetest.SetEventStatus(t, st, storetest.EventByKey(t, st, "stripe", "evt_dead").ID, reconcile.EventDead, "gave up")
	storetest.SetQueueDead(t, st, "stripe", "cus_dead", 5, "timeout")
	// A Kinde-like customer: its older event names u9, its newest u10; the
	// account was never given a reference (an ignored reconcile).
	for i, key := range []string{"evt_ref_older", "evt_ref_newest"} {
		_, err := st.StoreReceipt(ctx, reconcile.Receipt{Event: reconcile.Event{Provider: "stripe", DedupeKey: key, EventID: key,
			Type: "customer.plan_changed", CustomerID: "cus_ref", UserRef: []string{"u9", "u10"}[i], Time: time.Now().Add(time.Duration(i) * time.Hour),
			Payload: []byte(`{}`)}})
		require.NoError(t, err)
		storetest.SetEventStatus(t, st, storetest.EventByKey(t, st, "stripe", key).ID, reconcile.EventIgnored, "no plan maps kp_x")
	}
	for _, key := range []string{"evt_old", "evt_seen_again", "evt_pending", "evt_dead", "evt_ref_older", "evt_ref_newest"} {
		age(t, st, key, 100)
	}
	// A copy of evt_seen_again arrives today.
	_, err := st.StoreReceipt(ctx, reconcile.Receipt{Event: reconcile.Event{Provider: "stripe", DedupeKey: "evt_seen_again",
		EventID: "evt_seen_again", Type: "customer.subscription.updated", CustomerID: "cus_again", Payload: []byte(`{}`)}})
	require.NoError(t, err)
	require.NoError(t, st.StartSession(ctx, []byte("expired"), time.Hour))
	require.NoError(t, st.StartSession(ctx, []byte("live"), time.Hour))
	_, err = st.Pool().Exec(ctx, `UPDATE console_sessions SET expires_at = now() - interval '1 minute' WHERE session_hash = 'expired'`)
	require.NoError(t, err)
	ledger := count(t, st, `SELECT count(*) FROM ledger`)
	accounts := storetest.Accounts(t, st)
	logBefore := count(t, st, `SELECT count(*) FROM reconcile_log`)
	require.Equal(t, 3, logBefore)

	p, err := st.Prune(ctx, reconcile.Retention{OlderThan: retention})
	require.NoError(t, err)
	require.Equal(t, map[string]string{
		"evt_recent": "applied", "evt_seen_again": "applied", "evt_pending": "pending", "evt_dead": "dead", "evt_ref_newest": "ignored",
	}, eventKeys(t, st))
	require.EqualValues(t, 2, p.Events, "evt_old and evt_ref_older")
	// evt_old's three deliveries; the 100-day-old one of each handled
	// event kept (evt_seen_again: today's copy stays; evt_ref_newest);
	// evt_ref_older's.
	require.EqualValues(t, 3+1+1+1, p.Receipts)
	require.Equal(t, 1, count(t, st, `SELECT count(*) FROM receipts r JOIN inbox_events e ON e.id = r.event_id WHERE e.dedupe_key = 'evt_seen_again'`))
	require.EqualValues(t, 2, p.LogRows, "cus_old's and cus_again's reconciles, 100 days old")
	require.EqualValues(t, 1, p.Sessions, "the expired session, however recently it expired")
	live, err := st.SessionActive(ctx, []byte("live"))
	require.NoError(t, err)
	require.True(t, live)
	require.Equal(t, 0, count(t, st, `SELECT count(*) FROM receipts r JOIN inbox_events e ON e.id = r.event_id WHERE e.dedupe_key = 'evt_old'`))
	require.Equal(t, 1, count(t, st, `SELECT count(*) FROM receipts r JOIN inbox_events e ON e.id = r.event_id WHERE e.dedupe_key = 'evt_pending'`))
	require.Equal(t, 1, count(t, st, `SELECT count(*) FROM receipts r JOIN inbox_events e ON e.id = r.event_id WHERE e.dedupe_key = 'evt_dead'`))
	require.Equal(t, 2, count(t, st, `SELECT count(*) FROM receipts r JOIN inbox_events e ON e.id = r.event_id WHERE e.dedupe_key = 'evt_recent'`))
	require.Equal(t, ledger, count(t, st, `SELECT count(*) FROM ledger`), "the ledger is never pruned")
	require.Equal(t, accounts, storetest.Accounts(t, st), "accounts are never pruned")
	require.Equal(t, 1, count(t, st, `SELECT count(*) FROM reconcile_queue WHERE status = 'dead'`))
	require.Equal(t, logBefore-2, count(t, st, `SELECT count(*) FROM reconcile_log`))

	// Dedupe still holds for the recent event: its copy is a copy.
	stored, err := st.StoreReceipt(ctx, reconcile.Receipt{Event: reconcile.Event{Provider: "stripe", DedupeKey: "evt_recent",
		EventID: "evt_recent", Type: "customer.subscription.updated", CustomerID: "cus_recent", Payload: []byte(`{}`)}})
	require.NoError(t, err)
	require.True(t, stored.Duplicate)
	require.Equal(t, 3, stored.SeenCount)

	// A second prune finds nothing more.
	p, err = st.Prune(ctx, reconcile.Retention{OlderThan: retention})
	require.NoError(t, err)
	require.Zero(t, p.Events+p.Receipts+p.LogRows)
}

// TestPruneInBoundedBatches: no statement deletes more than the batch.
func TestPruneInBoundedBatches(t *testing.T) {
	ctx := context.Background()
	st := storetest.NewStore(t)
	for _, key := range []string{"evt_a", "evt_b", "evt_c", "evt_d", "evt_e"} {
		reconciled(t, st, key, "cus_"+key, "", 0)
		age(t, st, key, 100)
	}
	p, err := st.Prune(ctx, reconcile.Retention{OlderThan: retention, Batch: 2})
	require.NoError(t, err)
	require.EqualValues(t, 5, p.Events)
	require.EqualValues(t, 5, p.Receipts)
	require.EqualValues(t, 5, p.LogRows)
	require.EqualValues(t, 2, p.MaxInBatch)
	// Three batches each for receipts, events and log rows (2, 2, 1), one
	// for the app's changes (today's), one for samples, one for the
	// connected accounts' sweep runs and one for sessions.
	require.Equal(t, 3+3+3+1+1+1+1, p.Batches)
	require.Empty(t, storetest.Events(t, st))
}

// TestPruneRefusesShortRetention: a cutoff a provider's retry could still
// cross is refused before anything is deleted.
func TestPruneRefusesShortRetention(t *testing.T) {
	st := storetest.NewStore(t)
	reconciled(t, st, "evt_1", "cus_1", "", 0)
	age(t, st, "evt_1", 2)
	before := storetest.Counts(t, st)
	_, err := st.Prune(context.Background(), reconcile.Retention{OlderThan: reconcile.MinRetention - time.Second})
	require.ErrorIs(t, err, reconcile.ErrInvalid)
	require.ErrorContains(t, err, "72h0m0s")
	require.Equal(t, before, storetest.Counts(t, st))
}

// TestPruneNeverWaitsOnALockedRow: a row another transaction holds (the
// intake counting a copy, a worker answering events) is passed over, not
// waited for; a later prune takes it.
func TestPruneNeverWaitsOnALockedRow(t *testing.T) {
	ctx := context.Background()
	st := storetest.NewStore(t)
	reconciled(t, st, "evt_held", "cus_held", "", 0)
	reconciled(t, st, "evt_free", "cus_free", "", 0)
	age(t, st, "evt_held", 100)
	age(t, st, "evt_free", 100)
	holder, err := st.Pool().Begin(ctx)
	require.NoError(t, err)
	defer holder.Rollback(ctx) //nolint:errcheck // only a lock holder
	_, err = holder.Exec(ctx, `SELECT 1 FROM inbox_events WHERE dedupe_key = 'evt_held' FOR UPDATE`)
	require.NoError(t, err)

	// The store's own deadline (10 s) would end a wait; the prune returns
	// having deleted the free event only.
	p, err := st.Prune(ctx, reconcile.Retention{OlderThan: retention})
	require.NoError(t, err)
	require.EqualValues(t, 1, p.Events)
	require.Equal(t, map[string]string{"evt_held": "applied"}, eventKeys(t, st))
	require.NoError(t, holder.Rollback(ctx))
	p, err = st.Prune(ctx, reconcile.Retention{OlderThan: retention})
	require.NoError(t, err)
	require.EqualValues(t, 1, p.Events)
	require.Empty(t, storetest.Events(t, st))
}

// TestPruneOneAtATime: a prune while another holds the lease (another
// replica) is refused with ErrPruneRunning and deletes nothing.
func TestPruneOneAtATime(t *testing.T) {
	ctx := context.Background()
	st := storetest.NewStore(t)
	reconciled(t, st, "evt_1", "cus_1", "", 0)
	age(t, st, "evt_1", 100)
	_, err := st.Pool().Exec(ctx, `INSERT INTO leases (name, token, holder, expires_at) VALUES ('prune', 'x', 'other', now() + interval '1 hour')`)
	require.NoError(t, err)
	_, err = st.Prune(ctx, reconcile.Retention{OlderThan: retention})
	require.ErrorIs(t, err, reconcile.ErrPruneRunning)
	require.Len(t, storetest.Events(t, st), 1)
	// The other's lease ran out (it died): the next prune takes it.
	_, err = st.Pool().Exec(ctx, `UPDATE leases SET expires_at = now() WHERE name = 'prune'`)
	require.NoError(t, err)
	p, err := st.Prune(ctx, reconcile.Retention{OlderThan: retention})
	require.NoError(t, err)
	require.EqualValues(t, 1, p.Events)
}

// TestPruneFinishedChanges: a prune deletes the app's changes older than
// the cutoff whose every delivery is finished (delivered or dead), with
// their deliveries and attempts; it keeps one with a pending delivery
// however old, and recent ones whatever their deliveries. A reader whose
// cursor is older than every change left pages on from the oldest left.
func TestPruneFinishedChanges(t *testing.T) {
	ctx := context.Background()
	ep := "http://app/hook"
	st := storetest.OpenStoreWithEndpoints(t, storetest.URL(t), store.Options{}, ep)
	ids := map[string]int64{}
	for _, c := range []string{"a", "b", "c", "d"} {
		ids[c] = grantedAccount(t, st, "cus_"+c, "u"+c, "price_pro")
	}
	_, err := st.Debit(ctx, reconcile.Debit{UserRef: "ud", Key: "k1", Amount: 1}, reconcile.DecideDebit)
	require.NoError(t, err)
	before := allChanges(t, st, 5) // a1 b1 c1 d1 d2

	// Each account's first change is sent once: a's and d's delivered,
	// b's dead, c's to be retried.
	storetest.FanOut(t, st, ep)
	ds, err := st.ClaimDeliveries(ctx, "r1", []string{ep}, 10, 10, time.Minute)
	require.NoError(t, err)
	require.Len(t, ds, 4)
	status := map[int64]string{ids["a"]: reconcile.DeliveryDelivered, ids["b"]: reconcile.DeliveryDead,
		ids["c"]: reconcile.DeliveryPending, ids["d"]: reconcile.DeliveryDelivered}
	for _, d := range ds {
		require.NoError(t, st.RecordDelivery(ctx, "r1", d, reconcile.AppDeliveryAttempt{StatusCode: 500}, status[d.AccountID], time.Hour))
	}
	// a's, b's and c's first changes are 100 days old; d's and its debit's
	// are today's (d's debit still pending).
	_, err = st.Pool().Exec(ctx, `UPDATE account_changes SET created_at = now() - interval '100 days'
		WHERE seq = 1 AND account_id = ANY($1)`, []int64{ids["a"], ids["b"], ids["c"]})
	require.NoError(t, err)

	p, err := st.Prune(ctx, reconcile.Retention{OlderThan: retention, Batch: 1})
	require.NoError(t, err)
	require.EqualValues(t, 2, p.Changes, "a's delivered and b's dead change")
	require.LessOrEqual(t, p.MaxInBatch, int64(1))
	left, err := st.Changes(ctx, reconcile.ChangeCursor{}, 100)
	require.NoError(t, err)
	var kept []string
	for _, c := range left {
		kept = append(kept, fmt.Sprintf("%d/%d", c.AccountID, c.Seq))
	}
	require.Equal(t, []string{fmt.Sprintf("%d/1", ids["c"]), fmt.Sprintf("%d/1", ids["d"]), fmt.Sprintf("%d/2", ids["d"])}, kept,
		"c's pending change however old; d's recent ones")
	gone := []int64{before[0].Cursor.ID, before[1].Cursor.ID}
	for _, table := range []string{"app_deliveries", "app_delivery_attempts"} {
		var n int
		require.NoError(t, st.Pool().QueryRow(ctx, `SELECT count(*) FROM `+table+` WHERE change_id = ANY($1)`, gone).Scan(&n))
		require.Zero(t, n, "%s of the pruned changes", table)
	}
	require.Equal(t, 3, count(t, st, `SELECT count(*) FROM app_deliveries`))
	require.Equal(t, 2, count(t, st, `SELECT count(*) FROM app_delivery_attempts`), "c's and d's attempts")

	// From a's pruned change's cursor the feed pages on, one at a time,
	// from the oldest change left, each once.
	got, _ := readAll(t, st, before[0].Cursor)
	require.Len(t, got, 3)
	for i, c := range got {
		require.Equal(t, left[i].Cursor, c.Cursor)
	}

	// c's change goes once its delivery is finished.
	_, err = st.Pool().Exec(ctx, `UPDATE app_deliveries SET status = 'dead' WHERE change_id = $1`, left[0].Cursor.ID)
	require.NoError(t, err)
	p, err = st.Prune(ctx, reconcile.Retention{OlderThan: retention})
	require.NoError(t, err)
	require.EqualValues(t, 1, p.Changes)
}

// TestPruneKeepsARetriedChange: a console Retry of an old dead delivery,
// committed while a prune's batch that chose its change waits on the
// delivery's row lock, keeps the change: the batch reads the delivery
// again (pending now) before it deletes. The retry is RetryDelivery's
// update, held open in a transaction of the test's.
func TestPruneKeepsARetriedChange(t *testing.T) {
	ctx := context.Background()
	ep := "http://app/hook"
	st := storetest.OpenStoreWithEndpoints(t, storetest.URL(t), store.Options{}, ep)
	grantedAccount(t, st, "cus_a", "ua", "price_pro")
	storetest.FanOut(t, st, ep)
	ds, err := st.ClaimDeliveries(ctx, "r1", []string{ep}, 10, 10, time.Minute)
	require.NoError(t, err)
	require.Len(t, ds, 1)
	require.NoError(t, st.RecordDelivery(ctx, "r1", ds[0], reconcile.AppDeliveryAttempt{StatusCode: 500}, reconcile.DeliveryDead, 0))
	_, err = st.Pool().Exec(ctx, `UPDATE account_changes SET created_at = now() - interval '100 days'`)
	require.NoError(t, err)

	retry, err := st.Pool().Begin(ctx)
	require.NoError(t, err)
	defer retry.Rollback(ctx) //nolint:errcheck // committed below
	tag, err := retry.Exec(ctx, `UPDATE app_deliveries SET status = 'pending', due_at = now(), finished_at = NULL
		WHERE change_id = $1 AND endpoint = $2 AND status = 'dead'`, ds[0].ChangeID, ep)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())

	type result struct {
		p   reconcile.Pruned
		err error
	}
	done := make(chan result, 1)
	go func() {
		p, err := st.Prune(ctx, reconcile.Retention{OlderThan: retention})
		done <- result{p, err}
	}()
	storetest.WaitFor(t, "the prune waiting on the delivery's row lock", func() bool {
		return count(t, st, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%app_deliveries%'`) > 0
	})
	require.NoError(t, retry.Commit(ctx))
	r := <-done
	require.NoError(t, r.err)
	require.Zero(t, r.p.Changes)
	require.Equal(t, 1, count(t, st, `SELECT count(*) FROM account_changes`))
	require.Equal(t, 1, count(t, st, `SELECT count(*) FROM app_deliveries WHERE status = 'pending'`))
}

// TestTableSizesCountSmallTables: a table small enough to scan is counted,
// whatever PostgreSQL's estimate says: a table never analyzed holding
// accounts once showed 0 rows (its reltuples, -1, clamped). Above the
// limit the figure is the planner's estimate, marked as one, and a table
// never analyzed has none (-1).
func TestTableSizesCountSmallTables(t *testing.T) {
	t.Parallel()
	st := storetest.NewStore(t)
	for i := range 4 {
		reconciled(t, st, fmt.Sprintf("evt_size_%d", i), fmt.Sprintf("cus_size_%d", i), "", 0)
	}
	rowsOf := func() map[string]reconcile.TableSize {
		sizes, err := st.TableSizes(context.Background())
		require.NoError(t, err)
		m := map[string]reconcile.TableSize{}
		for _, s := range sizes {
			m[s.Table] = s
		}
		return m
	}
	accounts := rowsOf()["accounts"]
	require.True(t, accounts.Exact, "%+v", accounts)
	require.EqualValues(t, 4, accounts.Rows, "%+v", accounts)
	require.Positive(t, accounts.Bytes)

	st.SetExactRowsUnder(1) // every table with a page is estimated
	_, err := st.Pool().Exec(context.Background(), `ANALYZE reconcile_log`)
	require.NoError(t, err)
	m := rowsOf()
	require.False(t, m["reconcile_log"].Exact)
	require.EqualValues(t, 4, m["reconcile_log"].Rows, "analyzed: the estimate is right")
	require.False(t, m["ledger"].Exact)
	require.EqualValues(t, -1, m["ledger"].Rows, "never analyzed: no estimate")
}
