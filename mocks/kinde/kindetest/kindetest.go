// Package kindetest wires billsync end to end around the fake Kinde, once,
// for every package's tests and the demo: the fake (kindemock) on a
// loopback listener, billsync's intake (server.New with a kinde.Verifier on
// the fake's key set) storing into a given store, and billsync's Kinde
// client on the fake's Management API with its M2M credentials.
//
// It is a test double: it must never be pointed at a real Kinde business
// or hold real credentials, and it never opens or migrates a database
// itself (the caller owns the store). It does not import package testing,
// so the demo can use it; ForTest is the wrapper for tests.
package kindetest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	kindemock "github.com/billsync/billsync/mocks/kinde"
	"github.com/billsync/billsync/providers/kinde"
	"github.com/billsync/billsync/server"
	"github.com/billsync/billsync/store"
)

// Plan codes the example plans file maps (reconcile.ExamplePlans).
const (
	FreePlan = "customer_free_plan"
	ProPlan  = "customer_pro_plan"
	TeamPlan = "customer_team_plan"
)

// Options configures a Harness. The zero value gives a fake Kinde and
// billsync's client, with no intake.
type Options struct {
	// Store receives the intake's deliveries. When nil no intake is served
	// and no webhook endpoint is registered.
	Store *store.Store
	// IntakeAddr is where the intake listens; default 127.0.0.1:0.
	IntakeAddr string
	// Network, when set, receives the fake's webhooks instead of the
	// intake, on a listener of its own: a network that holds deliveries
	// back, copies or reorders them before they reach IntakeURL.
	Network http.Handler
	// Fake configures the fake Kinde.
	Fake kindemock.Options
	// Wrap, when set, wraps the fake's handler (to count or break the
	// requests it gets).
	Wrap func(http.Handler) http.Handler
	// Client configures billsync's client; Domain and the credentials are
	// the fake's. Verifier configures the intake's verifier; Domain is the
	// fake's.
	Client   kinde.Config
	Verifier kinde.VerifierConfig
	Logger   *slog.Logger // the intake's and the client's; nil discards
}

func (o Options) validate() error {
	if o.Network != nil && o.Store == nil {
		return errors.New("kindetest: Network needs a Store (it stands in front of the intake)")
	}
	return nil
}

// Harness is a running fake Kinde with billsync wired to it.
type Harness struct {
	Fake      *kindemock.Server
	URL       string          // the fake's base URL: billsync's KINDE_DOMAIN
	Client    *kinde.Client   // billsync's client on the fake
	Verifier  *kinde.Verifier // the intake's verifier; nil without a Store
	IntakeURL string          // billsync's intake; empty without a Store

	clientCfg kinde.Config
	stop      context.CancelFunc // ends the verifier's key-set cache
	servers   []*http.Server
}

