package testenv

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	stripeapi "github.com/stripe/stripe-go/v82"

	stripemock "github.com/billsync/billsync/mocks/stripe"
	"github.com/billsync/billsync/providers/stripe"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/server"
)

// DriverAPIKey is the key the Stripe side's API client (the app or
// dashboard driving the fake) uses; billsync's client uses the fake's main
// key. So Faults{TargetKey: stripemock.DefaultAPIKey} breaks billsync's
// calls and leaves the driver's alone.
const DriverAPIKey = "sk_test_driver"

// Price is a price loaded into every fake Stripe an Env starts.
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

// StripeOptions configures the Stripe side of an Env.
type StripeOptions struct {
	// Fake configures the fake Stripe.
	Fake stripemock.Options
	// Client configures billsync's client; APIKey and BaseURL are the
	// fake's. Zero fields take the client's defaults, as serve runs it
	// (ForTest fills them with Fast instead). Its Logger defaults to the
	// Env's.
	Client stripe.Config
	// ThinEvents, when set, registers the intake as an event destination
	// for these thin event types (v1.customer.subscription.updated…)
	// instead of as a snapshot webhook endpoint.
	ThinEvents []string
	// Connect, when enabled, serves the fake's connected accounts as
	// serve's -stripe-connect does: the intake is also the fake's Connect
	// endpoint (/webhooks/stripe/connect, its own secret), and billsync's
	// client reads the accounts it serves on their behalf.
	Connect reconcile.ConnectPolicy
}

// StripeSide is the Stripe side of an Env.
type StripeSide struct {
	Fake   *stripemock.Server
	API    *stripeapi.Client // stripe-go on the fake, as the app or the dashboard
	Client *stripe.Client    // billsync's client on the fake (the Env's Client)
	Secret string            // the intake's signing secret; empty without an intake
	// ConnectSecret is the Connect endpoint's signing secret (with
	// StripeOptions.Connect enabled and an intake).
	ConnectSecret string
	Verifier      *stripe.Verifier // the intake's verifier for Secret (and ConnectSecret)

	opts    StripeOptions
	apiKey  string
	url     string
	apiHTTP *http.Client
}

func newStripeSide(opts StripeOptions, logger *slog.Logger) *StripeSide {
	opts.Fake.ExtraAPIKeys = append(opts.Fake.ExtraAPIKeys, DriverAPIKey)
	opts.Client.Logger = cmp.Or(opts.Client.Logger, logger)
	if !opts.Client.Connect.Enabled() {
		opts.Client.Connect = opts.Connect
	}
	s := &StripeSide{Fake: stripemock.New(opts.Fake), opts: opts, apiKey: cmp.Or(opts.Fake.APIKey, stripemock.DefaultAPIKey)}
	for _, p := range Prices() {
		s.Fake.AddPrice(p.ID, p.LookupKey, p.Amount)
	}
	return s
}

func (s *StripeSide) start(e *Env) (err error) {
	s.url = e.URL
	// stripe-go retries nothing here, so a test sees each answer as sent.
	s.apiHTTP = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}, Timeout: time.Minute}
	s.API = stripeapi.NewClient(DriverAPIKey, stripeapi.WithBackends(stripeapi.NewBackendsWithConfig(&stripeapi.BackendConfig{
		URL: stripeapi.String(s.url), HTTPClient: s.apiHTTP, MaxNetworkRetries: stripeapi.Int64(0),
		LeveledLogger: &stripeapi.LeveledLogger{Level: stripeapi.LevelNull},
	})))
	if s.Client, err = s.NewClient(s.opts.Client); err != nil {
		return err
	}
	e.Client = s.Client
	return nil
}

func (s *StripeSide) register(e *Env, endpoint string) (server.Verifier, error) {
	url := endpoint + "/webhooks/stripe"
	if len(s.opts.ThinEvents) > 0 {
		s.Secret = s.Fake.AddEventDestination(url, s.opts.ThinEvents...)
	} else {
		s.Secret = s.Fake.AddWebhookEndpoint(url)
	}
	var err error
	if s.Verifier, err = stripe.NewVerifier([]string{s.Secret}, 0); err != nil {
		return nil, err
	}
	if s.opts.Connect.Enabled() {
		s.ConnectSecret = s.Fake.AddConnectWebhookEndpoint(endpoint + "/webhooks/stripe/connect")
		s.Verifier.ServeConnect(stripe.Connect{Secrets: []string{s.ConnectSecret}, Policy: s.opts.Connect})
	}
	return s.Verifier, nil
}

func (s *StripeSide) close() {
	if s.apiHTTP != nil {
		s.apiHTTP.CloseIdleConnections()
	}
}

