package app

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/billsync/billsync/providers/kinde"
	"github.com/billsync/billsync/providers/stripe"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/server"
	"github.com/billsync/billsync/store"
)

// Providers are the API clients of the providers this process is
// configured for; a nil field is a provider that is off.
type Providers struct {
	Stripe *stripe.Client
	Kinde  *kinde.Client
}

// NewProviders builds the client of every configured provider: Stripe
// when cfg has its API key, Kinde when its domain and M2M credentials are
// set. plans (may be nil) says what the Stripe client reads (see
// NewStripeClient); metrics (may be nil) sees every API attempt and every 429.
func NewProviders(cfg Config, plans *reconcile.Plans, logger *slog.Logger, metrics *server.Metrics) (Providers, error) {
	var p Providers
	observe := func(provider string) func(string) {
		if metrics == nil {
			return nil
		}
		return func(status string) { metrics.ObserveProviderRequest(provider, status) }
	}
	var err error
	if cfg.StripeAPIKey != "" {
		if p.Stripe, err = NewStripeClient(cfg, plans, logger, metrics); err != nil {
			return p, err
		}
	}
	if cfg.KindeOn() {
		if p.Kinde, err = kinde.NewClient(kinde.Config{
			Domain: cfg.KindeDomain, ClientID: cfg.KindeClientID, ClientSecret: cfg.KindeClientSecret,
			RateLimit: cfg.KindeRateLimit, Logger: logger, OnAttempt: observe(kinde.Provider), Entitlements: cfg.KindeEntitlements,
		}); err != nil {
			return p, err
		}
	}
	return p, nil
}

// List returns the clients of the providers that are on, for the worker.
func (p Providers) List() []reconcile.Provider {
	var list []reconcile.Provider
	if p.Stripe != nil {
		list = append(list, p.Stripe)
	}
	if p.Kinde != nil {
		list = append(list, p.Kinde)
	}
	return list
}

// Names says which providers are on, for the start-up log.
func (p Providers) Names() string {
	var names []string
	for _, c := range p.List() {
		names = append(names, c.Name())
	}
	return strings.Join(names, ", ")
}

// Sweepers returns one sweeper per provider that is on: Stripe's lists
// customers in bulk; Kinde has no bulk listing, so its sweep finds every
// Kinde customer (its users' and organisations' billing customers, known
// to billsync or not) and queues each for the worker, then every known
// account not found, spaced by pace (-kinde-sweep-pace).
// only, when set, keeps the one provider of that name. Each sweeps and
// reports on its own: one provider's failure, or its sweep running
// elsewhere, never keeps another from sweeping.
func (p Providers) Sweepers(st *store.Store, plans *reconcile.Plans, logger *slog.Logger, cfg Config, only string,
	hooks SweepHooks) ([]*reconcile.Sweeper, error) {
	var out []*reconcile.Sweeper
	if p.Stripe != nil && (only == "" || only == stripe.Provider) {
		s, err := NewSweeper(st, p.Stripe, plans, logger, cfg.SweepParallel, hooks)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	if p.Kinde != nil && (only == "" || only == kinde.Provider) {
		s, err := reconcile.NewSweeper(reconcile.SweeperConfig{
			Store: st, Provider: kinde.Provider, Finder: p.Kinde, Pace: cfg.KindeSweepInterval(), Plans: plans, Logger: logger,
			OnPage: hooks.OnPage, OnAnswered: hooks.OnAnswered,
		})
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	if len(out) == 0 {
		if only != "" {
			return nil, fmt.Errorf("provider %q is not configured here (configured: %s)", only, p.Names())
		}
		return nil, errors.New("no provider is configured")
	}
	return out, nil
}

// NewStripeClient is the Stripe client serve and the commands share. It
// reads products' plans when plans (nil for a command that reconciles
// nothing) maps products; metrics (may be nil) sees its attempts and 429s.
func NewStripeClient(cfg Config, plans *reconcile.Plans, logger *slog.Logger, metrics *server.Metrics) (*stripe.Client, error) {
	c := stripe.Config{
		ProductPlans: plans != nil && plans.ReadsProductPlans(),
		APIKey:       cfg.StripeAPIKey, BaseURL: cfg.StripeAPIURL, UserRefKey: cfg.UserRefKey,
		RateLimit: cfg.StripeRateLimit, OperationRateLimit: cfg.StripeOperationRate, ReadAllocation: cfg.StripeReadAllocation,
		ConnectReadAllocation: cfg.StripeConnectReadAllocation,
		Logger:                logger, Entitlements: cfg.StripeEntitlements, Connect: cfg.StripeConnect,
	}
	if metrics != nil {
		c.OnAttempt = func(status string) { metrics.ObserveProviderRequest(stripe.Provider, status) }
		c.OnRateLimited = func(op, reason string) { metrics.ObserveRateLimited(stripe.Provider, op, reason) }
	}
	return stripe.NewClient(c)
}

// SweepHooks see a sweep's pages (progress output) and the events they
// answer (the freshness SLI); either may be nil.
type SweepHooks struct {
	OnPage     func(reconcile.SweepRun)
	OnAnswered func(provider string, answered []reconcile.Answered, at time.Time)
}

// NewSweeper is the Stripe sweeper: client's bulk listing, parallel parts
// of it at once (0 adapts).
func NewSweeper(st *store.Store, client *stripe.Client, plans *reconcile.Plans, logger *slog.Logger, parallel int,
	hooks SweepHooks) (*reconcile.Sweeper, error) {
	return reconcile.NewSweeper(reconcile.SweeperConfig{
		Store: st, Provider: client.Name(), Lister: client, Parallel: parallel, Plans: plans, Logger: logger,
		OnPage: hooks.OnPage, OnAnswered: hooks.OnAnswered,
	})
}
