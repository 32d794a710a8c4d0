package main

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/billsync/billsync/providers/kinde"
	"github.com/billsync/billsync/providers/stripe"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/server"
	"github.com/billsync/billsync/store"
)

// providers are the API clients of the providers this process is
// configured for; a nil field is a provider that is off.
type providers struct {
	stripe *stripe.Client
	kinde  *kinde.Client
}

// newProviders builds the client of every configured provider: Stripe
// when cfg has its API key, Kinde when its domain and M2M credentials are
// set. metrics (may be nil) sees every API attempt and every 429.
func newProviders(cfg config, logger *slog.Logger, metrics *server.Metrics) (providers, error) {
	var p providers
	observe := func(provider string) func(string) {
		if metrics == nil {
			return nil
		}
		return func(status string) { metrics.ObserveProviderRequest(provider, status) }
	}
	var err error
	if cfg.StripeAPIKey != "" {
		if p.stripe, err = newStripeClient(cfg, logger, metrics); err != nil {
			return p, err
		}
	}
	if cfg.kindeOn() {
		if p.kinde, err = kinde.NewClient(kinde.Config{
			Domain: cfg.KindeDomain, ClientID: cfg.KindeClientID, ClientSecret: cfg.KindeClientSecret,
			RateLimit: cfg.KindeRateLimit, Logger: logger, OnAttempt: observe(kinde.Provider), Entitlements: cfg.KindeEntitlements,
		}); err != nil {
			return p, err
		}
	}
	return p, nil
}

// list returns the clients of the providers that are on, for the worker.
func (p providers) list() []reconcile.Provider {
	var list []reconcile.Provider
	if p.stripe != nil {
		list = append(list, p.stripe)
	}
	if p.kinde != nil {
		list = append(list, p.kinde)
	}
	return list
}

// names says which providers are on, for the start-up log.
func (p providers) names() string {
	var names []string
	for _, c := range p.list() {
		names = append(names, c.Name())
	}
	return strings.Join(names, ", ")
}

// sweepers returns one sweeper per provider that is on: Stripe's lists
// customers in bulk; Kinde has no bulk listing, so its sweep queues every
// Kinde account for the worker, spaced by pace (-kinde-sweep-pace).
// only, when set, keeps the one provider of that name. Each sweeps and
// reports on its own: one provider's failure, or its sweep running
// elsewhere, never keeps another from sweeping.
func (p providers) sweepers(st *store.Store, plans *reconcile.Plans, logger *slog.Logger, cfg config, only string,
	onPage func(reconcile.SweepRun)) ([]*reconcile.Sweeper, error) {
	var out []*reconcile.Sweeper
	if p.stripe != nil && (only == "" || only == stripe.Provider) {
		s, err := newSweeper(st, p.stripe, plans, logger, cfg.SweepParallel, onPage)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	if p.kinde != nil && (only == "" || only == kinde.Provider) {
		s, err := reconcile.NewSweeper(reconcile.SweeperConfig{
			Store: st, Provider: kinde.Provider, Pace: cfg.kindeSweepPace(), Plans: plans, Logger: logger, OnPage: onPage,
		})
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	if len(out) == 0 {
		if only != "" {
			return nil, fmt.Errorf("provider %q is not configured here (configured: %s)", only, p.names())
		}
		return nil, errors.New("no provider is configured")
	}
	return out, nil
}
