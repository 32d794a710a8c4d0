package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/billsync/billsync/reconcile"
)

// Resolve hands a job keyed by a related object (a Stripe thin event's
// subscription or invoice, stored under reconcile.Related's key because
// the intake never asks the provider) to the object's customer, in one
// transaction:
//
//   - the object's queue row is locked first, as lockJob does: an intake
//     statement storing an event for the object holds it until it
//     commits, so every event stored before is re-keyed here, and one
//     stored after queues the object anew (resolved again);
//   - the object's pending and dead events become the customer's;
//   - the object's row becomes the customer's (same id, same lease: the
//     worker reconciles it at once and its heartbeat keeps renewing it),
//     or, when the customer has a row already, is folded into it as an
//     enqueue would (due now, revived, the newer request kept) and
//     deleted: ok is false, and that row's reconcile answers the events.
//
// The dedup, the guarded writes and the failure rules are then the
// customer's reconcile's own.
func (s *Store) Resolve(ctx context.Context, job reconcile.Job, customerID string) (reconcile.Job, bool, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	next := job
	next.CustomerID, next.Expect, next.Attempts = customerID, nil, 0
	ok := false
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := lockJob(ctx, tx, job); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `
			UPDATE inbox_events SET customer_id = $3
			WHERE provider = $1 AND customer_id = $2 AND status IN ($4, $5)`,
			job.Provider, job.CustomerID, customerID, reconcile.EventPending, reconcile.EventDead); err != nil {
			return fmt.Errorf("re-key events: %w", err)
		}
		// Turn the row when the customer has none. A savepoint: an intake
		// may insert the customer's row meanwhile (a unique violation),
		// and then the row is folded like any other.
		var err error
		ok, err = turnRow(ctx, tx, job.ID, customerID)
		if err != nil || ok {
			return err
		}
		if _, err := tx.Exec(ctx, enqueueSQL(`
			SELECT provider, $2::text, trigger, requested_at, now(),
				user_ref, user_ref_at, user_ref_event, expect, expect_at, expect_event
			FROM reconcile_queue WHERE id = $1`), job.ID, customerID); err != nil {
			return fmt.Errorf("fold into the customer's queue row: %w", err)
		}
		_, err = tx.Exec(ctx, `DELETE FROM reconcile_queue WHERE id = $1`, job.ID)
		return err
	})
	if err != nil {
		return reconcile.Job{}, false, fmt.Errorf("resolve %s/%s to %s: %w", job.Provider, job.CustomerID, customerID, classify(err))
	}
	if !ok {
		s.notify(ctx) // the customer's row is due now
	}
	return next, ok, nil
}

// turnRow makes queue row id the customer's, unless the customer has a
// row: ok false.
func turnRow(ctx context.Context, tx pgx.Tx, id int64, customerID string) (bool, error) {
	err := pgx.BeginFunc(ctx, tx, func(sp pgx.Tx) error {
		// The object's failed reads are not the customer's attempts.
		_, err := sp.Exec(ctx, `UPDATE reconcile_queue SET customer_id = $2, attempts = 0, last_error = NULL WHERE id = $1`, id, customerID)
		return err
	})
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "23505": // unique_violation
		return false, nil
	case err != nil:
		return false, fmt.Errorf("turn the queue row: %w", err)
	}
	return true, nil
}
