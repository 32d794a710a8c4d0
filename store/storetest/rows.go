package storetest

import (
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store"
)

// Reads: rows as stored, with the columns the store's product reads do not
// return (payloads, receipts, leases, the ledger's rows), for tests that
// check what was written. Each returns rows oldest first.

// EventRow is an inbox_events row as stored; empty strings stand for NULL.
type EventRow struct {
	ID         int64
	Provider   string
	DedupeKey  string
	EventID    string
	Type       string
	CustomerID string
	UserRef    string
	APIVersion string
	EventTime  *time.Time // nil when unknown
	Payload    []byte
	SeenCount  int
	Receipts   int // receipt rows of the event: its deliveries, copies included
	Status     reconcile.EventStatus
	Outcome    string
}

const eventRowSQL = `
	SELECT e.id, e.provider, e.dedupe_key, e.event_id, e.type, coalesce(e.customer_id, ''), coalesce(e.user_ref, ''),
	       coalesce(e.api_version, ''), e.event_time, e.payload, e.seen_count,
	       (SELECT count(*) FROM receipts r WHERE r.event_id = e.id), e.status, coalesce(e.outcome, '')
	FROM inbox_events e`

func scanEventRow(r pgx.CollectableRow) (EventRow, error) {
	var e EventRow
	err := r.Scan(&e.ID, &e.Provider, &e.DedupeKey, &e.EventID, &e.Type, &e.CustomerID, &e.UserRef,
		&e.APIVersion, &e.EventTime, &e.Payload, &e.SeenCount, &e.Receipts, &e.Status, &e.Outcome)
	return e, err
}

// Events returns every stored event.
func Events(t TB, st *store.Store) []EventRow {
	t.Helper()
	return collect(t, st, scanEventRow, eventRowSQL+` ORDER BY e.id`)
}

// CustomerEvents returns the stored events that name the customer.
func CustomerEvents(t TB, st *store.Store, provider, customerID string) []EventRow {
	t.Helper()
	return collect(t, st, scanEventRow, eventRowSQL+` WHERE e.provider = $1 AND e.customer_id = $2 ORDER BY e.id`,
		provider, customerID)
}

// EventByKey returns provider's stored event with dedupeKey (exactly that
// key, unlike the store's EventByKey, which takes an event id too), failing
// the test when there is none.
func EventByKey(t TB, st *store.Store, provider, dedupeKey string) EventRow {
	t.Helper()
	rows := collect(t, st, scanEventRow, eventRowSQL+` WHERE e.provider = $1 AND e.dedupe_key = $2`, provider, dedupeKey)
	if len(rows) != 1 {
		fatalf(t, "storetest: %s event %q: %d stored, want 1", provider, dedupeKey, len(rows))
	}
	return rows[0]
}

// ReceiptRow is a receipts row: one delivery of a stored event.
type ReceiptRow struct {
	EventID    int64 // the stored event's id (inbox_events.id)
	DeliveryID string
	RemoteAddr string
	Duplicate  bool
	Source     string // webhook or feed
}

// Receipts returns every receipt.
func Receipts(t TB, st *store.Store) []ReceiptRow {
	t.Helper()
	return collect(t, st, func(r pgx.CollectableRow) (ReceiptRow, error) {
		var x ReceiptRow
		return x, r.Scan(&x.EventID, &x.DeliveryID, &x.RemoteAddr, &x.Duplicate, &x.Source)
	}, `SELECT event_id, coalesce(delivery_id, ''), coalesce(remote_addr, ''), duplicate, source FROM receipts ORDER BY id`)
}

// QueueRow is a reconcile_queue row.
type QueueRow struct {
	Provider    string
	CustomerID  string
	Trigger     string
	Status      string // pending or dead
	Attempts    int
	LastError   string
	LockedBy    string
	LockedUntil *time.Time
	RequestedAt time.Time
	DueAt       time.Time
	Due         bool // due_at has passed by the database's clock
}

// Leased reports whether a worker holds the row (locked_until is set).
func (q QueueRow) Leased() bool { return q.LockedUntil != nil }

// Delay is how long after it was asked for the row is due.
func (q QueueRow) Delay() time.Duration { return q.DueAt.Sub(q.RequestedAt) }

// Queue returns every queue row, soonest due first.
func Queue(t TB, st *store.Store) []QueueRow {
	t.Helper()
	return collect(t, st, func(r pgx.CollectableRow) (QueueRow, error) {
		var q QueueRow
		return q, r.Scan(&q.Provider, &q.CustomerID, &q.Trigger, &q.Status, &q.Attempts, &q.LastError, &q.LockedBy,
			&q.LockedUntil, &q.RequestedAt, &q.DueAt, &q.Due)
	}, `SELECT provider, customer_id, trigger, status, attempts, coalesce(last_error, ''), coalesce(locked_by, ''),
		locked_until, requested_at, due_at, due_at <= now() FROM reconcile_queue ORDER BY due_at, id`)
}

