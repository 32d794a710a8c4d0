package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/billsync/billsync/reconcile"
)

// Claim leases up to limit due queue rows to worker. SKIP LOCKED lets
// workers in any process claim side by side; a lease that ran out (its
// worker died) makes the row claimable again.
func (s *Store) Claim(ctx context.Context, worker string, limit int, lease time.Duration) ([]reconcile.Job, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, `
		WITH due AS (
			SELECT id FROM reconcile_queue
			WHERE status = 'pending' AND due_at <= now()
			  AND (locked_until IS NULL OR locked_until < now())
			ORDER BY due_at
			LIMIT $2
			FOR UPDATE SKIP LOCKED)
		UPDATE reconcile_queue q
		SET locked_by = $1, locked_until = now() + make_interval(secs => $3)
		FROM due WHERE q.id = due.id
		RETURNING q.id, q.provider, q.customer_id, q.trigger, q.requested_at, now(), q.attempts,
			q.expect::text, coalesce(q.user_ref, '')`,
		worker, limit, lease.Seconds())
	if err != nil {
		return nil, fmt.Errorf("claim jobs: %w", classify(err))
	}
	jobs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (reconcile.Job, error) {
		var j reconcile.Job
		var expect *string // read as text: the same bytes in every query mode
		if err := r.Scan(&j.ID, &j.Provider, &j.CustomerID, &j.Trigger, &j.RequestedAt, &j.ClaimedAt, &j.Attempts, &expect, &j.UserRef); err != nil {
			return j, err
		}
		if expect != nil {
			j.Expect = new(reconcile.Expectation)
			if err := json.Unmarshal([]byte(*expect), j.Expect); err != nil {
				return j, fmt.Errorf("job %d: read expectation: %w", j.ID, err)
			}
		}
		return j, nil
	})
	if err != nil {
		return nil, fmt.Errorf("claim jobs: %w", classify(err))
	}
	return jobs, nil
}

// refreshExpect sets a queue row's expectation (q, of the statement it
// ends) to its customer's newest pending event's: after a reconcile
// answered the events it covered, only those received since count (an
// event that arrived during the fetch keeps the row; see finishJob).
const refreshExpect = `(expect, expect_at, expect_event) = (SELECT e.expect, e.event_time, e.id FROM inbox_events e
	WHERE e.provider = q.provider AND e.customer_id = q.customer_id AND e.status = 'pending' AND e.expect IS NOT NULL
	ORDER BY e.event_time DESC NULLS LAST, e.id DESC LIMIT 1)`

// refreshExpects refreshes the expectation of provider's customers' queue
// rows, after a reconcile without a queue row (the sweep's) answered their
// events: a row may expect what an answered event said. A row locked now
// is not waited for: a worker's apply locks it before the account, the
// sweep the other way round, and that apply settles it itself
// (finishJob).
func refreshExpects(ctx context.Context, tx pgx.Tx, provider string, customers []string) error {
	if len(customers) == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, `
		UPDATE reconcile_queue q SET `+refreshExpect+`
		WHERE q.id IN (SELECT id FROM reconcile_queue WHERE provider = $1 AND customer_id = ANY($2::text[]) AND expect IS NOT NULL
		               ORDER BY id FOR UPDATE SKIP LOCKED)`, provider, customers); err != nil {
		return fmt.Errorf("refresh the queue rows' expectations: %w", err)
	}
	return nil
}

// Now returns the database's clock.
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var t time.Time
	if err := s.pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&t); err != nil {
		return time.Time{}, fmt.Errorf("read database clock: %w", classify(err))
	}
	return t, nil
}

