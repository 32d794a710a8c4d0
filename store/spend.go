package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/billsync/billsync/reconcile"
)

// utcDay is today by the database's clock, in UTC: the day reads and
// transactions are counted under.
const utcDay = `(now() AT TIME ZONE 'UTC')::date`

// replicaSeen is how lately a replica must have reported to count among
// those sharing a provider's rates: three periods, so one late report
// does not hand its share to the others.
const replicaSeen = 3 * reconcile.DefaultSpendPeriod

// spendKept is how long the daily counts are kept: twice the window.
const spendKept = 60

// ReportSpend adds reads to today's counts, marks holder as running the
// provider's worker when worker is set, drops counts older than 60 days and
// replicas not seen for a day, and returns the record of the last 30 days
// (today included) as it stood before this statement: the reads by
// operation (those on behalf of connected accounts under their
// reconcile.ConnectOperation names), the platform's transactions and the
// connected accounts' apart. One statement, so
// it holds nothing between calls (correct behind a transaction pooler);
// every replica adds to the same rows, so each sees what all read.
func (s *Store) ReportSpend(ctx context.Context, provider, holder string, reads map[string]int64, worker bool) (reconcile.Spend, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	ops := make([]string, 0, len(reads))
	counts := make([]int64, 0, len(reads))
	for op, n := range reads {
		ops, counts = append(ops, op), append(counts, n)
	}
	var (
		sp      = reconcile.Spend{Reads: map[string]int64{}}
		since   *time.Time
		byOp    string
		replica int
	)
	err := s.pool.QueryRow(ctx, `
		WITH added AS (
			INSERT INTO provider_reads (provider, day, operation, reads)
			SELECT $1, `+utcDay+`, op, n FROM unnest($3::text[], $4::int8[]) AS r(op, n)
			ON CONFLICT (provider, day, operation) DO UPDATE SET reads = provider_reads.reads + excluded.reads
		), seen AS (
			INSERT INTO budget_replicas (provider, holder) SELECT $1, $2 WHERE $5
			ON CONFLICT (provider, holder) DO UPDATE SET seen_at = now()
		), old_reads AS (
			DELETE FROM provider_reads WHERE provider = $1 AND day < `+utcDay+` - $7::int
		), old_transactions AS (
			DELETE FROM provider_transactions WHERE provider = $1 AND day < `+utcDay+` - $7::int
		), gone AS (
			DELETE FROM budget_replicas WHERE provider = $1 AND seen_at < now() - interval '1 day'
		)
		SELECT now(),
			(SELECT min(day)::timestamp AT TIME ZONE 'UTC' FROM provider_reads
			 WHERE provider = $1 AND day > `+utcDay+` - 30),
			(SELECT coalesce(jsonb_object_agg(operation, reads), '{}')::text FROM (
				SELECT operation, sum(reads) AS reads FROM provider_reads
				WHERE provider = $1 AND day > `+utcDay+` - 30 GROUP BY operation) r),
			(SELECT coalesce(sum(transactions), 0) FROM provider_transactions
			 WHERE provider = $1 AND day > `+utcDay+` - 30),
			(SELECT coalesce(sum(connect_transactions), 0) FROM provider_transactions
			 WHERE provider = $1 AND day > `+utcDay+` - 30),
			(SELECT count(*) FROM budget_replicas
			 WHERE provider = $1 AND holder <> $2 AND seen_at > now() - make_interval(secs => $6))`,
		provider, holder, ops, counts, worker, replicaSeen.Seconds(), spendKept,
	).Scan(&sp.Now, &since, &byOp, &sp.Transactions, &sp.ConnectTransactions, &replica)
	if err != nil {
		return reconcile.Spend{}, fmt.Errorf("report %s reads: %w", provider, classify(err))
	}
	if err := json.Unmarshal([]byte(byOp), &sp.Reads); err != nil {
		return reconcile.Spend{}, fmt.Errorf("report %s reads: read the counts: %w", provider, err)
	}
	if since != nil {
		sp.Since = *since
	}
	sp.Replicas = replica
	if worker {
		sp.Replicas++
	}
	return sp, nil
}

// LeaveSpend drops holder from the replicas sharing provider's rates.
func (s *Store) LeaveSpend(ctx context.Context, provider, holder string) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if _, err := s.pool.Exec(ctx, `DELETE FROM budget_replicas WHERE provider = $1 AND holder = $2`, provider, holder); err != nil {
		return fmt.Errorf("leave %s budget shares: %w", provider, classify(err))
	}
	return nil
}