// NewClient returns billsync's Stripe client on the fake with cfg's
// settings (APIKey and BaseURL are the fake's).
func (s *StripeSide) NewClient(cfg stripe.Config) (*stripe.Client, error) {
	cfg.APIKey, cfg.BaseURL = s.apiKey, s.url
	return stripe.NewClient(cfg)
}

// FastStripe fills cfg's unset rate limit and retry waits with test
// speeds, as Fast does for an Env's clients.
func FastStripe(cfg stripe.Config) stripe.Config {
	fast(&cfg.RateLimit, &cfg.Burst, &cfg.RetryWaitMin, &cfg.RetryWaitMax)
	cfg.OperationRateLimit = cmp.Or(cfg.OperationRateLimit, cfg.RateLimit)
	return cfg
}

// Customer creates a customer at the fake through stripe-go, with the
// app's user reference in metadata[user_id] (none when userRef is empty).
func (s *StripeSide) Customer(ctx context.Context, userRef string) (string, error) {
	params := &stripeapi.CustomerCreateParams{}
	if userRef != "" {
		params.Metadata = map[string]string{"user_id": userRef}
	}
	c, err := s.API.V1Customers.Create(ctx, params)
	if err != nil {
		return "", fmt.Errorf("create customer: %w", err)
	}
	return c.ID, nil
}

// Subscribe subscribes customer to price at the fake through stripe-go.
func (s *StripeSide) Subscribe(ctx context.Context, customer, price string) (*stripeapi.Subscription, error) {
	sub, err := s.API.V1Subscriptions.Create(ctx, &stripeapi.SubscriptionCreateParams{
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
func (s *StripeSide) ChangePrice(ctx context.Context, sub *stripeapi.Subscription, price string) error {
	_, err := s.API.V1Subscriptions.Update(ctx, sub.ID, &stripeapi.SubscriptionUpdateParams{
		Items: []*stripeapi.SubscriptionUpdateItemParams{{ID: stripeapi.String(sub.Items.Data[0].ID), Price: stripeapi.String(price)}},
	})
	if err != nil {
		return fmt.Errorf("change %s to %s: %w", sub.ID, price, err)
	}
	return nil
}

// Cancel cancels sub at once at the fake through stripe-go.
func (s *StripeSide) Cancel(ctx context.Context, sub *stripeapi.Subscription) error {
	if _, err := s.API.V1Subscriptions.Cancel(ctx, sub.ID, nil); err != nil {
		return fmt.Errorf("cancel %s: %w", sub.ID, err)
	}
	return nil
}

// WaitSettled waits, for up to d, until every webhook delivery the fake
// owes has settled (accepted, given up after the last retry, or dropped)
// and returns the counts so far.
func (s *StripeSide) WaitSettled(ctx context.Context, d time.Duration) (stripemock.Settlement, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	if err := s.Fake.WaitIdle(ctx); err != nil {
		return s.Fake.Settled(), fmt.Errorf("wait for the fake Stripe's deliveries to settle: %w", err)
	}
	return s.Fake.Settled(), nil
}

// Feature creates a Stripe Entitlements feature with lookupKey at the fake
// through stripe-go and returns its id.
func (s *StripeSide) Feature(ctx context.Context, lookupKey string) (string, error) {
	f, err := s.API.V1EntitlementsFeatures.Create(ctx, &stripeapi.EntitlementsFeatureCreateParams{
		Name: stripeapi.String(lookupKey), LookupKey: stripeapi.String(lookupKey)})
	if err != nil {
		return "", fmt.Errorf("create feature %s: %w", lookupKey, err)
	}
	return f.ID, nil
}

// Grant attaches feature to the product of price (the fake's prices
// loaded by an Env are each their own product, prod_<price id>) and
// returns the attachment's id: every live subscriber of the product is
// then entitled to it.
func (s *StripeSide) Grant(ctx context.Context, price, feature string) (string, error) {
	pf, err := s.API.V1ProductFeatures.Create(ctx, &stripeapi.ProductFeatureCreateParams{
		Product: stripeapi.String("prod_" + price), EntitlementFeature: stripeapi.String(feature)})
	if err != nil {
		return "", fmt.Errorf("attach feature %s to the product of %s: %w", feature, price, err)
	}
	return pf.ID, nil
}

// Revoke detaches a product feature Grant attached.
func (s *StripeSide) Revoke(ctx context.Context, price, productFeature string) error {
	if _, err := s.API.V1ProductFeatures.Delete(ctx, productFeature, &stripeapi.ProductFeatureDeleteParams{
		Product: stripeapi.String("prod_" + price)}); err != nil {
		return fmt.Errorf("detach %s from the product of %s: %w", productFeature, price, err)
	}
	return nil
}
