package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/billsync/billsync/reconcile"
)

// Overview reads the console's first page: the queue, each provider's
// newest sweep, the last 24 hours of deliveries and reconciles by hour,
// the unmapped prices met in them, and the health signals of the events
// feeds and the app deliveries. The hourly counts scan one day of
// receipts and reconcile_log through their BRIN indexes (migration 012).
func (s *Store) Overview(ctx context.Context) (reconcile.Overview, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var o reconcile.Overview
	err := s.pool.QueryRow(ctx, `
		SELECT now(),
		       count(*) FILTER (WHERE status = 'pending'),
		       count(*) FILTER (WHERE status = 'pending' AND due_at <= now()),
		       count(*) FILTER (WHERE status = 'dead')
		FROM reconcile_queue`).Scan(&o.Now, &o.Pending, &o.Due, &o.Dead)
	if err != nil {
		return o, fmt.Errorf("overview: queue: %w", classify(err))
	}
	first := o.Now.Truncate(time.Hour).Add(-(reconcile.OverviewHours - 1) * time.Hour)
	o.Hours = make([]reconcile.OverviewHour, reconcile.OverviewHours)
	for i := range o.Hours {
		o.Hours[i] = reconcile.OverviewHour{Start: first.Add(time.Duration(i) * time.Hour), Reconciles: map[reconcile.Result]int{}}
	}
	hour := func(t time.Time) *reconcile.OverviewHour {
		i := int(t.Sub(first) / time.Hour)
		if i < 0 || i >= len(o.Hours) {
			return nil
		}
		return &o.Hours[i]
	}

	rows, _ := s.pool.Query(ctx, `
		SELECT date_trunc('hour', received_at), duplicate, count(*)
		FROM receipts WHERE received_at >= $1 GROUP BY 1, 2`, first)
	var at time.Time
	var dup bool
	var n int
	_, err = pgx.ForEachRow(rows, []any{&at, &dup, &n}, func() error {
		if h := hour(at); h != nil && dup {
			h.Copies += n
		} else if h != nil {
			h.Deliveries += n
		}
		return nil
	})
	if err != nil {
		return o, fmt.Errorf("overview: deliveries: %w", classify(err))
	}
	var result string
	rows, _ = s.pool.Query(ctx, `
		SELECT date_trunc('hour', created_at), result, count(*)
		FROM reconcile_log WHERE created_at >= $1 GROUP BY 1, 2`, first)
	_, err = pgx.ForEachRow(rows, []any{&at, &result, &n}, func() error {
		if h := hour(at); h != nil {
			h.Reconciles[reconcile.Result(result)] += n
		}
		return nil
	})
	if err != nil {
		return o, fmt.Errorf("overview: reconciles: %w", classify(err))
	}

	rows, _ = s.pool.Query(ctx, `
		SELECT outcome, count(DISTINCT account_id)::int FROM reconcile_log
		WHERE created_at >= $1 AND result = 'ignored' AND outcome LIKE 'ignored: price% no plan'
		GROUP BY outcome ORDER BY 2 DESC, 1 LIMIT 20`, first)
	if o.Unmapped, err = pgx.CollectRows(rows, pgx.RowToStructByPos[reconcile.UnmappedCount]); err != nil {
		return o, fmt.Errorf("overview: unmapped prices: %w", classify(err))
	}

	rows, _ = s.pool.Query(ctx, `
		SELECT DISTINCT ON (provider, kind) `+sweepRecordColumns+`
		FROM sweep_runs WHERE account = '' ORDER BY provider, kind, id DESC`)
	if o.Sweeps, err = pgx.CollectRows(rows, scanSweepRecord); err != nil {
		return o, fmt.Errorf("overview: sweeps: %w", classify(err))
	}
	feeds, err := s.EventsFeedStates(ctx)
	if err != nil {
		return o, fmt.Errorf("overview: %w", err)
	}
	app, err := s.AppDeliveryStats(ctx)
	if err != nil {
		return o, fmt.Errorf("overview: %w", err)
	}
	o.Signals = reconcile.HealthSignals(o.Now, feeds, app)
	windows, err := s.SampleWindows(ctx, reconcile.SampleWindows)
	if err != nil {
		return o, fmt.Errorf("overview: %w", err)
	}
	o.Signals = append(o.Signals, reconcile.CorrectnessSignals(windows, reconcile.CorrectnessObjective)...)
	if o.Drifted, err = s.DriftedSamples(ctx, reconcile.OverviewDrifted); err != nil {
		return o, fmt.Errorf("overview: %w", err)
	}
	return o, nil
}
