package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/billsync/billsync/reconcile"
)

// AccountByID returns the account with billsync's id; none is
// reconcile.ErrNotFound.
func (s *Store) AccountByID(ctx context.Context, id int64) (reconcile.Account, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	a, err := scanAccount(s.pool.QueryRow(ctx, `SELECT `+accountColumns+` FROM accounts WHERE id = $1`, id))
	if err != nil {
		return reconcile.Account{}, fmt.Errorf("account %d: %w", id, classify(err))
	}
	return a, nil
}

// AccountDetail returns the account with its balance, ledger, events and
// reconcile history, newest first, read in one snapshot (REPEATABLE READ)
// so the parts agree with each other.
func (s *Store) AccountDetail(ctx context.Context, id int64) (reconcile.AccountDetail, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var d reconcile.AccountDetail
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var err error
		if d.Account, err = scanAccount(tx.QueryRow(ctx, `SELECT `+accountColumns+` FROM accounts WHERE id = $1`, id)); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, periodBalance, id, "").Scan(&d.Balance); err != nil {
			return err
		}
		if d.Meters, err = meterBalances(ctx, tx, id); err != nil {
			return err
		}
		rows, _ := tx.Query(ctx, `SELECT entry_key, kind, coalesce(plan, ''), delta, period_start, coalesce(note, ''), created_at, meter
			FROM ledger WHERE account_id = $1 ORDER BY id DESC LIMIT $2`, id, reconcile.DetailLimit)
		if d.Ledger, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (reconcile.LedgerEntry, error) {
			var e reconcile.LedgerEntry
			return e, r.Scan(&e.Key, &e.Kind, &e.Plan, &e.Delta, &e.PeriodStart, &e.Note, &e.CreatedAt, &e.Meter)
		}); err != nil {
			return err
		}
		rows, _ = tx.Query(ctx, `SELECT `+eventColumns+` FROM inbox_events
			WHERE provider = $1 AND customer_id = $2 ORDER BY id DESC LIMIT $3`, d.Account.Provider, d.Account.CustomerID, reconcile.DetailLimit)
		if d.Events, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (reconcile.StoredEvent, error) { return scanEvent(r) }); err != nil {
			return err
		}
		rows, _ = tx.Query(ctx, `SELECT trigger, coalesce(actor, ''), result, outcome, observed_at, created_at
			FROM reconcile_log WHERE provider = $1 AND customer_id = $2 ORDER BY id DESC LIMIT $3`,
			d.Account.Provider, d.Account.CustomerID, reconcile.DetailLimit)
		d.History, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (reconcile.LogEntry, error) {
			var e reconcile.LogEntry
			return e, r.Scan(&e.Trigger, &e.Actor, &e.Result, &e.Outcome, &e.ObservedAt, &e.CreatedAt)
		})
		return err
	})
	if err != nil {
		return reconcile.AccountDetail{}, fmt.Errorf("account %d detail: %w", id, classify(err))
	}
	return d, nil
}

// Events returns the newest stored events with status (at most limit).
func (s *Store) Events(ctx context.Context, status reconcile.EventStatus, limit int) ([]reconcile.StoredEvent, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, _ := s.pool.Query(ctx, `SELECT `+eventColumns+` FROM inbox_events WHERE status = $1 ORDER BY id DESC LIMIT $2`, status, limit)
	events, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (reconcile.StoredEvent, error) { return scanEvent(r) })
	if err != nil {
		return nil, fmt.Errorf("%s events: %w", status, classify(err))
	}
	return events, nil
}

// EventPayload returns the body stored for the event with billsync's id,
// as the provider sent it; none is reconcile.ErrNotFound.
func (s *Store) EventPayload(ctx context.Context, id int64) ([]byte, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var payload []byte
	if err := s.pool.QueryRow(ctx, `SELECT payload FROM inbox_events WHERE id = $1`, id).Scan(&payload); err != nil {
		return nil, fmt.Errorf("event %d payload: %w", id, classify(err))
	}
	return payload, nil
}

// Retries returns the customers whose reconcile failed at least once and
// is still queued (retrying) or gave up (dead), dead first, then by the
// number of attempts (at most limit).
func (s *Store) Retries(ctx context.Context, limit int) ([]reconcile.Retry, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, _ := s.pool.Query(ctx, `SELECT q.provider, q.customer_id, coalesce(a.id, 0), q.trigger, q.status,
			q.attempts, coalesce(q.last_error, ''), q.due_at
		FROM reconcile_queue q LEFT JOIN accounts a ON a.provider = q.provider AND a.customer_id = q.customer_id
		WHERE q.attempts > 0 OR q.status = 'dead'
		ORDER BY q.status = 'dead' DESC, q.attempts DESC, q.id LIMIT $1`, limit)
	retries, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (reconcile.Retry, error) {
		var q reconcile.Retry
		return q, r.Scan(&q.Provider, &q.CustomerID, &q.AccountID, &q.Trigger, &q.Status, &q.Attempts, &q.LastError, &q.DueAt)
	})
	if err != nil {
		return nil, fmt.Errorf("failed reconciles: %w", classify(err))
	}
	return retries, nil
}
