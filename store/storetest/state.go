package storetest

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/billsync/billsync/store"
)

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
	s := CustomerState{Events: map[string]int{}}
	type account struct {
		id           int64
		plan, status string
		grants       int
	}
	accounts := collect(t, st, func(r pgx.CollectableRow) (account, error) {
		var a account
		return a, r.Scan(&a.id, &a.plan, &a.status, &a.grants)
	}, `SELECT a.id, coalesce(a.plan, ''), coalesce(a.status, ''),
		       (SELECT count(*) FROM ledger l WHERE l.account_id = a.id AND l.kind = 'grant')
		FROM accounts a WHERE a.provider = $1 AND a.customer_id = $2`, provider, customer)
	for _, a := range accounts {
		s.Plan, s.Status, s.Grants = a.plan, a.status, a.grants
		ctx, cancel := bounded()
		balance, err := st.Balance(ctx, a.id)
		cancel()
		if err != nil {
			fatalf(t, "storetest: balance of %s/%s: %v", provider, customer, err)
		}
		s.Balance = balance
	}
	for _, e := range CustomerEvents(t, st, provider, customer) {
		s.Events[string(e.Status)]++
	}
	for _, q := range Queue(t, st) {
		if q.Provider == provider && q.CustomerID == customer {
			s.Queue = q
		}
	}
	return s
}

// EventStatuses returns the status of each event stored for one customer
// of provider, by dedupe key.
func EventStatuses(t TB, st *store.Store, provider, customer string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, e := range CustomerEvents(t, st, provider, customer) {
		out[e.DedupeKey] = string(e.Status)
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
// every period's, oldest first.
func Grants(t TB, st *store.Store, provider, customer string) []Grant {
	t.Helper()
	return collect(t, st, func(r pgx.CollectableRow) (Grant, error) {
		var g Grant
		err := r.Scan(&g.Plan, &g.PeriodStart, &g.Delta, &g.Current)
		g.PeriodStart = g.PeriodStart.UTC()
		return g, err
	}, `SELECT coalesce(l.plan, ''), l.period_start, l.delta, l.period_start IS NOT DISTINCT FROM a.period_start
		FROM ledger l JOIN accounts a ON a.id = l.account_id
		WHERE a.provider = $1 AND a.customer_id = $2 AND l.kind = 'grant' ORDER BY l.id`, provider, customer)
}

// SweepProgress returns what a sweep run recorded of its way through the
// listing: its cursor (one line per part under way) and the customers of
// the pages it applied.
func SweepProgress(t TB, st *store.Store, runID int64) (cursor string, seen []string) {
	t.Helper()
	queryRow(t, st, `SELECT coalesce(cursor, '') FROM sweep_runs WHERE id = $1`, []any{runID}, &cursor)
	seen = collect(t, st, pgx.RowTo[string], `SELECT customer_id FROM sweep_seen WHERE run_id = $1 ORDER BY customer_id`, runID)
	return cursor, seen
}

// LoseLedger deletes every ledger entry of an account, as a crash between
// writes or a bad manual fix would leave it.
func LoseLedger(t TB, st *store.Store, accountID int64) {
	t.Helper()
	change(t, st, someRows, `DELETE FROM ledger WHERE account_id = $1`, accountID)
}

// BareAccount inserts an account holding nothing but its customer, as one
// billsync knows of and never reconciled.
func BareAccount(t TB, st *store.Store, provider, customer string) {
	t.Helper()
	change(t, st, 1, `INSERT INTO accounts (provider, customer_id) VALUES ($1, $2)`, provider, customer)
}

// CutConnections opens a connection of its own to the database at url
// (closed at cleanup) and returns a function that ends every other
// session of that database, as a database restart does. It returns once
// they have ended (pg_terminate_backend with a timeout; without one it
// only signals, and on a busy machine the next statement could still
// find its session alive).
func CutConnections(t CleanupTB, url string) func(context.Context) error {
	t.Helper()
	ctx, cancel := bounded()
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		fatalf(t, "storetest: connect: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return func(ctx context.Context) error {
		var ended bool
		if err := conn.QueryRow(ctx, `SELECT coalesce(bool_and(pg_terminate_backend(pid, 60000)), true)
			FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&ended); err != nil {
			return err
		}
		if !ended {
			return errors.New("storetest: a session outlived a minute after pg_terminate_backend")
		}
		return nil
	}
}

// LoseMeter deletes an account's ledger rows of one meter ("" the
// default one), as a crash or a bug might have: the sweep and the next
// reconcile must grant its period again.
func LoseMeter(t TB, st *store.Store, accountID int64, meter string) {
	t.Helper()
	change(t, st, someRows, `DELETE FROM ledger WHERE account_id = $1 AND meter = $2`, accountID, meter)
}
