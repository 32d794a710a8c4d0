package store

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/billsync/billsync/reconcile"
)

// StoreDelivery stores one verified delivery atomically: the event
// (deduplicated on provider and dedupe key), a receipt for this delivery,
// and, for a new event that names a customer (or a related object's key,
// see reconcile.Related), the customer's queue row.
// It is one statement, so one round trip and one implicit transaction; it
// returns only after the commit. Any failure to reach the database or to
// commit wraps reconcile.ErrStoreUnavailable.
func (s *Store) StoreDelivery(ctx context.Context, d reconcile.Delivery) (reconcile.Stored, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	ev := d.Event
	status, outcome := reconcile.EventPending, (*string)(nil)
	if ev.IgnoreReason != "" {
		status, outcome = reconcile.EventIgnored, &ev.IgnoreReason
	}
	var st reconcile.Stored
	var inserted bool
	// xmax = 0 only on a freshly inserted row: it tells a new event from a
	// copy. The queue upsert is enqueueSQL, for a new pending event with a
	// customer only.
	err := s.pool.QueryRow(ctx, `
		WITH ev AS (
			INSERT INTO inbox_events
				(provider, dedupe_key, event_id, type, customer_id, event_time, api_version, payload, status, outcome, processed_at, expect, user_ref)
			VALUES ($1, $2, $3, $4, NULLIF($5, ''), $6, NULLIF($7, ''), $8, $9, $10,
				CASE WHEN $9 = 'ignored' THEN now() END, $13::jsonb, NULLIF($14, ''))
			ON CONFLICT (provider, dedupe_key) DO UPDATE
				SET seen_count = inbox_events.seen_count + 1, last_seen_at = now()
			RETURNING id, xmax = 0 AS inserted, seen_count, status, customer_id
		), receipt AS (
			INSERT INTO receipts (event_id, delivery_id, remote_addr, duplicate, source)
			SELECT id, NULLIF($11, ''), NULLIF($12, ''), NOT inserted, $15 FROM ev
		), queue AS (
			`+enqueueSQL+`
			SELECT $1, customer_id, $15, now(), now() FROM ev
			WHERE inserted AND status = 'pending' AND customer_id IS NOT NULL
			`+enqueueConflictSQL+`
		), caught AS (
			-- An event the feed stores first is a webhook late or lost:
			-- counted with the event, so the count never lags its account.
			UPDATE events_feed SET caught = caught + 1
			WHERE provider = $1 AND $15 = 'feed' AND (SELECT inserted FROM ev)
		), txn AS (
			-- A payment counts toward the read allocation once, by the day
			-- it first arrived (see ReportSpend).
			INSERT INTO provider_transactions (provider, day, transactions)
			SELECT $1, `+utcDay+`, 1 FROM ev WHERE inserted AND $16
			ON CONFLICT (provider, day) DO UPDATE SET transactions = provider_transactions.transactions + 1
		)
		SELECT id, inserted, seen_count, status FROM ev`,
		ev.Provider, ev.DedupeKey, ev.EventID, ev.Type, ev.CustomerID, nullTime(ev.Time),
		ev.APIVersion, ev.Payload, status, outcome, d.DeliveryID, d.RemoteAddr, expectDoc(ev.Expect), ev.UserRef,
		cmp.Or(d.Source, reconcile.SourceWebhook), ev.Transaction,
	).Scan(&st.EventID, &inserted, &st.SeenCount, &st.Status)
	if err != nil {
		return reconcile.Stored{}, fmt.Errorf("store %s event %s: %w", ev.Provider, ev.DedupeKey, classify(err))
	}
	st.Duplicate = !inserted
	if !st.Duplicate && st.Status == reconcile.EventPending && ev.CustomerID != "" {
		s.notify(ctx)
	}
	return st, nil
}

// expectDoc is an event's expect column: JSON text for a ::jsonb cast, nil
// (NULL) for none. Not the struct itself: in the exec and simple_protocol
// query modes the server does not describe the statement, so pgx has no
// type to encode a struct as (and a []byte would go out as bytea).
func expectDoc(e *reconcile.Expectation) *string {
	if e == nil {
		return nil
	}
	b, _ := json.Marshal(e) // plain struct: cannot fail
	doc := string(b)
	return &doc
}

// enqueueSQL and enqueueConflictSQL make a customer's queue row due now and
// record the newest request. A dead row comes back to life with its
// attempts reset: a new signal deserves a fresh try.
const (
	enqueueSQL         = `INSERT INTO reconcile_queue (provider, customer_id, trigger, requested_at, due_at)`
	enqueueConflictSQL = `ON CONFLICT (provider, customer_id) DO UPDATE SET
			trigger      = excluded.trigger,
			requested_at = greatest(reconcile_queue.requested_at, excluded.requested_at),
			due_at       = least(reconcile_queue.due_at, excluded.due_at),
			attempts     = CASE WHEN reconcile_queue.status = 'dead' THEN 0 ELSE reconcile_queue.attempts END,
			status       = 'pending'`
)

// enqueue makes the customer's queue row due now for trigger.
func enqueue(ctx context.Context, tx pgx.Tx, provider, customerID, trigger string) error {
	_, err := tx.Exec(ctx, enqueueSQL+` VALUES ($1, $2, $3, now(), now()) `+enqueueConflictSQL,
		provider, customerID, trigger)
	if err != nil {
		return fmt.Errorf("enqueue %s customer %s: %w", provider, customerID, err)
	}
	return nil
}
