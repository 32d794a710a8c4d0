package store

import (
	"context"
	"fmt"
)

// Stats counts the rows of the intake and reconcile tables: what `billsync
// bench` checks its runs against (every delivery stored, every event
// answered, the queue empty). It reads whole tables: not for hot paths.
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

// Stats returns the current row counts, read in one statement (one
// snapshot).
func (s *Store) Stats(ctx context.Context) (Stats, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
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
	if err != nil {
		return Stats{}, fmt.Errorf("count rows: %w", classify(err))
	}
	return st, nil
}

// QueueDepth counts queued customers by state: waiting (pending, due or in
// backoff), due now, and dead.
type QueueDepth struct {
	Pending, Due, Dead int
}

// QueueDepth reads the queue's depth in one statement (for /metrics).
func (s *Store) QueueDepth(ctx context.Context) (QueueDepth, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var q QueueDepth
	err := s.pool.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE status = 'pending'),
		       count(*) FILTER (WHERE status = 'pending' AND due_at <= now()),
		       count(*) FILTER (WHERE status = 'dead')
		FROM reconcile_queue`).Scan(&q.Pending, &q.Due, &q.Dead)
	if err != nil {
		return QueueDepth{}, fmt.Errorf("queue depth: %w", classify(err))
	}
	return q, nil
}
