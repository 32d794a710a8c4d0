// Package scratch is the store's workshop: throwaway databases, whole-table
// counts, crash injection and connection details for `billsync demo`,
// `billsync bench` and tests.
//
// It is never imported by production wiring (serve, migrate, sweep, resync,
// replay): nothing here is how billsync keeps state right, and a lint rule
// keeps it to the demo, the bench and tests. It must not import testing:
// the demo and the bench ship in the binary.
package scratch

import (
	"context"
	"fmt"
	"net/url"

	"github.com/jackc/pgx/v5"

	"github.com/billsync/billsync/store"
	"github.com/billsync/billsync/store/internal/dburl"
	"github.com/billsync/billsync/store/internal/storehook"
)

// CreateDatabase creates a new, empty database called name on the server
// databaseURL points at and returns a Store on it, opened with opts (for
// the demo and the bench, which must not touch the operator's data). drop
// closes the store and removes the database.
func CreateDatabase(ctx context.Context, databaseURL, name string, opts store.Options) (st *store.Store, drop func(context.Context) error, err error) {
	admin, err := store.Open(ctx, databaseURL, store.Options{MaxConns: 1})
	if err != nil {
		return nil, nil, err
	}
	pool := storehook.Of(admin).Pool
	ident := pgx.Identifier{name}.Sanitize()
	if _, err := pool.Exec(ctx, `CREATE DATABASE `+ident); err != nil {
		admin.Close()
		return nil, nil, fmt.Errorf("create database %s: %w", name, err)
	}
	st, err = store.Open(ctx, dburl.WithDatabase(databaseURL, name), opts)
	if err != nil {
		admin.Close()
		return nil, nil, fmt.Errorf("open database %s: %w", name, err)
	}
	drop = func(ctx context.Context) error {
		st.Close()
		defer admin.Close()
		if _, err := pool.Exec(ctx, `DROP DATABASE IF EXISTS `+ident+` WITH (FORCE)`); err != nil {
			return fmt.Errorf("drop database %s: %w", name, err)
		}
		return nil
	}
	return st, drop, nil
}

// CrashAfterAccountWrite installs fault injection: fn runs inside Apply
// (and once per page inside ApplySweptPage) between the account write and
// the ledger write, and an error from it
// aborts the transaction as a crash at that point would. nil removes it.
// Safe while workers run on st.
func CrashAfterAccountWrite(st *store.Store, fn func() error) {
	storehook.Of(st).Faults.SetAfterAccountWrite(fn)
}

// URL returns a libpq URL of st's database without the password, for psql
// lines printed to people and for processes the bench starts on it.
func URL(st *store.Store) string {
	c := storehook.Of(st).Pool.Config().ConnConfig
	u := url.URL{Scheme: "postgres", User: url.User(c.User), Path: "/" + c.Database}
	u.RawQuery = url.Values{"host": {c.Host}, "port": {fmt.Sprint(c.Port)}}.Encode()
	return u.String()
}

// MaxConns is the size of st's connection pool: store.Options.MaxConns,
// else the URL's pool_max_conns, else the driver's default (max(4, CPUs)).
func MaxConns(st *store.Store) int { return int(storehook.Of(st).Pool.Config().MaxConns) }

// Stats counts the rows of the intake and reconcile tables: what `billsync
// bench` checks its runs against (every delivery stored, every event
// answered, the queue empty).
type Stats struct {
	Events        int `json:"events"`         // distinct stored events
	Receipts      int `json:"receipts"`       // deliveries, copies included
	Pending       int `json:"pending"`        // events not answered yet
	Applied       int `json:"applied"`        // events answered by an applied or unchanged reconcile
	Ignored       int `json:"ignored"`        // events answered as ignored
	Dead          int `json:"dead"`           // events whose customer's reconcile gave up
	Queued        int `json:"queued"`         // reconcile_queue rows, dead ones included
	Accounts      int `json:"accounts"`       // accounts rows
	Reconciles    int `json:"reconciles"`     // reconcile_log rows
	SeenCountSum  int `json:"seen_count_sum"` // sum of inbox_events.seen_count: equals Receipts when no copy was lost
	QueueDeadRows int `json:"queue_dead"`     // reconcile_queue rows marked dead
}

// ReadStats returns st's current row counts, read in one statement (one
// snapshot). It reads whole tables: not for hot paths.
func ReadStats(ctx context.Context, st *store.Store) (Stats, error) {
	var s Stats
	err := storehook.Of(st).Pool.QueryRow(ctx, `
		SELECT
			(SELECT count(*) FROM inbox_events),
			(SELECT count(*) FROM receipts),
			(SELECT count(*) FILTER (WHERE status = 'pending') FROM inbox_events),
			(SELECT count(*) FILTER (WHERE status = 'applied') FROM inbox_events),
			(SELECT count(*) FILTER (WHERE status = 'ignored') FROM inbox_events),
			(SELECT count(*) FILTER (WHERE status = 'dead') FROM inbox_events),
			(SELECT count(*) FROM reconcile_queue),
			(SELECT count(*) FROM accounts),
			(SELECT count(*) FROM reconcile_log),
			(SELECT coalesce(sum(seen_count), 0) FROM inbox_events),
			(SELECT count(*) FILTER (WHERE status = 'dead') FROM reconcile_queue)`,
	).Scan(&s.Events, &s.Receipts, &s.Pending, &s.Applied, &s.Ignored, &s.Dead,
		&s.Queued, &s.Accounts, &s.Reconciles, &s.SeenCountSum, &s.QueueDeadRows)
	if err != nil {
		return Stats{}, fmt.Errorf("count rows: %w", err)
	}
	return s, nil
}
