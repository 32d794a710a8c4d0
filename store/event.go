package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/billsync/billsync/reconcile"
)

// EventOutcome returns a stored event's status and outcome text.
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

// CustomerTally counts what billsync holds for one customer.
type CustomerTally struct {
	Events   int // distinct stored events
	Receipts int // deliveries, copies included
	Grants   []GrantRow
}

// GrantRow is one grant in the ledger.
type GrantRow struct {
	Plan  string `json:"plan"`
	Delta int64  `json:"delta"`
}

// Tally counts a customer's events, deliveries and grants.
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
	rows, err := s.pool.Query(ctx, `
		SELECT l.plan, l.delta FROM ledger l JOIN accounts a ON a.id = l.account_id
		WHERE a.provider = $1 AND a.customer_id = $2 AND l.kind = 'grant' ORDER BY l.id`, provider, customerID)
	if err != nil {
		return t, fmt.Errorf("tally %s/%s: %w", provider, customerID, classify(err))
	}
	defer rows.Close()
	for rows.Next() {
		var g GrantRow
		if err := rows.Scan(&g.Plan, &g.Delta); err != nil {
			return t, fmt.Errorf("tally %s/%s: %w", provider, customerID, err)
		}
		t.Grants = append(t.Grants, g)
	}
	return t, rows.Err()
}

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
