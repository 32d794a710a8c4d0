package store

import (
	"context"
	"fmt"
	"net/url"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/billsync/billsync/reconcile"
)

// Temporary: the old test and demo hooks, while their callers move to
// store/scratch and store/storetest. Removed in the next commits.

func (s *Store) CrashAfterAccountWrite(fn func() error) { s.faults.SetAfterAccountWrite(fn) }

func (s *Store) Pool() *pgxpool.Pool { return s.pool }

func (s *Store) URL() string {
	c := s.pool.Config().ConnConfig
	u := url.URL{Scheme: "postgres", User: url.User(c.User), Path: "/" + c.Database}
	u.RawQuery = url.Values{"host": {c.Host}, "port": {fmt.Sprint(c.Port)}}.Encode()
	return u.String()
}

func (s *Store) MaxConns() int { return int(s.pool.Config().MaxConns) }

func Migrations() ([]Migration, error) { return migrationFiles() }

func CreateDatabase(ctx context.Context, url, name string, opts Options) (st *Store, drop func(context.Context) error, err error) {
	admin, err := Open(ctx, url, Options{MaxConns: 1})
	if err != nil {
		return nil, nil, err
	}
	ident := pgx.Identifier{name}.Sanitize()
	if _, err := admin.pool.Exec(ctx, `CREATE DATABASE `+ident); err != nil {
		admin.Close()
		return nil, nil, fmt.Errorf("create database %s: %w", name, classify(err))
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		admin.Close()
		return nil, nil, fmt.Errorf("parse database url: %w", err)
	}
	cfg.ConnConfig.Database = name
	st, err = openConfig(ctx, cfg, opts)
	if err != nil {
		admin.Close()
		return nil, nil, fmt.Errorf("open database %s: %w", name, err)
	}
	drop = func(ctx context.Context) error {
		st.Close()
		defer admin.Close()
		if _, err := admin.pool.Exec(ctx, `DROP DATABASE IF EXISTS `+ident+` WITH (FORCE)`); err != nil {
			return fmt.Errorf("drop database %s: %w", name, classify(err))
		}
		return nil
	}
	return st, drop, nil
}

func (s *Store) EventOutcome(ctx context.Context, provider, dedupeKey string) (status reconcile.EventStatus, outcome string, err error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	err = s.pool.QueryRow(ctx, `SELECT status, coalesce(outcome, '') FROM inbox_events WHERE provider = $1 AND dedupe_key = $2`,
		provider, dedupeKey).Scan(&status, &outcome)
	if err != nil {
		return "", "", fmt.Errorf("event %s/%s: %w", provider, dedupeKey, classify(err))
	}
	return status, outcome, nil
}

type CustomerTally struct {
	Events   int
	Receipts int
	Grants   []GrantRow
}

type GrantRow struct {
	Plan  string `json:"plan"`
	Delta int64  `json:"delta"`
}

func (s *Store) Tally(ctx context.Context, provider, customerID string) (CustomerTally, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var t CustomerTally
	err := s.pool.QueryRow(ctx, `
		SELECT count(*), (SELECT count(*) FROM receipts r JOIN inbox_events e ON e.id = r.event_id
		                  WHERE e.provider = $1 AND e.customer_id = $2)
		FROM inbox_events WHERE provider = $1 AND customer_id = $2`,
		provider, customerID).Scan(&t.Events, &t.Receipts)
	if err != nil {
		return t, fmt.Errorf("tally %s/%s: %w", provider, customerID, classify(err))
	}
	rows, _ := s.pool.Query(ctx, `
		SELECT l.plan, l.delta FROM ledger l JOIN accounts a ON a.id = l.account_id
		WHERE a.provider = $1 AND a.customer_id = $2 AND l.kind = 'grant' ORDER BY l.id`, provider, customerID)
	t.Grants, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (GrantRow, error) {
		var g GrantRow
		return g, r.Scan(&g.Plan, &g.Delta)
	})
	return t, err
}

type Stats struct {
	Events, Receipts, Pending, Applied, Ignored, Dead, Queued, Accounts, Reconciles, SeenCountSum, QueueDeadRows int
}

func (s *Store) Stats(ctx context.Context) (Stats, error) {
	var st Stats
	err := s.pool.QueryRow(ctx, `
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
	).Scan(&st.Events, &st.Receipts, &st.Pending, &st.Applied, &st.Ignored, &st.Dead,
		&st.Queued, &st.Accounts, &st.Reconciles, &st.SeenCountSum, &st.QueueDeadRows)
	return st, classify(err)
}
