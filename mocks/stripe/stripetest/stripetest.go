// Package stripetest wires billsync end to end around the fake Stripe, once,
// for every package's tests, the demo and the bench: the fake (stripemock)
// on a loopback listener with the example prices, billsync's intake
// (server.New with a stripe.Verifier on the secret the fake signs with)
// storing into a given store, billsync's Stripe client on the fake, and a
// stripe-go client that drives the fake as an app would.
//
// It is a test double: it must never be pointed at the real Stripe or hold
// real keys, and it never opens or migrates a database itself (the caller
// owns the store). It does not import package testing, so the demo and the
// bench can use it; ForTest is the wrapper for tests.
package stripetest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	stripeapi "github.com/stripe/stripe-go/v82"

	stripemock "github.com/billsync/billsync/mocks/stripe"
	"github.com/billsync/billsync/providers/stripe"
	"github.com/billsync/billsync/server"
	"github.com/billsync/billsync/store"
)

// DriverAPIKey is the key the harness's API client (the app or dashboard
// driving the fake) uses; billsync's client uses the fake's main key. So
// Faults{TargetKey: stripemock.DefaultAPIKey} breaks billsync's calls and
// leaves the driver's alone.
const DriverAPIKey = "sk_test_driver"

// Price is a price loaded into every fake the harness starts.
type Price struct {
	ID, LookupKey string
	Amount        int64 // monthly, in cents
}

// Prices are the prices reconcile.ExamplePlans maps (each plan's price id
// and lookup key), and price_legacy, a retired price that maps to no plan.
func Prices() []Price {
	return []Price{
		{"price_free", "free", 0},
		{"price_pro", "pro", 2000},
		{"price_team", "team", 5000},
		{"price_legacy", "legacy_gold", 9900},
	}
}

// Options configures a Harness. The zero value gives a fake Stripe and
// both clients, with no intake.
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

	// Fake configures the fake Stripe.
	Fake stripemock.Options
	// Wrap, when set, wraps the fake's handler (to record or count the
	// requests it gets); ConnState sees its connections.
	Wrap      func(http.Handler) http.Handler
	ConnState func(net.Conn, http.ConnState)

	// Client configures billsync's client; APIKey and BaseURL are the
	// fake's. Zero fields take the client's defaults, as serve runs it
	// (ForTest fills them with Fast instead).
	Client stripe.Config
	// Logger is the intake's and billsync's client's; nil discards.
	Logger *slog.Logger
}

func (o Options) validate() error {
	if o.Network != nil && o.Store == nil {
		return errors.New("stripetest: Network needs a Store (it stands in front of the intake)")
	}
	return nil
}

// Harness is a running fake Stripe with billsync wired to it.
type Harness struct {
	Fake      *stripemock.Server
	URL       string            // the fake's base URL
	API       *stripeapi.Client // stripe-go on the fake, as the app or the dashboard
	Client    *stripe.Client    // billsync's client on the fake
	IntakeURL string            // billsync's intake; empty without a Store
	Secret    string            // the webhook endpoint's signing secret
	Verifier  *stripe.Verifier  // billsync's verifier for Secret

	apiKey    string
	clientCfg stripe.Config
	apiHTTP   *http.Client
	servers   []*http.Server
}

// New starts a Harness; Close stops it.
func New(opts Options) (_ *Harness, err error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	opts.Fake.ExtraAPIKeys = append(opts.Fake.ExtraAPIKeys, DriverAPIKey)
	h := &Harness{Fake: stripemock.New(opts.Fake), apiKey: cmp.Or(opts.Fake.APIKey, stripemock.DefaultAPIKey)}
	defer func() {
		if err != nil {
			h.Close()
		}
	}()
	for _, p := range Prices() {
		h.Fake.AddPrice(p.ID, p.LookupKey, p.Amount)
	}
	var handler http.Handler = h.Fake
	if opts.Wrap != nil {
		handler = opts.Wrap(handler)
	}
	if h.URL, err = h.serve("127.0.0.1:0", handler, opts.ConnState); err != nil {
		return nil, err
	}

	// stripe-go retries nothing here, so a test sees each answer as sent.
	h.apiHTTP = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}, Timeout: time.Minute}
	h.API = stripeapi.NewClient(DriverAPIKey, stripeapi.WithBackends(stripeapi.NewBackendsWithConfig(&stripeapi.BackendConfig{
		URL: stripeapi.String(h.URL), HTTPClient: h.apiHTTP, MaxNetworkRetries: stripeapi.Int64(0),
		LeveledLogger: &stripeapi.LeveledLogger{Level: stripeapi.LevelNull},
	})))
	h.clientCfg = opts.Client
	if h.clientCfg.Logger == nil {
		h.clientCfg.Logger = opts.Logger
	}
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
	addr := cmp.Or(opts.IntakeAddr, "127.0.0.1:0")
	// The endpoint's secret exists only once the URL is registered, and the
	// intake needs the secret: listen first, serve once it is known.
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	h.IntakeURL = "http://" + ln.Addr().String()
	endpoint := h.IntakeURL
	if opts.Network != nil {
		if endpoint, err = h.serve("127.0.0.1:0", opts.Network, nil); err != nil {
			ln.Close()
			return err
		}
	}
	h.Secret = h.Fake.AddWebhookEndpoint(endpoint + "/webhooks/stripe")
	if h.Verifier, err = stripe.NewVerifier([]string{h.Secret}, 0); err != nil {
		ln.Close()
		return err
	}
	h.Verifier.SetResolver(h.Client) // thin events' customers, as serve resolves them
	intake := server.New(server.Config{Logger: opts.Logger, Inbox: opts.Store, Verifiers: []server.Verifier{h.Verifier}, Ready: opts.Store.Ping})
	h.serveOn(ln, intake, nil)
	return nil
}

