package storetest

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/billsync/billsync/store"
)

// pool is the one way into st's database for the helpers in this file: the
// state checks and setups tests outside store need, each a named function
// whose SQL lives here, so a schema change is mended here and nowhere else.
func pool(st *store.Store) *pgxpool.Pool { return st.Pool() }

// TB is what the state reads fail: a test's *testing.T, or a property
// check's *rapid.T (so that a failure inside a property is shrunk).
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// CustomerState is what matters about one customer after reconciling.
type CustomerState struct {
	Plan    string // the account's plan; empty when billsync holds no account
	Status  string
	Balance int64
	Grants  int            // grant entries in the ledger, every period
	Events  map[string]int // stored events by status
	Queue   QueueRow       // the customer's queue row; zero when none
}

// Customer reads what matters about one customer of provider: its
// account's plan, status, balance and grants, its events by status and
// its queue row.
func Customer(t TB, st *store.Store, provider, customer string) CustomerState {
	t.Helper()
	ctx := context.Background()
	s := CustomerState{Events: map[string]int{}}
	var accountID *int64
	err := pool(st).QueryRow(ctx, `
		SELECT a.id, coalesce(a.plan, ''), coalesce(a.status, ''),
		       (SELECT count(*) FROM ledger l WHERE l.account_id = a.id AND l.kind = 'grant')
		FROM accounts a WHERE a.provider = $1 AND a.customer_id = $2`, provider, customer).
		Scan(&accountID, &s.Plan, &s.Status, &s.Grants)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		t.Fatalf("storetest: account %s/%s: %v", provider, customer, err)
	}
	if accountID != nil {
		if s.Balance, err = st.Balance(ctx, *accountID); err != nil {
			t.Fatalf("storetest: balance of %s/%s: %v", provider, customer, err)
		}
	}
	for _, e := range Events(t, st, provider, customer) {
		s.Events[e.Status]++
	}
	for _, q := range Queue(t, st) {
		if q.Provider == provider && q.CustomerID == customer {
			s.Queue = q
		}
	}
	return s
}

// Event is one stored event, as the intake and the worker left it.
type Event struct {
	DedupeKey, Type, Status, Outcome string
	Receipts                         int // deliveries of it, copies included
}

// Events returns the events stored for one customer of provider, oldest
// first.
func Events(t TB, st *store.Store, provider, customer string) []Event {
	t.Helper()
	rows, err := pool(st).Query(context.Background(), `
		SELECT e.dedupe_key, e.type, e.status, coalesce(e.outcome, ''),
		       (SELECT count(*) FROM receipts r WHERE r.event_id = e.id)
		FROM inbox_events e WHERE e.provider = $1 AND e.customer_id = $2 ORDER BY e.id`, provider, customer)
	return collect(t, "events", rows, err, func(r pgx.CollectableRow) (Event, error) {
		var e Event
		return e, r.Scan(&e.DedupeKey, &e.Type, &e.Status, &e.Outcome, &e.Receipts)
	})
}

// EventStatuses returns the status of each event stored for one customer
// of provider, by dedupe key.
func EventStatuses(t TB, st *store.Store, provider, customer string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, e := range Events(t, st, provider, customer) {
		out[e.DedupeKey] = e.Status
	}
	return out
}

// Grant is one grant entry of the ledger.
type Grant struct {
	Plan        string
	PeriodStart time.Time // UTC
	Delta       int64
	Current     bool // in the account's current period
}

// Grants returns the grant entries of one customer of provider's account,
// oldest first.
func Grants(t TB, st *store.Store, provider, customer string) []Grant {
	t.Helper()
	rows, err := pool(st).Query(context.Background(), `
		SELECT coalesce(l.plan, ''), l.period_start, l.delta, l.period_start IS NOT DISTINCT FROM a.period_start
		FROM ledger l JOIN accounts a ON a.id = l.account_id
		WHERE a.provider = $1 AND a.customer_id = $2 AND l.kind = 'grant' ORDER BY l.id`, provider, customer)
	return collect(t, "grants", rows, err, func(r pgx.CollectableRow) (Grant, error) {
		var g Grant
		err := r.Scan(&g.Plan, &g.PeriodStart, &g.Delta, &g.Current)
		g.PeriodStart = g.PeriodStart.UTC()
		return g, err
	})
}

// QueueRow is one customer's row in the reconcile queue.
type QueueRow struct {
	Provider, CustomerID string
	Trigger, Status      string // status: pending or dead
	Attempts             int
	LockedBy             string        // the worker holding it; empty when none
	Leased               bool          // a lease is set (locked_until)
	Delay                time.Duration // from when it was asked for to when it is due
}