// QueueRowOf returns the customer's queue row, failing the test when
// there is none.
func QueueRowOf(t TB, st *store.Store, provider, customerID string) QueueRow {
	t.Helper()
	rows := Queue(t, st)
	i := slices.IndexFunc(rows, func(q QueueRow) bool { return q.Provider == provider && q.CustomerID == customerID })
	if i < 0 {
		fatalf(t, "storetest: no queue row for %s/%s", provider, customerID)
	}
	return rows[i]
}

// LogRow is a reconcile_log row; empty strings stand for NULL.
type LogRow struct {
	AccountID  int64 // 0 when the reconcile wrote no account
	Provider   string
	CustomerID string
	Trigger    string
	Actor      string
	Result     reconcile.Result
	Outcome    string
}

// ReconcileLog returns every reconcile_log row.
func ReconcileLog(t TB, st *store.Store) []LogRow {
	t.Helper()
	return collect(t, st, func(r pgx.CollectableRow) (LogRow, error) {
		var l LogRow
		return l, r.Scan(&l.AccountID, &l.Provider, &l.CustomerID, &l.Trigger, &l.Actor, &l.Result, &l.Outcome)
	}, `SELECT coalesce(account_id, 0), provider, customer_id, trigger, coalesce(actor, ''), result, outcome
		FROM reconcile_log ORDER BY id`)
}

// LedgerTotal counts the ledger rows of the account (every account's when
// accountID is 0) of kind (every kind when empty), over all periods, and
// sums their deltas.
func LedgerTotal(t TB, st *store.Store, accountID int64, kind string) (rows int, sum int64) {
	t.Helper()
	queryRow(t, st, `SELECT count(*), coalesce(sum(delta), 0) FROM ledger
		WHERE ($1::bigint = 0 OR account_id = $1) AND ($2 = '' OR kind = $2)`, []any{accountID, kind}, &rows, &sum)
	return rows, sum
}

// Accounts returns every account, read by the store's AccountByID.
func Accounts(t TB, st *store.Store) []reconcile.Account {
	t.Helper()
	ids := collect(t, st, pgx.RowTo[int64], `SELECT id FROM accounts ORDER BY id`)
	out := make([]reconcile.Account, 0, len(ids))
	ctx, cancel := bounded()
	defer cancel()
	for _, id := range ids {
		a, err := st.AccountByID(ctx, id)
		if err != nil {
			fatalf(t, "storetest: account %d: %v", id, err)
		}
		out = append(out, a)
	}
	return out
}

// SweepRunCount counts the sweep_runs rows of provider with status (either
// may be empty for all).
func SweepRunCount(t TB, st *store.Store, provider, status string) int {
	t.Helper()
	var n int
	queryRow(t, st, `SELECT count(*) FROM sweep_runs WHERE ($1 = '' OR provider = $1) AND ($2 = '' OR status = $2)`,
		[]any{provider, status}, &n)
	return n
}

// Databases returns the names of the databases on st's server that begin
// with prefix (a demo's or a bench's must be gone once it ends).
func Databases(t TB, st *store.Store, prefix string) []string {
	t.Helper()
	return collect(t, st, pgx.RowTo[string], `SELECT datname FROM pg_database WHERE starts_with(datname, $1) ORDER BY 1`, prefix)
}

// MeterRows is one meter's ledger rows of an account, over all periods.
type MeterRows struct {
	Grants, Usages int
	Sum            int64
}

// Meters returns the account's ledger rows by meter ("" is the default
// one): how many grants and debits each holds and their sum.
func Meters(t TB, st *store.Store, accountID int64) map[string]MeterRows {
	t.Helper()
	type row struct {
		meter string
		m     MeterRows
	}
	rows := collect(t, st, func(r pgx.CollectableRow) (row, error) {
		var x row
		return x, r.Scan(&x.meter, &x.m.Grants, &x.m.Usages, &x.m.Sum)
	}, `SELECT meter, count(*) FILTER (WHERE kind = 'grant'), count(*) FILTER (WHERE kind = 'usage'), sum(delta)
		FROM ledger WHERE account_id = $1 GROUP BY meter`, accountID)
	out := make(map[string]MeterRows, len(rows))
	for _, x := range rows {
		out[x.meter] = x.m
	}
	return out
}

// ConnectedFeedRow is a connected account's events_feed row.
type ConnectedFeedRow struct {
	Account  string
	PolledAt time.Time
	Polls    int64
	Caught   int64
	Failures int
	RetryAt  *time.Time // nil unless the account is backed off
}

// ConnectedFeeds returns the events_feed rows of provider's connected
// accounts, by account.
func ConnectedFeeds(t TB, st *store.Store, provider string) map[string]ConnectedFeedRow {
	t.Helper()
	rows := collect(t, st, func(r pgx.CollectableRow) (ConnectedFeedRow, error) {
		var x ConnectedFeedRow
		return x, r.Scan(&x.Account, &x.PolledAt, &x.Polls, &x.Caught, &x.Failures, &x.RetryAt)
	}, `SELECT account, polled_at, polls, caught, failures, retry_at FROM events_feed WHERE provider = $1 AND account <> ''`,
		provider)
	out := make(map[string]ConnectedFeedRow, len(rows))
	for _, r := range rows {
		out[r.Account] = r
	}
	return out
}
