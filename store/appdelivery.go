package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/billsync/billsync/reconcile"
)

const deliveryColumns = `d.change_id, d.endpoint, d.account_id, d.seq, d.status, d.attempts, d.created_at, d.due_at,
	coalesce(d.last_error, ''), c.payload::text, d.imported`

func scanDelivery(r pgx.CollectableRow) (reconcile.AppDelivery, error) {
	var d reconcile.AppDelivery
	var body string
	err := r.Scan(&d.ChangeID, &d.Endpoint, &d.AccountID, &d.Seq, &d.Status, &d.Attempts, &d.CreatedAt, &d.DueAt,
		&d.LastError, &body, &d.Imported)
	d.Body = []byte(body)
	return d, err
}

// ClaimDeliveries leases up to limit due deliveries to endpoints to
// holder for lease (FOR UPDATE SKIP LOCKED, like the reconcile queue).
// A delivery is due only when no earlier change of its account is still
// pending to its endpoint, so one account's changes go out in order, one
// at a time, while other accounts' go alongside. Live deliveries come
// before imported ones (an import's backlog never delays a live change),
// at most imports of those, then the longest due.
func (s *Store) ClaimDeliveries(ctx context.Context, holder string, endpoints []string, limit, imports int, lease time.Duration) ([]reconcile.AppDelivery, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, `
		WITH live AS (`+dueDeliveries(false)+`),
		imp AS (`+dueDeliveries(true)+`),
		due AS (
			SELECT * FROM live UNION ALL SELECT * FROM imp
			ORDER BY imported, due_at, change_id LIMIT $2)
		UPDATE app_deliveries d SET locked_by = $3, locked_until = now() + make_interval(secs => $4)
		FROM due, account_changes c
		WHERE d.change_id = due.change_id AND d.endpoint = due.endpoint AND c.id = d.change_id
		RETURNING `+deliveryColumns, endpoints, limit, holder, lease.Seconds(), min(imports, limit))
	if err != nil {
		return nil, fmt.Errorf("claim deliveries: %w", classify(err))
	}
	ds, err := pgx.CollectRows(rows, scanDelivery)
	if err != nil {
		return nil, fmt.Errorf("claim deliveries: %w", classify(err))
	}
	return ds, nil
}

// dueDeliveries selects the due deliveries, live or an import's, up to
// $2 live or $5 imported, longest due first, locked: a delivery is due
// when no earlier change of its account is pending to its endpoint.
func dueDeliveries(imported bool) string {
	limit := "$2"
	if imported {
		limit = "$5"
	}
	return fmt.Sprintf(`
			SELECT d.change_id, d.endpoint, d.imported, d.due_at FROM app_deliveries d
			WHERE d.status = 'pending' AND d.imported = %t AND d.endpoint = ANY($1) AND d.due_at <= now()
			  AND (d.locked_until IS NULL OR d.locked_until < now())
			  AND NOT EXISTS (SELECT 1 FROM app_deliveries e
				WHERE e.endpoint = d.endpoint AND e.account_id = d.account_id AND e.status = 'pending' AND e.seq < d.seq)
			ORDER BY d.due_at, d.change_id LIMIT %s
			FOR UPDATE OF d SKIP LOCKED`, imported, limit)
}

// RecordDelivery records an attempt of a delivery holder claimed, and
// its next state: delivered, dead, or pending again after retryIn. A
// holder whose lease another took records the attempt only, and gets
// reconcile.ErrHeld.
func (s *Store) RecordDelivery(ctx context.Context, holder string, d reconcile.AppDelivery, a reconcile.AppDeliveryAttempt, status string, retryIn time.Duration) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var held bool
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var code *int
		if a.StatusCode != 0 {
			code = &a.StatusCode
		}
		if _, err := tx.Exec(ctx, `
			INSERT INTO app_delivery_attempts (change_id, endpoint, status_code, duration_ms, error)
			VALUES ($1, $2, $3, $4, NULLIF($5, ''))`,
			d.ChangeID, d.Endpoint, code, float64(a.Took)/float64(time.Millisecond), a.Error); err != nil {
			return fmt.Errorf("write attempt: %w", err)
		}
		tag, err := tx.Exec(ctx, `
			UPDATE app_deliveries SET attempts = attempts + 1, status = $4, last_error = NULLIF($5, ''),
				due_at = now() + make_interval(secs => $6), locked_by = NULL, locked_until = NULL,
				finished_at = CASE WHEN $4 = 'pending' THEN NULL ELSE now() END
			WHERE change_id = $1 AND endpoint = $2 AND locked_by = $3 AND status = 'pending'`,
			d.ChangeID, d.Endpoint, holder, status, a.Error, retryIn.Seconds())
		held = tag.RowsAffected() == 1
		return err
	})
	if err != nil {
		return fmt.Errorf("record delivery %d to %s: %w", d.ChangeID, d.Endpoint, classify(err))
	}
	if !held {
		return fmt.Errorf("record delivery %d to %s: lease lost: %w", d.ChangeID, d.Endpoint, reconcile.ErrHeld)
	}
	return nil
}