// New starts a Harness; Close stops it.
func New(opts Options) (_ *Harness, err error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	opts.Logger = cmp.Or(opts.Logger, slog.New(slog.DiscardHandler))
	fake, err := kindemock.New(opts.Fake)
	if err != nil {
		return nil, err
	}
	h := &Harness{Fake: fake}
	defer func() {
		if err != nil {
			h.Close()
		}
	}()
	var handler http.Handler = fake
	if opts.Wrap != nil {
		handler = opts.Wrap(handler)
	}
	if h.URL, err = h.serve("127.0.0.1:0", handler); err != nil {
		return nil, err
	}
	h.clientCfg = opts.Client
	h.clientCfg.Logger = cmp.Or(h.clientCfg.Logger, opts.Logger)
	if h.Client, err = h.NewClient(h.clientCfg); err != nil {
		return nil, err
	}
	if opts.Store != nil {
		if err := h.startIntake(opts); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// startIntake serves billsync's intake into opts.Store and registers it (or
// the Network in front of it) as the fake's webhook endpoint.
func (h *Harness) startIntake(opts Options) error {
	vcfg := opts.Verifier
	vcfg.Domain = h.URL
	vcfg.Logger = cmp.Or(vcfg.Logger, opts.Logger)
	ctx, stop := context.WithCancel(context.Background())
	h.stop = stop
	var err error
	if h.Verifier, err = kinde.NewVerifier(ctx, vcfg); err != nil {
		return err
	}
	addr := cmp.Or(opts.IntakeAddr, "127.0.0.1:0")
	intake := server.New(server.Config{Logger: opts.Logger, Inbox: opts.Store, Verifiers: []server.Verifier{h.Verifier}, Ready: opts.Store.Ping})
	if h.IntakeURL, err = h.serve(addr, intake); err != nil {
		return err
	}
	endpoint := h.IntakeURL
	if opts.Network != nil {
		if endpoint, err = h.serve("127.0.0.1:0", opts.Network); err != nil {
			return err
		}
	}
	h.Fake.AddWebhookEndpoint(endpoint + "/webhooks/kinde")
	return nil
}

// NewClient returns billsync's Kinde client on the fake with cfg's
// settings (Domain and the M2M credentials are the fake's).
func (h *Harness) NewClient(cfg kinde.Config) (*kinde.Client, error) {
	cfg.Domain, cfg.ClientID, cfg.ClientSecret = h.URL, kindemock.DefaultClientID, kindemock.DefaultClientSecret
	return kinde.NewClient(cfg)
}

// Fast fills cfg's unset rate limit and retry waits with test speeds:
// 10,000 requests/s in bursts of 100, retries after 1-10 ms.
func Fast(cfg kinde.Config) kinde.Config {
	cfg.RateLimit = cmp.Or(cfg.RateLimit, 10000)
	cfg.Burst = cmp.Or(cfg.Burst, 100)
	cfg.RetryWaitMin = cmp.Or(cfg.RetryWaitMin, time.Millisecond)
	cfg.RetryWaitMax = cmp.Or(cfg.RetryWaitMax, 10*time.Millisecond)
	return cfg
}

// SetPlan makes plan (a Kinde plan code) the customer's one open-ended
// agreement at the fake; an empty plan leaves the customer with none.
func (h *Harness) SetPlan(customer, plan string) {
	if plan == "" {
		h.Fake.SetAgreements(customer, nil)
		return
	}
	h.Fake.SetAgreements(customer, []kindemock.Agreement{{PlanCode: plan}})
}

// Send sends a webhook of type typ about customer, as Kinde would.
func (h *Harness) Send(typ, customer string) (kindemock.Sent, error) {
	sent, err := h.Fake.SendEvent(kindemock.Event{Type: typ, CustomerID: customer})
	if err != nil {
		return sent, fmt.Errorf("send %s for %s: %w", typ, customer, err)
	}
	return sent, nil
}

// WaitDelivered waits until the fake has sent every webhook it owes (each
// answered, given up or dropped), for up to a minute.
func (h *Harness) WaitDelivered(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := h.Fake.WaitIdle(ctx); err != nil {
		return fmt.Errorf("wait for the fake Kinde's webhooks: %w", err)
	}
	return nil
}

// Close stops the fake's deliveries, then every listener.
func (h *Harness) Close() {
	if h.Fake != nil {
		h.Fake.Close()
	}
	for _, hs := range h.servers {
		_ = hs.Close() // teardown: nothing is waiting for an answer
	}
	if h.stop != nil {
		h.stop()
	}
}

// serve serves handler on a new listener at addr and returns its base URL.
func (h *Harness) serve(addr string, handler http.Handler) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("listen on %s: %w", addr, err)
	}
	hs := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	h.servers = append(h.servers, hs)
	go func() { _ = hs.Serve(ln) }() // ends with Close
	return "http://" + ln.Addr().String(), nil
}

// TB is the part of testing.TB that ForTest uses (so this package does not
// import testing).
type TB interface {
	Helper()
	Cleanup(func())
	Fatalf(format string, args ...any)
}

// ForTest is New for tests: billsync's client gets Fast settings, a
// failure to start fails t, and the harness is closed at t's cleanup.
func ForTest(t TB, opts Options) *Harness {
	t.Helper()
	opts.Client = Fast(opts.Client)
	h, err := New(opts)
	if err != nil {
		t.Fatalf("kindetest: %v", err)
	}
	t.Cleanup(h.Close)
	return h
}