// Queue returns every row of the reconcile queue, soonest due first.
func Queue(t TB, st *store.Store) []QueueRow {
	t.Helper()
	rows, err := pool(st).Query(context.Background(), `
		SELECT provider, customer_id, trigger, status, attempts, coalesce(locked_by, ''), locked_until IS NOT NULL,
		       (extract(epoch FROM due_at - requested_at) * 1e6)::bigint
		FROM reconcile_queue ORDER BY due_at, id`)
	return collect(t, "queue", rows, err, func(r pgx.CollectableRow) (QueueRow, error) {
		var q QueueRow
		var micros int64
		err := r.Scan(&q.Provider, &q.CustomerID, &q.Trigger, &q.Status, &q.Attempts, &q.LockedBy, &q.Leased, &micros)
		q.Delay = time.Duration(micros) * time.Microsecond
		return q, err
	})
}

// Reconcile is one entry of the reconcile log.
type Reconcile struct {
	Provider, CustomerID, Trigger string
	Result, Outcome               string
}

// Reconciles returns the whole reconcile log, oldest first.
func Reconciles(t TB, st *store.Store) []Reconcile {
	t.Helper()
	rows, err := pool(st).Query(context.Background(),
		`SELECT provider, customer_id, trigger, result, outcome FROM reconcile_log ORDER BY id`)
	return collect(t, "reconcile log", rows, err, func(r pgx.CollectableRow) (Reconcile, error) {
		var l Reconcile
		return l, r.Scan(&l.Provider, &l.CustomerID, &l.Trigger, &l.Result, &l.Outcome)
	})
}

// SweepProgress returns what a sweep run recorded of its way through the
// listing: its cursor (one line per part under way) and the customers of
// the pages it applied.
func SweepProgress(t TB, st *store.Store, runID int64) (cursor string, seen []string) {
	t.Helper()
	ctx := context.Background()
	if err := pool(st).QueryRow(ctx, `SELECT coalesce(cursor, '') FROM sweep_runs WHERE id = $1`, runID).Scan(&cursor); err != nil {
		t.Fatalf("storetest: sweep run %d: %v", runID, err)
	}
	rows, err := pool(st).Query(ctx, `SELECT customer_id FROM sweep_seen WHERE run_id = $1 ORDER BY customer_id`, runID)
	return cursor, collect(t, "sweep_seen", rows, err, pgx.RowTo[string])
}

// Counts returns the number of rows of every table holding billsync's
// data (the migrations' own bookkeeping aside), from Tables.
func Counts(t testing.TB, st *store.Store) map[string]int {
	t.Helper()
	counts := map[string]int{}
	for table, digest := range Tables(t, st) {
		if table == "schema_migrations" {
			continue
		}
		n, err := strconv.Atoi(strings.Fields(digest)[0])
		if err != nil {
			t.Fatalf("storetest: count of %s: %v", table, err)
		}
		counts[table] = n
	}
	return counts
}

// KillQueueRow marks one customer's queue row dead after attempts, as the
// worker leaves a customer it gave up on.
func KillQueueRow(t TB, st *store.Store, provider, customer string, attempts int) {
	t.Helper()
	execSetup(t, st, `UPDATE reconcile_queue SET status = 'dead', attempts = $3 WHERE provider = $1 AND customer_id = $2`,
		provider, customer, attempts)
}

// LoseLedger deletes every ledger entry of an account, as a crash between
// writes or a bad manual fix would leave it.
func LoseLedger(t TB, st *store.Store, accountID int64) {
	t.Helper()
	execSetup(t, st, `DELETE FROM ledger WHERE account_id = $1`, accountID)
}

// BareAccount inserts an account holding nothing but its customer, as one
// billsync knows of and never reconciled.
func BareAccount(t TB, st *store.Store, provider, customer string) {
	t.Helper()
	execSetup(t, st, `INSERT INTO accounts (provider, customer_id) VALUES ($1, $2)`, provider, customer)
}

// CutConnections opens a connection of its own to the database at url
// (closed at cleanup) and returns a function that ends every other
// session of that database, as a database restart does.
func CutConnections(t testing.TB, url string) func(context.Context) error {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("storetest: connect: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return func(ctx context.Context) error {
		_, err := conn.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid()`)
		return err
	}
}

func execSetup(t TB, st *store.Store, sql string, args ...any) {
	t.Helper()
	if _, err := pool(st).Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("storetest: %s: %v", sql, err)
	}
}

// collect reads rows (or fails t with the query's err) into a slice.
func collect[T any](t TB, what string, rows pgx.Rows, err error, fn pgx.RowToFunc[T]) []T {
	t.Helper()
	if err != nil {
		t.Fatalf("storetest: %s: %v", what, err)
	}
	out, err := pgx.CollectRows(rows, fn)
	if err != nil {
		t.Fatalf("storetest: %s: %v", what, err)
	}
	return out
}
