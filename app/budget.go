package app

import (
	"context"
	"log/slog"

	"github.com/billsync/billsync/providers/stripe"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/server"
	"github.com/billsync/billsync/store"
)

// SpendStripe reports the Stripe client's reads to the database and
// shares its rates with the other replicas (reconcile.Spending) until
// stop, which sends the last reads. worker: this process runs workers, so
// it takes a share of the rates; its first report is made before SpendStripe
// returns, so the first fetches already keep to it. metrics may be nil.
func SpendStripe(ctx context.Context, st *store.Store, client *stripe.Client, worker bool, metrics *server.Metrics,
	logger *slog.Logger) (spending *reconcile.Spending, stop func(), err error) {
	if spending, err = newSpending(ctx, st, client, worker, metrics, logger); err != nil {
		return nil, nil, err
	}
	return spending, runSpending(ctx, spending), nil
}

// newSpending is SpendStripe up to its first report: serve's App makes it
// in New (the worker's first fetches keep to it) and runs it from Start.
func newSpending(ctx context.Context, st *store.Store, client *stripe.Client, worker bool, metrics *server.Metrics,
	logger *slog.Logger) (*reconcile.Spending, error) {
	cfg := reconcile.SpendingConfig{Store: st, Client: client, Worker: worker, Logger: logger}
	if metrics != nil {
		cfg.OnReport = func(v reconcile.SpendView) {
			metrics.ObserveSpend(v)
			global, _ := client.Rates()
			metrics.SetProviderRateLimit(stripe.Provider, global)
		}
	}
	spending, err := reconcile.NewSpending(cfg)
	if err != nil {
		return nil, err
	}
	if _, err := spending.Report(ctx); err != nil {
		logger.WarnContext(ctx, "budget: first report failed; this replica takes the whole rate until one succeeds", slog.Any("error", err))
	}
	return spending, nil
}

// runSpending reports spending's reads until stop, which sends the last.
func runSpending(ctx context.Context, spending *reconcile.Spending) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); spending.Run(ctx) }()
	return func() { cancel(); <-done }
}
