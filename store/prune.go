package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/billsync/billsync/reconcile"
)

// Retention's deletes. Each takes the cutoff ($1) and the batch size ($2)
// and deletes at most that many rows, oldest first; FOR UPDATE SKIP LOCKED
// passes over any row a worker or the intake holds at that moment (it is
// taken by a later prune), so a prune never waits on a row lock.
const (
	// Receipts of handled events, older than the cutoff.
	pruneReceiptsSQL = `
		DELETE FROM receipts WHERE id IN (
			SELECT r.id FROM receipts r JOIN inbox_events e ON e.id = r.event_id
			WHERE r.received_at < $1 AND e.status IN ('applied', 'ignored')
			ORDER BY r.id LIMIT $2
			FOR UPDATE OF r SKIP LOCKED)`
	// Handled events last seen before the cutoff, with their payloads
	// (and any receipt left, by the foreign key's cascade). Kept: the
	// customer's newest event naming the app's user reference, unless the
	// account already holds that reference: a reconcile hands it to the
	// account (a queue row takes it when born: enqueueSQL), and it may not
	// have yet (an ignored reconcile writes no account).
	pruneEventsSQL = `
		DELETE FROM inbox_events WHERE id IN (
			SELECT e.id FROM inbox_events e
			WHERE e.status IN ('applied', 'ignored') AND e.last_seen_at < $1 AND e.received_at < $1
			  AND (e.user_ref IS NULL
			    OR EXISTS (SELECT 1 FROM accounts a
			               WHERE a.provider = e.provider AND a.customer_id = e.customer_id AND a.user_ref = e.user_ref)
			    OR e.id <> (SELECT n.id FROM inbox_events n
			                WHERE n.provider = e.provider AND n.customer_id = e.customer_id AND n.user_ref IS NOT NULL
			                ORDER BY n.event_time DESC NULLS LAST, n.id DESC LIMIT 1))
			ORDER BY e.id LIMIT $2
			FOR UPDATE SKIP LOCKED)`
	pruneLogSQL = `
		DELETE FROM reconcile_log WHERE id IN (
			SELECT id FROM reconcile_log WHERE created_at < $1
			ORDER BY id LIMIT $2
			FOR UPDATE SKIP LOCKED)`
	// The app's changes older than the cutoff whose every delivery is
	// finished (delivered or dead; a change with none is finished too)
	// and that every endpoint's cursor has passed (its deliveries are
	// created after the change is written: FanOut),
	// with their deliveries and attempts (by cascade). The deliveries are
	// locked and read again before the delete: a console Retry that made
	// one pending after this statement's snapshot is then seen (a locked
	// row is read as committed), and its change kept; a Retry after the
	// lock waits, then finds no delivery (404).
	pruneChangesSQL = `
		WITH c AS (
			SELECT c.id FROM account_changes c
			WHERE c.created_at < $1
			  AND NOT EXISTS (SELECT 1 FROM app_deliveries d WHERE d.change_id = c.id AND d.status = 'pending')
			  AND (c.xid, c.id) <= ALL (SELECT cursor_xid, cursor_id FROM app_endpoints)
			ORDER BY c.id LIMIT $2
			FOR UPDATE SKIP LOCKED),
		d AS (
			SELECT d.change_id, d.status FROM app_deliveries d
			WHERE d.change_id IN (SELECT id FROM c)
			FOR UPDATE)
		DELETE FROM account_changes WHERE id IN (SELECT id FROM c)
		  AND id NOT IN (SELECT change_id FROM d WHERE status = 'pending')`
	// The correctness sample's rows (docs/correctness.md).
	pruneSamplesSQL = `
		DELETE FROM samples WHERE id IN (
			SELECT id FROM samples WHERE sampled_at < $1
			ORDER BY id LIMIT $2
			FOR UPDATE SKIP LOCKED)`
	// A connected account's runs (thousands of accounts, a run a day
	// each) keep its newest and its newest successful one; the platform's
	// are its sweep history, a few a day, kept.
	pruneSweepRunsSQL = `
		DELETE FROM sweep_runs WHERE id IN (
			SELECT r.id FROM sweep_runs r
			WHERE r.account <> '' AND r.status <> 'running' AND r.started_at < $1
			  AND r.id <> (SELECT max(n.id) FROM sweep_runs n WHERE n.provider = r.provider AND n.account = r.account)
			  AND r.id <> coalesce((SELECT max(s.id) FROM sweep_runs s
			                        WHERE s.provider = r.provider AND s.account = r.account AND s.status = 'succeeded'), 0)
			ORDER BY r.id LIMIT $2
			FOR UPDATE SKIP LOCKED)`
	pruneSessionsSQL = `
		DELETE FROM console_sessions WHERE session_hash IN (
			SELECT session_hash FROM console_sessions WHERE expires_at < $1
			LIMIT $2 FOR UPDATE SKIP LOCKED)`
)

// pruneLockTimeout bounds how long one batch may wait for a table lock
// (a migration, a VACUUM FULL): the prune then fails and the next one
// tries again, rather than queue the intake behind it.
const pruneLockTimeout = "2s"