// NewClient returns billsync's Stripe client on the fake with cfg's
// settings (APIKey and BaseURL are the fake's).
func (h *Harness) NewClient(cfg stripe.Config) (*stripe.Client, error) {
	cfg.APIKey, cfg.BaseURL = h.apiKey, h.URL
	return stripe.NewClient(cfg)
}

// ClientConfig is the configuration Client was built with.
func (h *Harness) ClientConfig() stripe.Config {
	cfg := h.clientCfg
	cfg.APIKey, cfg.BaseURL = h.apiKey, h.URL
	return cfg
}

// Fast fills cfg's unset rate limit and retry waits with test speeds:
// 10,000 requests/s in bursts of 100, retries after 1-10 ms.
func Fast(cfg stripe.Config) stripe.Config {
	if cfg.RateLimit == 0 {
		cfg.RateLimit = 10000
	}
	if cfg.Burst == 0 {
		cfg.Burst = 100
	}
	if cfg.RetryWaitMin == 0 {
		cfg.RetryWaitMin = time.Millisecond
	}
	if cfg.RetryWaitMax == 0 {
		cfg.RetryWaitMax = 10 * time.Millisecond
	}
	return cfg
}

// Customer creates a customer at the fake through stripe-go, with the
// app's user reference in metadata[user_id] (none when userRef is empty).
func (h *Harness) Customer(ctx context.Context, userRef string) (string, error) {
	params := &stripeapi.CustomerCreateParams{}
	if userRef != "" {
		params.Metadata = map[string]string{"user_id": userRef}
	}
	c, err := h.API.V1Customers.Create(ctx, params)
	if err != nil {
		return "", fmt.Errorf("create customer: %w", err)
	}
	return c.ID, nil
}

// Subscribe subscribes customer to price at the fake through stripe-go.
func (h *Harness) Subscribe(ctx context.Context, customer, price string) (*stripeapi.Subscription, error) {
	sub, err := h.API.V1Subscriptions.Create(ctx, &stripeapi.SubscriptionCreateParams{
		Customer: stripeapi.String(customer),
		Items:    []*stripeapi.SubscriptionCreateItemParams{{Price: stripeapi.String(price)}},
	})
	if err != nil {
		return nil, fmt.Errorf("subscribe %s to %s: %w", customer, price, err)
	}
	return sub, nil
}

// ChangePrice moves sub's first item to price at the fake through
// stripe-go.
func (h *Harness) ChangePrice(ctx context.Context, sub *stripeapi.Subscription, price string) error {
	_, err := h.API.V1Subscriptions.Update(ctx, sub.ID, &stripeapi.SubscriptionUpdateParams{
		Items: []*stripeapi.SubscriptionUpdateItemParams{{ID: stripeapi.String(sub.Items.Data[0].ID), Price: stripeapi.String(price)}},
	})
	if err != nil {
		return fmt.Errorf("change %s to %s: %w", sub.ID, price, err)
	}
	return nil
}

// WaitDelivered waits until the fake has sent every webhook it owes, for
// up to a minute.
func (h *Harness) WaitDelivered(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := h.Fake.WaitIdle(ctx); err != nil {
		return fmt.Errorf("wait for the fake Stripe's webhooks: %w", err)
	}
	return nil
}

// WaitSettled waits, for up to d, until every webhook delivery the fake
// owes has settled (accepted, given up after the last retry, or dropped)
// and returns the counts so far.
func (h *Harness) WaitSettled(ctx context.Context, d time.Duration) (stripemock.Settlement, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	if err := h.Fake.WaitIdle(ctx); err != nil {
		return h.Fake.Settled(), fmt.Errorf("wait for the fake Stripe's deliveries to settle: %w", err)
	}
	return h.Fake.Settled(), nil
}

// Close stops the fake's deliveries, then every listener.
func (h *Harness) Close() {
	h.Fake.Close()
	for _, hs := range h.servers {
		_ = hs.Close() // teardown: nothing is waiting for an answer
	}
	if h.apiHTTP != nil {
		h.apiHTTP.CloseIdleConnections()
	}
}

// serve serves handler on a new listener at addr and returns its base URL.
func (h *Harness) serve(addr string, handler http.Handler, connState func(net.Conn, http.ConnState)) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("listen on %s: %w", addr, err)
	}
	h.serveOn(ln, handler, connState)
	return "http://" + ln.Addr().String(), nil
}

func (h *Harness) serveOn(ln net.Listener, handler http.Handler, connState func(net.Conn, http.ConnState)) {
	hs := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, ConnState: connState}
	h.servers = append(h.servers, hs)
	go func() { _ = hs.Serve(ln) }() // ends with Close
}

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
		t.Fatalf("stripetest: %v", err)
	}
	t.Cleanup(h.Close)
	return h
}