// Extend renews the leases worker still holds on jobs for lease from now
// and returns how many it held. A row locked at that moment (its job's
// apply is writing it, in a transaction that finishes or retries the job)
// is skipped, not waited for, and counted as held: a heartbeat that waited
// would hold the rows it had renewed until the last lock was free, and
// every apply of those jobs would wait behind it (measured: heartbeats of
// 500 ms and a drain at 66-83% of its rate for seconds).
func (s *Store) Extend(ctx context.Context, worker string, jobs []reconcile.Job, lease time.Duration) (int, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var held int
	err := s.pool.QueryRow(ctx, `
		WITH free AS (
			SELECT id FROM reconcile_queue WHERE id = ANY($1) AND locked_by = $2
			FOR UPDATE SKIP LOCKED
		), renewed AS (
			UPDATE reconcile_queue q SET locked_until = now() + make_interval(secs => $3)
			FROM free WHERE q.id = free.id
			RETURNING q.id
		)
		SELECT (SELECT count(*) FROM renewed) + (SELECT count(*) FROM reconcile_queue
			WHERE id = ANY($1) AND locked_by = $2 AND id NOT IN (SELECT id FROM free))`,
		jobIDs(jobs), worker, lease.Seconds()).Scan(&held)
	if err != nil {
		return 0, fmt.Errorf("extend leases: %w", classify(err))
	}
	return held, nil
}

func jobIDs(jobs []reconcile.Job) []int64 {
	ids := make([]int64, len(jobs))
	for i, j := range jobs {
		ids[i] = j.ID
	}
	return ids
}

// Release gives back the leases worker holds on jobs.
func (s *Store) Release(ctx context.Context, worker string, jobs []reconcile.Job) error {
	if len(jobs) == 0 {
		return nil
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	_, err := s.pool.Exec(ctx, `
		UPDATE reconcile_queue SET locked_by = NULL, locked_until = NULL
		WHERE id = ANY($1) AND locked_by = $2`, jobIDs(jobs), worker)
	if err != nil {
		return fmt.Errorf("release jobs: %w", classify(err))
	}
	return nil
}

// Enqueue makes a customer due now for trigger (sweep, resync, replay).
func (s *Store) Enqueue(ctx context.Context, provider, customerID, trigger string) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		return enqueue(ctx, tx, provider, customerID, trigger)
	})
	if err != nil {
		return classify(err)
	}
	s.notify(ctx)
	return nil
}

// Queue row statuses.
const (
	queuePending = "pending"
	queueDead    = "dead"
)

