//go:build !release

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	kindemock "github.com/billsync/billsync/mocks/kinde"
	stripemock "github.com/billsync/billsync/mocks/stripe"
	"github.com/billsync/billsync/mocks/testenv"
)

// mockPrices is the repeatable -price id:lookup_key:amount flag; it adds
// to or overrides testenv.Prices, which are always loaded.
type mockPrices []testenv.Price

func (p *mockPrices) String() string {
	parts := make([]string, 0, len(*p))
	for _, mp := range *p {
		parts = append(parts, fmt.Sprintf("%s:%s:%d", mp.ID, mp.LookupKey, mp.Amount))
	}
	return strings.Join(parts, ",")
}

func (p *mockPrices) Set(v string) error {
	fields := strings.Split(v, ":")
	if len(fields) != 3 || fields[0] == "" {
		return errors.New("want id:lookup_key:amount, e.g. price_pro:pro:2000")
	}
	amount, err := strconv.ParseInt(fields[2], 10, 64)
	if err != nil || amount < 0 {
		return fmt.Errorf("amount %q: want a non-negative integer in cents", fields[2])
	}
	*p = append(*p, testenv.Price{ID: fields[0], LookupKey: fields[1], Amount: amount})
	return nil
}

// runMock serves the fake providers until ctx is done.
func runMock(ctx context.Context, args []string, stdout io.Writer, logger *slog.Logger) error {
	fs := flag.NewFlagSet("mock", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), `usage: billsync mock [flags]

Runs a stateful fake Stripe that speaks the real REST API (form-encoded
requests, Stripe-Version honoured) and sends signed webhooks, with fault
knobs. It enforces Stripe's documented rate limits on -api-key (25
requests/s for each operation, inside 25/s in all for a sandbox key or
100/s for a live one; a 429 says why in Stripe-Rate-Limited-Reason), and
counts every request by operation. -driver-key is a second key, left
alone by the limits and the fault flags: seed test data through it.
Control endpoints (no key): /_mock/faults, /_mock/limits, /_mock/usage
(requests, reads and 429s by operation; ?key=… for one key's),
/_mock/usage/reset, /_mock/clock/advance, /_mock/deliveries,
/_mock/reset, /_mock/customers/{id}/card, /_mock/dunning,
/_mock/event_destinations, /_mock/events/list_lag (events appear in GET
/v1/events N s after creation), and /_mock/webhook_endpoints/{id}/disable
(Stripe disables an endpoint) (see mocks/stripe/control.go). GET
/v1/events lists the last 30 days; /v1/webhook_endpoints creates, lists,
retrieves and updates endpoints.

Stripe Connect: POST /_mock/accounts (or /v1/accounts) connects an
account; a Stripe-Account: acct_… header then acts in it (its own
customers, prices, subscriptions and events). Its events go to the
Connect endpoint (-connect-webhook, signed with
STRIPE_CONNECT_WEBHOOK_SECRET), the platform's to -webhook.
/_mock/accounts/{id}/deauthorize, /authorize, /livemode, /customers and
/faults drive one account; /_mock/usage?account=acct_… counts its
requests.

Next to it, a fake Kinde (-kinde-addr): its webhook key set at
/.well-known/jwks, M2M tokens at /oauth2/token, the billing agreements
endpoint, and control endpoints PUT /_mock/customers/{id}/agreements,
POST /_mock/webhooks, POST /_mock/events, /_mock/faults,
POST /_mock/keys/rotate, GET /_mock/deliveries (see mocks/kinde). The same
fault flags apply to both.`)
		fs.PrintDefaults()
	}
	addr := fs.String("addr", "127.0.0.1:12112", "listen address")
	apiKey := fs.String("api-key", stripemock.DefaultAPIKey, "secret key clients must send (Authorization: Bearer …)")
	driverKey := fs.String("driver-key", testenv.DriverAPIKey, `a second accepted key, left alone by -stripe-limits and the fault flags, for seeding data ("": none)`)
	stripeLimits := fs.Bool("stripe-limits", true, "enforce Stripe's documented rate limits on -api-key (25/s per operation; 25/s in all for sk_test_ keys, 100/s for sk_live_); false: none")
	webhookURL := fs.String("webhook", "", "webhook endpoint URL to register at start; its secret is printed as STRIPE_WEBHOOK_SECRET")
	connectURL := fs.String("connect-webhook", "", "Connect webhook endpoint URL to register at start (connected accounts' events); its secret is printed as STRIPE_CONNECT_WEBHOOK_SECRET (default: -webhook's URL + /connect)")
	kindeAddr := fs.String("kinde-addr", "127.0.0.1:12113", `the fake Kinde's listen address ("off": none)`)
	kindeWebhook := fs.String("kinde-webhook", "", "Kinde webhook URL to register at start (e.g. http://127.0.0.1:8080/webhooks/kinde)")
	var prices mockPrices
	fs.Var(&prices, "price", "extra price `id:lookup_key:amount` (repeatable; price_free, price_pro, price_team and price_legacy are always loaded)")
	var f stripemock.Faults
	fs.IntVar(&f.DuplicateCopies, "duplicates", 0, "send each webhook 1+N times")
	fs.DurationVar(&f.ReorderDelay, "reorder", 0, "delay each webhook copy by a random [0, d] so deliveries reorder")
	fs.Float64Var(&f.DropRate, "drop", 0, "probability (0-1) a webhook is never sent")
	fs.Float64Var(&f.Error5xxRate, "error-rate", 0, "probability (0-1) an API request answers 500")
	fs.Float64Var(&f.RateLimitRate, "ratelimit-rate", 0, "probability (0-1) an API request answers 429")
	fs.DurationVar(&f.RetryAfter, "retry-after", 0, "Retry-After of 429 answers (0 = none, as Stripe)")
	fs.DurationVar(&f.Latency, "latency", 0, "delay added to every API response")
	fs.Float64Var(&f.RequestsPerSecond, "rps", 0, "API rate limit in requests per second; over it → 429 (0 = none)")
	fs.Int64Var(&f.Seed, "seed", 0, "seed for the fault dice (0 = random)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("mock: unexpected arguments %q", fs.Args())
	}
	if err := f.Validate(); err != nil {
		return fmt.Errorf("mock: %w", err)
	}
	var limits stripemock.Limits
	if *stripeLimits {
		limits = stripemock.DocumentedLimits()
		limits.TargetKey = *apiKey
	}
	var extraKeys []string
	if *driverKey != "" {
		if *driverKey == *apiKey {
			return errors.New("mock: -driver-key must differ from -api-key")
		}
		extraKeys = []string{*driverKey}
		f.TargetKey = *apiKey // the flags' faults hit the client under test, not the driver
	}

	fake := stripemock.New(stripemock.Options{APIKey: *apiKey, ExtraAPIKeys: extraKeys, Faults: f, Limits: limits,
		Logger: logger.With("component", "stripemock")})
	defer fake.Close()
	for _, p := range slices.Concat(testenv.Prices(), prices) {
		fake.AddPrice(p.ID, p.LookupKey, p.Amount)
	}

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", *addr, err)
	}
	base := "http://" + ln.Addr().String()
	fmt.Fprintf(stdout, "# fake Stripe listening on %s (control endpoints under %s/_mock/)\n", base, base)
	fmt.Fprintf(stdout, "STRIPE_API_URL=%s\nSTRIPE_API_KEY=%s\n", base, *apiKey)
	if *driverKey != "" {
		fmt.Fprintf(stdout, "# seed data with the driver key (not limited, not faulted):\nSTRIPE_DRIVER_KEY=%s\n", *driverKey)
	}
	if *webhookURL != "" {
		fmt.Fprintf(stdout, "STRIPE_WEBHOOK_SECRET=%s\n", fake.AddWebhookEndpoint(*webhookURL))
	}
	if *connectURL == "" && *webhookURL != "" {
		*connectURL = strings.TrimSuffix(*webhookURL, "/") + "/connect"
	}
	if *connectURL != "" {
		fmt.Fprintf(stdout, "# the Connect endpoint %s is sent the connected accounts' events\n", *connectURL)
		fmt.Fprintf(stdout, "STRIPE_CONNECT_WEBHOOK_SECRET=%s\n", fake.AddConnectWebhookEndpoint(*connectURL))
	}
	fmt.Fprintf(stdout, `# try:
#   curl -u %[2]s: %[1]s/v1/customers -d email=ada@example.com -d "metadata[user_id]=u1"
#   curl -u %[2]s: %[1]s/v1/subscriptions -d customer=cus_… -d "items[0][price]=price_pro"
#   curl -u %[2]s: %[1]s/v1/webhook_endpoints -d url=http://127.0.0.1:8080/webhooks/stripe
#   curl %[1]s/_mock/faults -d '{"duplicate_copies":2,"reorder_delay":"2s"}'
#   curl %[1]s/_mock/clock/advance -d '{"seconds":2678400}'
#   curl %[1]s/_mock/usage
#   curl %[1]s/_mock/limits -d '{"documented":true,"operations":{"GET /v1/events":5},"target_key":"%[2]s"}'
#   curl %[1]s/_mock/accounts -d '{"id":"acct_demo","platform_prices":true}'
#   curl -u %[2]s: -H "Stripe-Account: acct_demo" %[1]s/v1/customers -d email=ada@example.com
`, base, *apiKey)
	logger.Info("fake stripe started", "addr", base, "faults", f, "limits", limits)
	servers := []*http.Server{{Handler: fake, ReadHeaderTimeout: 10 * time.Second}}
	listeners := []net.Listener{ln}

	if *kindeAddr != "off" {
		kfake, err := kindemock.New(kindemock.Options{Faults: f, Logger: logger.With("component", "kindemock")})
		if err != nil {
			return err
		}
		defer kfake.Close()
		kln, err := net.Listen("tcp", *kindeAddr)
		if err != nil {
			return fmt.Errorf("listen on %s: %w", *kindeAddr, err)
		}
		kbase := "http://" + kln.Addr().String()
		if *kindeWebhook != "" {
			kfake.AddWebhookEndpoint(*kindeWebhook)
		}
		fmt.Fprintf(stdout, "# fake Kinde listening on %s (control endpoints under %s/_mock/)\n", kbase, kbase)
		fmt.Fprintf(stdout, "KINDE_DOMAIN=%s\nKINDE_CLIENT_ID=%s\nKINDE_CLIENT_SECRET=%s\n", kbase, kindemock.DefaultClientID, kindemock.DefaultClientSecret)
		fmt.Fprintf(stdout, `# try:
#   curl -X PUT %[1]s/_mock/customers/customer_1/agreements -d '{"agreements":[{"plan_code":"customer_pro_plan"}]}'
#   curl %[1]s/_mock/webhooks -d '{"url":"http://127.0.0.1:8080/webhooks/kinde"}'
#   curl %[1]s/_mock/events -d '{"type":"customer.plan_changed","customer_id":"customer_1"}'
`, kbase)
		logger.Info("fake kinde started", "addr", kbase)
		servers = append(servers, &http.Server{Handler: kfake, ReadHeaderTimeout: 10 * time.Second})
		listeners = append(listeners, kln)
	}

	served := make(chan error, len(servers))
	for i, srv := range servers {
		go func() { served <- srv.Serve(listeners[i]) }()
	}
	select {
	case err := <-served:
		return fmt.Errorf("serve fake providers: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, srv := range servers {
		if err := srv.Shutdown(shutdownCtx); err != nil {
			return fmt.Errorf("shut down fake providers: %w", err)
		}
	}
	logger.Info("fake providers stopped")
	return nil
}