// RetryDelivery makes a dead delivery pending and due now (the console's
// Retry). One that is not dead is reconcile.ErrNotFound.
func (s *Store) RetryDelivery(ctx context.Context, changeID int64, endpoint string) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	tag, err := s.pool.Exec(ctx, `
		UPDATE app_deliveries SET status = 'pending', due_at = now(), finished_at = NULL
		WHERE change_id = $1 AND endpoint = $2 AND status = 'dead'`, changeID, endpoint)
	if err != nil {
		return fmt.Errorf("retry delivery %d: %w", changeID, classify(err))
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("no dead delivery of change %d to %s: %w", changeID, endpoint, reconcile.ErrNotFound)
	}
	return nil // the deliverers poll every second
}

// AppDeliveryStats counts the deliveries by status and finds the oldest
// undelivered change: the oldest pending live delivery's, or the first
// change the slowest endpoint's cursor has not passed yet (no delivery
// created: the fan-out is behind, or stopped, and the app waits all the
// same). An import's pending deliveries count as pending but not as
// late: they wait behind every live one by design, and a first import's
// backlog is no outage.
func (s *Store) AppDeliveryStats(ctx context.Context) (reconcile.AppDeliveryStats, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var st reconcile.AppDeliveryStats
	var oldest *time.Time
	err := s.pool.QueryRow(ctx, `
		SELECT (SELECT coalesce(max(id), 0) FROM account_changes),
		       count(*) FILTER (WHERE status = 'pending'), count(*) FILTER (WHERE status = 'delivered'),
		       count(*) FILTER (WHERE status = 'dead'),
		       least(min(created_at) FILTER (WHERE status = 'pending' AND NOT imported),
		             (SELECT c.created_at FROM account_changes c,
		                (SELECT cursor_xid, cursor_id FROM app_endpoints ORDER BY cursor_xid, cursor_id LIMIT 1) e
		              WHERE (c.xid, c.id) > (e.cursor_xid, e.cursor_id) ORDER BY c.xid, c.id LIMIT 1))
		FROM app_deliveries`).Scan(&st.LastChangeID, &st.Pending, &st.Delivered, &st.Dead, &oldest)
	if err != nil {
		return st, fmt.Errorf("delivery stats: %w", classify(err))
	}
	st.OldestUndelivered = deref(oldest)
	return st, nil
}

// Deliveries returns the newest deliveries (of one status when status is
// not empty), newest first.
func (s *Store) Deliveries(ctx context.Context, status string, limit int) ([]reconcile.AppDelivery, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, `SELECT `+deliveryColumns+`
		FROM app_deliveries d JOIN account_changes c ON c.id = d.change_id
		WHERE $1 = '' OR d.status = $1 ORDER BY d.change_id DESC, d.endpoint LIMIT $2`, status, limit)
	if err != nil {
		return nil, fmt.Errorf("deliveries: %w", classify(err))
	}
	ds, err := pgx.CollectRows(rows, scanDelivery)
	if err != nil {
		return nil, fmt.Errorf("deliveries: %w", classify(err))
	}
	return ds, nil
}

// DeliveryAttempts returns the attempts of a change's deliveries, oldest
// first, by endpoint.
func (s *Store) DeliveryAttempts(ctx context.Context, changeID int64) (map[string][]reconcile.AppDeliveryAttempt, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, `
		SELECT endpoint, at, coalesce(status_code, 0), duration_ms, coalesce(error, '')
		FROM app_delivery_attempts WHERE change_id = $1 ORDER BY id`, changeID)
	if err != nil {
		return nil, fmt.Errorf("delivery attempts %d: %w", changeID, classify(err))
	}
	out := map[string][]reconcile.AppDeliveryAttempt{}
	var ep string
	var a reconcile.AppDeliveryAttempt
	var ms float64
	_, err = pgx.ForEachRow(rows, []any{&ep, &a.At, &a.StatusCode, &ms, &a.Error}, func() error {
		a.Took = time.Duration(ms * float64(time.Millisecond))
		out[ep] = append(out[ep], a)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("delivery attempts %d: %w", changeID, classify(err))
	}
	return out, nil
}