// finishJob ends a job inside the reconcile's transaction: deleted when
// its newest request is covered by observedAt, else left due now (an event
// arrived during the fetch and needs a later look).
func finishJob(ctx context.Context, tx pgx.Tx, job reconcile.Job, observedAt time.Time) error {
	tag, err := tx.Exec(ctx, `DELETE FROM reconcile_queue WHERE id = $1 AND requested_at <= $2`, job.ID, observedAt)
	if err != nil {
		return fmt.Errorf("complete job: %w", err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	_, err = tx.Exec(ctx, `
		UPDATE reconcile_queue q
		SET due_at = now(), attempts = 0, status = 'pending', locked_by = NULL, locked_until = NULL, last_error = NULL,
			`+refreshExpect+`
		WHERE id = $1`, job.ID)
	if err != nil {
		return fmt.Errorf("re-due job: %w", err)
	}
	return nil
}

// markEvents answers every stored event of the job's customer received at
// or before observedAt with status and outcome: one reconcile answers them
// all, because a webhook is sent after the change it reports. It returns
// what it marked (the ids listed are of the earliest received).
func markEvents(ctx context.Context, tx pgx.Tx, job reconcile.Job, observedAt time.Time, status reconcile.EventStatus, outcome string) (marked, error) {
	m, err := markEventsOf(ctx, tx, job.Provider, observedAt, []answer{{job.CustomerID, status, outcome}})
	if err != nil {
		return marked{}, err
	}
	return m[0], nil
}

// answer is what a reconcile answers its customer's events with.
type answer struct {
	customerID string
	status     reconcile.EventStatus
	outcome    string
}

// marked is the events one answer marked: how many, the provider ids of
// the first reconcile.MaxWhyEvents, and each one's source and receipt
// time (the freshness SLI).
type marked struct {
	ids      []string
	n        int
	answered []reconcile.Answered
}

// markEventsOf is markEvents for several customers of provider (each named
// once) in one statement: the result is aligned with answers.
func markEventsOf(ctx context.Context, tx pgx.Tx, provider string, observedAt time.Time, answers []answer) ([]marked, error) {
	customers, statuses, outcomes := make([]string, len(answers)), make([]string, len(answers)), make([]string, len(answers))
	for i, a := range answers {
		customers[i], statuses[i], outcomes[i] = a.customerID, string(a.status), a.outcome
	}
	rows, _ := tx.Query(ctx, `
		WITH answered AS (
			UPDATE inbox_events e SET status = v.status, outcome = v.outcome, processed_at = now()
			FROM unnest($2::text[], $3::text[], $4::text[]) WITH ORDINALITY AS v(customer_id, status, outcome, n)
			WHERE e.provider = $1 AND e.customer_id = v.customer_id AND e.status IN ($6, $7) AND e.received_at <= $5
			RETURNING v.n, e.event_id, e.received_at, e.id, e.source)
		SELECT n, event_id, received_at, source FROM answered ORDER BY n, received_at, id`,
		provider, customers, statuses, outcomes, observedAt, reconcile.EventPending, reconcile.EventDead)
	ms := make([]marked, len(answers))
	var n int64
	var id string
	var a reconcile.Answered
	_, err := pgx.ForEachRow(rows, []any{&n, &id, &a.ReceivedAt, &a.Source}, func() error {
		m := &ms[n-1]
		if m.n++; len(m.ids) < reconcile.MaxWhyEvents {
			m.ids = append(m.ids, id)
		}
		m.answered = append(m.answered, a)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("mark events: %w", err)
	}
	return ms, nil
}

// Hold makes the customer's queue row due now for trigger (creating it,
// reviving it when dead, as a new webhook would) and leases it to holder
// for lease, in one transaction: the caller then reconciles it exactly as a
// claimed job. When another worker holds the row, the request stays queued
// (that worker's reconcile, or the next, answers it) and the error wraps
// reconcile.ErrHeld.
func (s *Store) Hold(ctx context.Context, provider, customerID, trigger, holder string, lease time.Duration) (reconcile.Job, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var job reconcile.Job
	var heldBy string
	var heldUntil *time.Time
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := enqueue(ctx, tx, provider, customerID, trigger); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `
			UPDATE reconcile_queue q
			SET locked_by = CASE WHEN free THEN $3 ELSE locked_by END,
			    locked_until = CASE WHEN free THEN now() + make_interval(secs => $4) ELSE locked_until END
			FROM (SELECT id, locked_until IS NULL OR locked_until < now() OR locked_by = $3 AS free
			      FROM reconcile_queue WHERE provider = $1 AND customer_id = $2 FOR UPDATE) f
			WHERE q.id = f.id
			RETURNING q.id, q.provider, q.customer_id, q.trigger, q.requested_at, now(), q.attempts,
			          CASE WHEN f.free THEN '' ELSE coalesce(q.locked_by, '') END, q.locked_until,
			          coalesce(q.user_ref, '')`,
			provider, customerID, holder, lease.Seconds()).Scan(&job.ID, &job.Provider, &job.CustomerID,
			&job.Trigger, &job.RequestedAt, &job.ClaimedAt, &job.Attempts, &heldBy, &heldUntil, &job.UserRef)
	})
	if err != nil {
		return reconcile.Job{}, fmt.Errorf("hold %s/%s: %w", provider, customerID, classify(err))
	}
	if heldBy != "" {
		return reconcile.Job{}, fmt.Errorf("%s/%s is held by %s until %s; it stays queued: %w",
			provider, customerID, heldBy, deref(heldUntil).UTC().Format(time.RFC3339), reconcile.ErrHeld)
	}
	return job, nil
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
