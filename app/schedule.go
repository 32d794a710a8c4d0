package app

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store"
)

// ParseSchedule reads a five-field cron spec in UTC; "" and "off" are
// never (a nil schedule).
func ParseSchedule(spec string) (cron.Schedule, error) {
	if spec == "off" || spec == "" {
		return nil, nil
	}
	s, err := cron.ParseStandard(spec)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Schedule is a long-running part like the worker: Run does job at each
// time of When (UTC) until ctx ends, then returns once a job in progress
// has returned too (job gets ctx, so it stops with it). serve schedules
// its sweeps and its prunes with it.
type Schedule struct {
	What   string // "sweep" or "prune": the logs say "<What> scheduled"
	When   cron.Schedule
	Job    func(ctx context.Context)
	Logger *slog.Logger
	Attrs  []any // said with "<What> scheduled", before the next time
}

// Run runs the schedule until ctx ends.
func (s Schedule) Run(ctx context.Context) {
	c := cron.New(cron.WithLocation(time.UTC))
	c.Schedule(s.When, cron.FuncJob(func() { s.Job(ctx) }))
	c.Start()
	s.Logger.Info(s.What+" scheduled", append(s.Attrs, "next", s.When.Next(time.Now().UTC()).Format(time.RFC3339))...)
	<-ctx.Done()
	<-c.Stop().Done()
}

// startSweeps is the scheduled sweep: it starts every provider's sweep
// through the runner that serve's stop stops (a scheduled sweep is
// bounded by -shutdown-timeout like any other); a started sweep logs how
// it ends.
func startSweeps(sweeps *reconcile.SweepRunner, logger *slog.Logger) func(context.Context) {
	return func(ctx context.Context) {
		starts, _ := sweeps.Start(ctx)
		for _, st := range starts {
			switch {
			case errors.Is(st.Err, reconcile.ErrSweepRunning):
				logger.Info("scheduled sweep skipped: a sweep of the provider is running, here or on another replica",
					"provider", st.Provider)
			case errors.Is(st.Err, reconcile.ErrSweepsStopped), ctx.Err() != nil:
			case st.Err != nil:
				logger.Error("scheduled sweep did not start", "provider", st.Provider, slog.Any("error", st.Err))
			}
		}
	}
}

// prune is the scheduled prune: one replica prunes at a time (the others
// log that they skipped), and a prune stops between two batches when ctx
// ends.
func prune(st *store.Store, r reconcile.Retention, logger *slog.Logger) func(context.Context) {
	return func(ctx context.Context) {
		p, err := st.Prune(ctx, r)
		switch {
		case errors.Is(err, reconcile.ErrPruneRunning):
			logger.Info("scheduled prune skipped: another replica is pruning")
		case err != nil && ctx.Err() != nil:
			logger.Info("scheduled prune stopped by shutdown", "events", p.Events, "receipts", p.Receipts, "log_rows", p.LogRows)
		case err != nil:
			logger.Error("scheduled prune failed", "events", p.Events, "receipts", p.Receipts, "log_rows", p.LogRows, slog.Any("error", err))
		default:
			logger.Info("pruned", "before", p.Cutoff, "events", p.Events, "receipts", p.Receipts, "log_rows", p.LogRows,
				"changes", p.Changes, "samples", p.Samples, "sweep_runs", p.SweepRuns, "sessions", p.Sessions, "batches", p.Batches)
		}
	}
}
