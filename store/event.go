package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/billsync/billsync/reconcile"
)

const eventColumns = `id, provider, dedupe_key, event_id, type, coalesce(customer_id, ''), status,
	coalesce(outcome, ''), seen_count, received_at`

func scanEvent(row pgx.Row) (reconcile.StoredEvent, error) {
	var e reconcile.StoredEvent
	err := row.Scan(&e.ID, &e.Provider, &e.DedupeKey, &e.EventID, &e.Type, &e.CustomerID, &e.Status,
		&e.Outcome, &e.SeenCount, &e.ReceivedAt)
	return e, err
}

// Event returns the stored event with billsync's id; none is
// reconcile.ErrNotFound.
func (s *Store) Event(ctx context.Context, id int64) (reconcile.StoredEvent, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	e, err := scanEvent(s.pool.QueryRow(ctx, `SELECT `+eventColumns+` FROM inbox_events WHERE id = $1`, id))
	if err != nil {
		return reconcile.StoredEvent{}, fmt.Errorf("event %d: %w", id, classify(err))
	}
	return e, nil
}

// EventByKey returns provider's stored event whose dedupe key or provider
// event id is key; none is reconcile.ErrNotFound.
func (s *Store) EventByKey(ctx context.Context, provider, key string) (reconcile.StoredEvent, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	e, err := scanEvent(s.pool.QueryRow(ctx, `SELECT `+eventColumns+` FROM inbox_events
		WHERE provider = $1 AND (dedupe_key = $2 OR event_id = $2) ORDER BY id LIMIT 1`, provider, key))
	if err != nil {
		return reconcile.StoredEvent{}, fmt.Errorf("%s event %q: %w", provider, key, classify(err))
	}
	return e, nil
}
