package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/billsync/billsync/reconcile"
)

// StoreDelivery stores one verified delivery in one transaction: the event
// (deduplicated on provider and dedupe key), a receipt for this delivery,
// and, for a new event that names a customer, the customer's queue row.
// It returns only after the commit; any failure to reach the database or
// to commit wraps reconcile.ErrUnavailable.
func (s *Store) StoreDelivery(ctx context.Context, d reconcile.Delivery) (reconcile.Stored, error) {
	ev := d.Event
	status, outcome := "pending", (*string)(nil)
	if ev.IgnoreReason != "" {
		status, outcome = "ignored", &ev.IgnoreReason
	}
	var st reconcile.Stored
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// xmax = 0 only on a freshly inserted row: it tells a new event from
		// a copy without a second query.
		var inserted bool
		err := tx.QueryRow(ctx, `
			INSERT INTO inbox_events
				(provider, dedupe_key, event_id, type, customer_id, event_time, api_version, payload, status, outcome, processed_at)
			VALUES ($1, $2, $3, $4, NULLIF($5, ''), $6, NULLIF($7, ''), $8, $9, $10,
				CASE WHEN $9 = 'ignored' THEN now() END)
			ON CONFLICT (provider, dedupe_key) DO UPDATE
				SET seen_count = inbox_events.seen_count + 1, last_seen_at = now()
			RETURNING id, xmax = 0, seen_count, status`,
			ev.Provider, ev.DedupeKey, ev.EventID, ev.Type, ev.CustomerID, nullTime(ev.Time),
			ev.APIVersion, ev.Payload, status, outcome,
		).Scan(&st.EventID, &inserted, &st.SeenCount, &st.Status)
		if err != nil {
			return fmt.Errorf("insert event: %w", err)
		}
		st.Duplicate = !inserted
		if _, err := tx.Exec(ctx, `
			INSERT INTO receipts (event_id, delivery_id, remote_addr, duplicate)
			VALUES ($1, NULLIF($2, ''), NULLIF($3, ''), $4)`,
			st.EventID, d.DeliveryID, d.RemoteAddr, st.Duplicate); err != nil {
			return fmt.Errorf("insert receipt: %w", err)
		}
		if st.Duplicate || status != "pending" || ev.CustomerID == "" {
			return nil
		}
		return enqueue(ctx, tx, ev.Provider, ev.CustomerID, "webhook")
	})
	if err != nil {
		return reconcile.Stored{}, fmt.Errorf("store %s event %s: %w", ev.Provider, ev.DedupeKey, classify(err))
	}
	if !st.Duplicate && st.Status == "pending" && ev.CustomerID != "" {
		s.notify(ctx)
	}
	return st, nil
}

// enqueue makes the customer's queue row due now and records the newest
// request. A dead row comes back to life with its attempts reset: a new
// signal deserves a fresh try.
func enqueue(ctx context.Context, tx pgx.Tx, provider, customerID, trigger string) error {
	_, err := tx.Exec(ctx, `
		INSERT INTO reconcile_queue (provider, customer_id, trigger, requested_at, due_at)
		VALUES ($1, $2, $3, now(), now())
		ON CONFLICT (provider, customer_id) DO UPDATE SET
			trigger      = excluded.trigger,
			requested_at = greatest(reconcile_queue.requested_at, excluded.requested_at),
			due_at       = least(reconcile_queue.due_at, excluded.due_at),
			attempts     = CASE WHEN reconcile_queue.status = 'dead' THEN 0 ELSE reconcile_queue.attempts END,
			status       = 'pending'`,
		provider, customerID, trigger)
	if err != nil {
		return fmt.Errorf("enqueue %s customer %s: %w", provider, customerID, err)
	}
	return nil
}
