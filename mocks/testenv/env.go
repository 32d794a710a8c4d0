// Package testenv wires billsync end to end around a fake provider, once,
// for every package's tests, the demo and the bench. An Env is, for Stripe
// or Kinde alike: the fake (mocks/stripe or mocks/kinde) on a loopback
// listener, billsync's intake (assembled by package app as serve assembles
// it, with the provider's real verifier for the fake's endpoint) storing
// into a given store, billsync's real client on the fake, and workers
// built on the store, the client and the example plans.
// The Stripe side adds a stripe-go client that drives the fake as an app
// would; the Kinde side sets agreements and sends Kinde's webhooks.
//
// It is a test double: it must never be pointed at a real provider or hold
// real keys, and it never opens or migrates a database itself (the caller
// owns the store). It does not import package testing, so the demo and the
// bench can use it; ForTest is the wrapper for tests, and the database's
// state is read through store/storetest.
package testenv

import (
	"cmp"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/billsync/billsync/app"
	"github.com/billsync/billsync/mocks/fault"
	"github.com/billsync/billsync/providers/kinde"
	"github.com/billsync/billsync/providers/stripe"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/server"
	"github.com/billsync/billsync/store"
)

// The providers an Env can fake, named as billsync names them.
const (
	Stripe = stripe.Provider
	Kinde  = kinde.Provider
)

// Providers are the providers an Env can fake, for tests that run once per
// provider.
var Providers = []string{Stripe, Kinde}

// Options configures an Env. The zero value gives a fake and billsync's
// client on it, with no intake.
type Options struct {
	// Store receives the intake's deliveries and is the workers' store.
	// When nil no intake is served and no webhook endpoint is registered.
	Store *store.Store
	// NoIntake keeps the Store for the workers but serves no intake: the
	// fake's webhooks reach nothing (for tests that need none).
	NoIntake bool
	// IntakeAddr is where the intake listens; default 127.0.0.1:0.
	IntakeAddr string
	// Network, when set, receives the fake's webhooks instead of the
	// intake, on a listener of its own: a network that holds deliveries
	// back, copies or reorders them before they reach IntakeURL.
	Network http.Handler
	// Wrap, when set, wraps the fake's handler (to record, count or break
	// the requests it gets); ConnState sees its connections.
	Wrap      func(http.Handler) http.Handler
	ConnState func(net.Conn, http.ConnState)
	// Logger is the intake's and billsync's client's; nil discards.
	Logger *slog.Logger

	// Stripe and Kinde configure the side of the provider the Env fakes;
	// the other is ignored.
	Stripe StripeOptions
	Kinde  KindeOptions
}

func (o Options) validate(provider string) error {
	var errs []error
	if provider != Stripe && provider != Kinde {
		errs = append(errs, fmt.Errorf("testenv: unknown provider %q (want %q or %q)", provider, Stripe, Kinde))
	}
	if o.Network != nil && (o.Store == nil || o.NoIntake) {
		errs = append(errs, errors.New("testenv: Network needs an intake (it stands in front of it): set Store, not NoIntake"))
	}
	return errors.Join(errs...)
}

// Env is a running fake provider with billsync wired to it.
type Env struct {
	Provider  string             // Stripe or Kinde
	URL       string             // the fake's base URL
	IntakeURL string             // billsync's intake; empty without one
	Store     *store.Store       // the Options' store; nil without one
	Plans     *reconcile.Plans   // the example plans (Plans())
	Client    reconcile.Provider // billsync's client on the fake
	Stripe    *StripeSide        // the Stripe side; nil when the Env fakes Kinde
	Kinde     *KindeSide         // the Kinde side; nil when the Env fakes Stripe

	fake    fakeServer
	side    side
	logger  *slog.Logger
	servers []*http.Server
}

// fakeServer is what an Env needs of either provider's fake.
type fakeServer interface {
	http.Handler
	WaitIdle(ctx context.Context) error
	Faults() fault.Faults
	SetFaults(fault.Faults)
	Close()
}

// side is one provider's part of an Env.
type side interface {
	// start builds billsync's client on the fake at e.URL.
	start(e *Env) error
	// register makes endpoint (a base URL) the fake's webhook target and
	// returns the intake's verifier for what the fake then signs.
	register(e *Env, endpoint string) (server.Verifier, error)
	close()
}