// Prune deletes what r allows, in batches of r.Batch rows, each its own
// transaction; see reconcile.Retention. It never touches pending or dead
// events (nor their receipts), a change with a pending delivery or one
// an endpoint's cursor has not passed, the queue, accounts, the ledger or
// sweep runs. One prune runs at a time across replicas (a lease); another
// gets reconcile.ErrPruneRunning. Cancelled, it returns what it
// deleted so far with the error.
func (s *Store) Prune(ctx context.Context, r reconcile.Retention) (reconcile.Pruned, error) {
	if err := r.Validate(); err != nil {
		return reconcile.Pruned{}, err
	}
	batch := r.Batch
	if batch == 0 {
		batch = reconcile.DefaultPruneBatch
	}
	var p reconcile.Pruned
	held, release, err := s.lease(ctx, "prune")
	if errors.Is(err, reconcile.ErrLeaseHeld) {
		return p, reconcile.ErrPruneRunning
	}
	if err != nil {
		return p, fmt.Errorf("prune: %w", err)
	}
	defer release()
	// A prune whose lease is lost stops between batches, as if cancelled.
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	defer context.AfterFunc(held, func() { stop(context.Cause(held)) })()
	var now time.Time
	bctx, cancel := s.bound(ctx)
	err = s.pool.QueryRow(bctx, `SELECT now(), now() - make_interval(secs => $1)`, r.OlderThan.Seconds()).Scan(&now, &p.Cutoff)
	cancel()
	if err != nil {
		return p, fmt.Errorf("prune: %w", classify(err))
	}
	// Receipts before events: an event's receipts then go in batches of
	// their own rather than by cascade inside an event batch.
	// Sessions go once expired, whatever the retention.
	steps := []struct {
		sql    string
		before time.Time
		n      *int64
	}{{pruneReceiptsSQL, p.Cutoff, &p.Receipts}, {pruneEventsSQL, p.Cutoff, &p.Events}, {pruneLogSQL, p.Cutoff, &p.LogRows},
		{pruneChangesSQL, p.Cutoff, &p.Changes}, {pruneSamplesSQL, p.Cutoff, &p.Samples}, {pruneSweepRunsSQL, p.Cutoff, &p.SweepRuns},
		{pruneSessionsSQL, now, &p.Sessions}}
	for _, step := range steps {
		for {
			n, err := s.pruneBatch(ctx, step.sql, step.before, batch)
			if err != nil {
				return p, err
			}
			p.Batches++
			*step.n += n
			p.MaxInBatch = max(p.MaxInBatch, n)
			if n < int64(batch) {
				break
			}
		}
	}
	return p, nil
}

// pruneBatch runs one delete of at most batch rows in a transaction of
// its own.
func (s *Store) pruneBatch(ctx context.Context, sql string, cutoff time.Time, batch int) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var n int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '`+pruneLockTimeout+`'`); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, sql, cutoff, batch)
		n = tag.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("prune: %w", classify(err))
	}
	return n, nil
}

// defaultExactRowsUnder is the heap size (pg_relation_size) under which
// TableSizes counts a table's rows: scanning 64 MiB takes well under a
// second, while the planner's estimate is 0 or missing for a table not
// analyzed yet, which a small table (a few accounts) may never be.
const defaultExactRowsUnder = 64 << 20

// TableSizes returns the footprint of billsync's tables, largest first:
// bytes with indexes and TOAST (pg_total_relation_size), and rows counted
// in one read-only snapshot for a table under defaultExactRowsUnder, else
// PostgreSQL's estimate (reltuples; Exact false, Rows -1 when the table was
// never analyzed), since counting a large table would take long. It
// writes nothing.
func (s *Store) TableSizes(ctx context.Context) ([]reconcile.TableSize, error) {
	limit := cmp.Or(s.exactRowsUnder, defaultExactRowsUnder)
	var sizes []reconcile.TableSize
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		qctx, cancel := s.bound(ctx)
		defer cancel()
		rows, err := tx.Query(qctx, `
			SELECT n.nspname, c.relname, c.reltuples::bigint, pg_relation_size(c.oid), pg_total_relation_size(c.oid)
			FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE c.relkind = 'r' AND n.nspname = current_schema()
			ORDER BY 5 DESC, 2`)
		if err != nil {
			return err
		}
		var schemas []string
		var heaps []int64
		sizes, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (reconcile.TableSize, error) {
			var t reconcile.TableSize
			var schema string
			var heap int64
			err := row.Scan(&schema, &t.Table, &t.Rows, &heap, &t.Bytes)
			schemas, heaps = append(schemas, schema), append(heaps, heap)
			return t, err
		})
		if err != nil {
			return err
		}
		for i := range sizes {
			if heaps[i] >= limit {
				continue
			}
			cctx, cancel := s.bound(ctx)
			err := tx.QueryRow(cctx, `SELECT count(*) FROM `+pgx.Identifier{schemas[i], sizes[i].Table}.Sanitize()).Scan(&sizes[i].Rows)
			cancel()
			if err != nil {
				return err
			}
			sizes[i].Exact = true
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("table sizes: %w", classify(err))
	}
	return sizes, nil
}