// New starts an Env faking provider (Stripe or Kinde); Close stops it.
func New(provider string, opts Options) (_ *Env, err error) {
	if err := opts.validate(provider); err != nil {
		return nil, err
	}
	e := &Env{Provider: provider, Plans: Plans(), logger: cmp.Or(opts.Logger, slog.New(slog.DiscardHandler))}
	defer func() {
		if err != nil {
			e.Close()
		}
	}()
	switch provider {
	case Stripe:
		e.Stripe = newStripeSide(opts.Stripe, e.logger)
		e.fake, e.side = e.Stripe.Fake, e.Stripe
	case Kinde:
		if e.Kinde, err = newKindeSide(opts.Kinde, e.logger); err != nil {
			return nil, err
		}
		e.fake, e.side = e.Kinde.Fake, e.Kinde
	}
	var handler http.Handler = e.fake
	if opts.Wrap != nil {
		handler = opts.Wrap(handler)
	}
	if e.URL, err = e.serve("127.0.0.1:0", handler, opts.ConnState); err != nil {
		return nil, err
	}
	if err := e.side.start(e); err != nil {
		return nil, err
	}
	e.Store = opts.Store
	if opts.Store != nil && !opts.NoIntake {
		if err := e.startIntake(opts); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// startIntake serves billsync's intake into opts.Store, assembled as
// serve assembles it (package app), and registers it (or the Network in front of it) at the fake.
func (e *Env) startIntake(opts Options) error {
	addr := cmp.Or(opts.IntakeAddr, "127.0.0.1:0")
	// The Stripe endpoint's secret exists only once its URL is registered,
	// and the intake needs the verifier: listen first, serve once it is
	// built.
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	e.IntakeURL = "http://" + ln.Addr().String()
	endpoint := e.IntakeURL
	if opts.Network != nil {
		if endpoint, err = e.serve("127.0.0.1:0", opts.Network, nil); err != nil {
			ln.Close()
			return err
		}
	}
	v, err := e.side.register(e, endpoint)
	if err != nil {
		ln.Close()
		return err
	}
	// serve's own assembly, intake only (as serve -workers 0): the fake's
	// endpoint's verifier instead of the secrets a deployment configures.
	intake, err := app.New(context.Background(), app.Config{},
		app.Parts{Store: opts.Store, Plans: e.Plans, Logger: e.logger, Verifiers: []server.Verifier{v}})
	if err != nil {
		ln.Close()
		return err
	}
	e.serveOn(ln, intake.Handler(), nil)
	return nil
}

// Worker returns a worker on the Env: cfg's unset Store, Plans and
// Providers are the Env's store, the example plans and billsync's client.
func (e *Env) Worker(cfg reconcile.WorkerConfig) (*reconcile.Worker, error) {
	if cfg.Store == nil && e.Store != nil {
		cfg.Store = e.Store
	}
	cfg.Plans = cmp.Or(cfg.Plans, e.Plans)
	if cfg.Providers == nil {
		cfg.Providers = []reconcile.Provider{e.Client}
	}
	return reconcile.NewWorker(cfg)
}

// Faults returns the fake's fault knobs.
func (e *Env) Faults() fault.Faults { return e.fake.Faults() }

// SetFaults replaces the fake's fault knobs.
func (e *Env) SetFaults(f fault.Faults) { e.fake.SetFaults(f) }

// WaitDelivered waits until the fake has sent every webhook it owes (each
// answered, given up or dropped), for up to a minute.
func (e *Env) WaitDelivered(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := e.fake.WaitIdle(ctx); err != nil {
		return fmt.Errorf("wait for the fake %s's webhooks: %w", e.Provider, err)
	}
	return nil
}

// Close stops the fake's deliveries, then every listener.
func (e *Env) Close() {
	if e.fake != nil {
		e.fake.Close()
	}
	for _, hs := range e.servers {
		_ = hs.Close() // teardown: nothing is waiting for an answer
	}
	if e.side != nil {
		e.side.close()
	}
}

// serve serves handler on a new listener at addr and returns its base URL.
func (e *Env) serve(addr string, handler http.Handler, connState func(net.Conn, http.ConnState)) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("listen on %s: %w", addr, err)
	}
	e.serveOn(ln, handler, connState)
	return "http://" + ln.Addr().String(), nil
}

func (e *Env) serveOn(ln net.Listener, handler http.Handler, connState func(net.Conn, http.ConnState)) {
	hs := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, ConnState: connState}
	e.servers = append(e.servers, hs)
	go func() { _ = hs.Serve(ln) }() // ends with Close
}

// fast fills a client's unset rate limit and retry waits with test speeds:
// 10,000 requests/s in bursts of 100, retries after 1-10 ms.
func fast(limit *float64, burst *int, waitMin, waitMax *time.Duration) {
	*limit = cmp.Or(*limit, 10000)
	*burst = cmp.Or(*burst, 100)
	*waitMin = cmp.Or(*waitMin, time.Millisecond)
	*waitMax = cmp.Or(*waitMax, 10*time.Millisecond)
}

// Fast fills the unset rate limits and retry waits of opts' clients (both
// sides) with test speeds; zero fields otherwise take the clients'
// defaults, as serve runs them.
func Fast(opts Options) Options {
	opts.Stripe.Client = FastStripe(opts.Stripe.Client)
	opts.Kinde.Client = FastKinde(opts.Kinde.Client)
	return opts
}

// Plans returns the example plans (reconcile.ExamplePlans), which the
// fakes' prices and plan codes are made for. They are parsed once; a
// *reconcile.Plans is only read, so every caller may share it.
var Plans = sync.OnceValue(func() *reconcile.Plans {
	plans, err := reconcile.ParsePlans(reconcile.ExamplePlans)
	if err != nil {
		panic(fmt.Sprintf("testenv: the example plans do not parse: %v", err)) // embedded, and parsed by the tests
	}
	return plans
})

// FeaturePlansYAML is the example plans with features declared: boolean
// export and sso, limit seats, metered ai_credits, and a seats_addon plan
// (price_seats_addon) that grants 20 seats beside another plan.
//
//go:embed plans.features.yaml
var FeaturePlansYAML []byte

// FeaturePlans returns FeaturePlansYAML parsed, shared like Plans.
var FeaturePlans = sync.OnceValue(func() *reconcile.Plans {
	plans, err := reconcile.ParsePlans(FeaturePlansYAML)
	if err != nil {
		panic(fmt.Sprintf("testenv: the feature plans do not parse: %v", err))
	}
	return plans
})

// AnswerStatus serves r with next and returns the status it answered (for
// Wrap functions that count or record the fake's answers).
func AnswerStatus(next http.Handler, w http.ResponseWriter, r *http.Request) int {
	sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
	next.ServeHTTP(sw, r)
	return sw.status
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}
