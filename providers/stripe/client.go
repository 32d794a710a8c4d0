package stripe

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	retryablehttp "github.com/hashicorp/go-retryablehttp"
	stripeapi "github.com/stripe/stripe-go/v82"
	"golang.org/x/time/rate"

	"github.com/billsync/billsync/providers/internal/attempt"
	"github.com/billsync/billsync/reconcile"
)

// APIVersion is the Stripe API version of every request: stripe-go v82.5.1
// sends its pinned version (2025-08-27.basil) as Stripe-Version, so responses
// never take the account's default version. The readers still accept older
// shapes, for stored payloads and for proxies that rewrite the header.
const APIVersion = stripeapi.APIVersion

// Config configures a Client. Zero values take the defaults.
type Config struct {
	APIKey  string // secret or restricted key; required, never logged
	BaseURL string // empty = https://api.stripe.com

	// UserRefKey is the customer metadata key that holds the app's own user
	// reference; default "user_id".
	UserRefKey string

	// RateLimit is requests per second shared by every call of this client,
	// retries included; default 25 (Stripe's test-mode limit). Burst is the
	// limiter's bucket size; default 1 (evenly spaced requests).
	RateLimit float64
	Burst     int
	// ListRateLimit is requests per second the sweep's listing (ListPage,
	// Split) may take of RateLimit; default half of it, so
	// webhook-triggered fetches keep the rest.
	ListRateLimit float64
	// EndpointRateLimit is requests per second each endpoint family
	// (/v1/customers…, /v1/subscriptions…, /v1/prices…, /v1/invoices…)
	// may take, within RateLimit: Stripe also limits some endpoints on
	// their own, so a reconcile that reads two families spends from two
	// budgets. 0 (the default) = only the shared RateLimit applies.
	EndpointRateLimit float64

	// Timeout bounds each HTTP attempt (connect, headers, body), not the time
	// spent waiting for the rate limiter or between retries; default 10s.
	// The caller's ctx bounds the whole call.
	Timeout time.Duration

	// RetryMax is how many times a failed attempt (network error, timeout,
	// 429, 5xx) is retried; default 4, negative = no retries. Waits grow
	// from RetryWaitMin to RetryWaitMax (defaults 200ms, 5s); a 429 or 503
	// with Retry-After waits exactly that long instead.
	RetryMax                   int
	RetryWaitMin, RetryWaitMax time.Duration

	// OnAttempt, when set, sees every HTTP attempt's outcome, retries
	// included: the status code ("200", "429", …) or "error" when no answer
	// came (metrics: provider API calls by status).
	OnAttempt func(status string)

	Logger *slog.Logger // default discards
}

func (cfg Config) withDefaults() Config {
	cfg.UserRefKey = cmp.Or(cfg.UserRefKey, "user_id")
	cfg.RateLimit = cmp.Or(cfg.RateLimit, 25)
	cfg.Burst = cmp.Or(cfg.Burst, 1)
	cfg.ListRateLimit = cmp.Or(cfg.ListRateLimit, cfg.RateLimit/2)
	cfg.Timeout = cmp.Or(cfg.Timeout, 10*time.Second)
	switch {
	case cfg.RetryMax == 0:
		cfg.RetryMax = 4
	case cfg.RetryMax < 0:
		cfg.RetryMax = 0
	}
	cfg.RetryWaitMin = cmp.Or(cfg.RetryWaitMin, 200*time.Millisecond)
	cfg.RetryWaitMax = cmp.Or(cfg.RetryWaitMax, 5*time.Second)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return cfg
}

func (cfg Config) validate() error {
	var errs []error
	if strings.TrimSpace(cfg.APIKey) == "" {
		errs = append(errs, errors.New("API key is required"))
	}
	if cfg.BaseURL != "" {
		if u, err := url.Parse(cfg.BaseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("base URL %q is not an http(s) URL", cfg.BaseURL))
		}
	}
	if cfg.RateLimit < 0 || cfg.Burst < 0 || cfg.ListRateLimit < 0 || cfg.EndpointRateLimit < 0 {
		errs = append(errs, errors.New("rate limit and burst must not be negative"))
	}
	if cfg.Timeout < 0 || cfg.RetryWaitMin < 0 || cfg.RetryWaitMax < cfg.RetryWaitMin {
		errs = append(errs, errors.New("timeout and retry waits must not be negative, and the maximum wait must not be below the minimum"))
	}
	return errors.Join(errs...)
}

// Client reads customers' current state from the Stripe API through
// stripe-go. It implements reconcile.Provider, reconcile.Lister,
// reconcile.Splitter and Resolver (thin events' customers) and is safe for
// concurrent use.
//
// The layers of one call, outermost first:
//
//	ctx (caller's deadline for the whole Fetch/ListPage)
//	stripe-go (MaxNetworkRetries 0: it never retries by itself)
//	go-retryablehttp (RetryMax retries of network errors, timeouts, 429 and
//	  5xx, backoff honouring Retry-After, Stripe-Should-Retry obeyed)
//	attempt.Transport (per attempt: wait for the listing's limiter when it
//	  calls, the endpoint family's limiter when configured, and the shared
//	  rate limiter; then run the attempt under its own Timeout)
//	http.Transport
type Client struct {
	api         *stripeapi.Client
	http        *http.Client // the same retrying, limited client, for the list's pages read as raw JSON
	baseURL     string
	apiKey      string // never logged
	userRefKey  string
	log         *slog.Logger
	listLimiter *rate.Limiter
}

var (
	_ reconcile.Provider = (*Client)(nil)
	_ reconcile.Lister   = (*Client)(nil)
	_ reconcile.Splitter = (*Client)(nil)
	_ Resolver           = (*Client)(nil)
)

// NewClient validates cfg and returns a Client.
func NewClient(cfg Config) (*Client, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("stripe client config: %w", err)
	}
	base := http.DefaultTransport.(*http.Transport).Clone()
	rc := retryablehttp.NewClient()
	shared := rate.NewLimiter(rate.Limit(cfg.RateLimit), cfg.Burst)
	endpoints := newEndpointLimiters(cfg.EndpointRateLimit, cfg.Burst)
	rc.HTTPClient = &http.Client{Transport: &attempt.Transport{
		Base: base,
		// the listing's own limiter (a sweep's share), the endpoint family's,
		// then the client's shared one.
		Limits: func(req *http.Request) []attempt.Limit {
			return []attempt.Limit{
				{Name: "stripe list", Limiter: listLimiter(req.Context())},
				{Name: "stripe endpoint family", Limiter: endpoints.of(req.URL.Path)},
				{Name: "stripe", Limiter: shared},
			}
		},
		Timeout:   cfg.Timeout,
		OnAttempt: cfg.OnAttempt,
	}}
	rc.RetryMax, rc.RetryWaitMin, rc.RetryWaitMax = cfg.RetryMax, cfg.RetryWaitMin, cfg.RetryWaitMax
	// DefaultBackoff waits exactly Retry-After (seconds or HTTP date) on 429
	// and 503, else doubles from RetryWaitMin up to RetryWaitMax. ctx bounds
	// a long Retry-After.
	rc.Backoff = retryablehttp.DefaultBackoff
	rc.CheckRetry = checkRetry
	rc.ErrorHandler = lastResponse
	rc.Logger = debugLogger{cfg.Logger}

	bc := &stripeapi.BackendConfig{
		HTTPClient:        rc.StandardClient(),
		MaxNetworkRetries: stripeapi.Int64(0), // retries happen in retryablehttp only, so attempts don't multiply
		LeveledLogger:     &stripeapi.LeveledLogger{Level: stripeapi.LevelNull},
	}
	if cfg.BaseURL != "" {
		bc.URL = stripeapi.String(strings.TrimRight(cfg.BaseURL, "/"))
	}
	return &Client{
		api:         stripeapi.NewClient(cfg.APIKey, stripeapi.WithBackends(stripeapi.NewBackendsWithConfig(bc))),
		http:        bc.HTTPClient,
		baseURL:     cmp.Or(strings.TrimRight(cfg.BaseURL, "/"), stripeapi.APIURL),
		apiKey:      cfg.APIKey,
		userRefKey:  cfg.UserRefKey,
		log:         cfg.Logger.With("provider", Provider),
		listLimiter: rate.NewLimiter(rate.Limit(cfg.ListRateLimit), 1),
	}, nil
}

// Name returns "stripe".
func (c *Client) Name() string { return Provider }

// Fetch returns the customer's snapshot now, in one request where it can:
// the customer retrieved with its subscriptions expanded
// (GET /v1/customers/{id}?expand[]=subscriptions). Stripe embeds the
// customer's current subscriptions (every status but canceled), newest
// first, up to 10; only when it says has_more are they read from the
// subscription list instead (see resolve). A customer with no current
// subscription costs that one request and has empty Subscriptions.
//
// A deleted customer (Stripe answers {"deleted": true} and has canceled its
// subscriptions) is a snapshot with Deleted set; a customer Stripe never
// knew (404 resource_missing) is reconcile.ErrCustomerUnknown. Unreadable
// data and 400 answers are *reconcile.PermanentError. Everything else
// (network, timeouts, 429, 5xx, and also 401/403: a bad or revoked key is an
// outage to alert on, not a reason to ignore events) is transient.
func (c *Client) Fetch(ctx context.Context, customerID string) (reconcile.Snapshot, error) {
	if customerID == "" {
		return reconcile.Snapshot{}, reconcile.Permanent("stripe: empty customer id")
	}
	params := &stripeapi.CustomerRetrieveParams{}
	params.AddExpand("subscriptions")
	cust, err := c.api.V1Customers.Retrieve(ctx, customerID, params)
	if err != nil {
		return reconcile.Snapshot{}, failCustomer("retrieve customer "+customerID, err)
	}
	if cust.LastResponse == nil || len(cust.LastResponse.RawJSON) == 0 {
		return reconcile.Snapshot{}, fmt.Errorf("stripe retrieve customer %s: stripe-go returned no raw JSON", customerID)
	}
	read, err := customerOfJSON(cust.LastResponse.RawJSON, c.userRefKey)
	if err != nil {
		return reconcile.Snapshot{}, err
	}
	snap, err := c.resolve(ctx, read)
	if err != nil {
		return reconcile.Snapshot{}, err
	}
	c.log.DebugContext(ctx, "stripe snapshot fetched", "customer", customerID,
		"deleted", snap.Deleted, "subscriptions", len(snap.Subscriptions))
	return snap, nil
}

// resolve turns one customer object (retrieved, or listed by ListPage) into
// its snapshot: the one rule Fetch and ListPage share, so both give the same
// snapshot of a customer. The embedded subscriptions are used when they are
// all of them; otherwise (has_more, or not expanded) the customer's
// subscriptions are listed: GET /v1/subscriptions?customer=…, whose default
// status filter is the same "all but canceled" as the embedded list, 100 a
// page.
func (c *Client) resolve(ctx context.Context, cust customerJSON) (reconcile.Snapshot, error) {
	var err error
	snap := reconcile.Snapshot{Provider: Provider, CustomerID: cust.id}
	if cust.deleted {
		snap.Deleted = true
		return snap, nil
	}
	snap.UserRef, snap.Email = cust.userRef, cust.email
	subs := cust.subs
	if !cust.complete {
		if subs, err = c.listSubscriptions(ctx, cust.id); err != nil {
			return reconcile.Snapshot{}, err
		}
	}
	// A subscription's embedded items are a list too: when it says
	// has_more, the rest are listed, so no item (the one that decides the
	// plan, say) is silently missing. Rare: one request per such
	// subscription.
	var items map[string][]object
	for _, sub := range subs {
		if !sub.Items.HasMore.v || !sub.ID.ok {
			continue // without an id, subscriptionsWithItems reports it
		}
		if items == nil {
			items = map[string][]object{}
		}
		if items[sub.ID.s], err = c.listItems(ctx, sub.ID.s); err != nil {
			return reconcile.Snapshot{}, err
		}
	}
	if snap.Subscriptions, err = subscriptionsWithItems(subs, items); err != nil {
		return reconcile.Snapshot{}, fmt.Errorf("stripe customer %s: %w", cust.id, err)
	}
	return snap, nil
}

// listItems reads every item of a subscription
// (GET /v1/subscription_items?subscription=…, 100 a page).
func (c *Client) listItems(ctx context.Context, subscriptionID string) ([]object, error) {
	params := &stripeapi.SubscriptionItemListParams{Subscription: stripeapi.String(subscriptionID)}
	params.Limit = stripeapi.Int64(listPageSize)
	items := []object{}
	for it, err := range c.api.V1SubscriptionItems.List(ctx, params) {
		if err != nil {
			return nil, fail("list items of subscription "+subscriptionID, err)
		}
		if it.LastResponse == nil || len(it.LastResponse.RawJSON) == 0 {
			return nil, fmt.Errorf("stripe list items of subscription %s: stripe-go returned an item without its raw JSON", subscriptionID)
		}
		items = append(items, objectOf(it.LastResponse.RawJSON))
	}
	return items, nil
}

// listSubscriptions reads every current subscription of a customer.
func (c *Client) listSubscriptions(ctx context.Context, customerID string) ([]object, error) {
	params := &stripeapi.SubscriptionListParams{Customer: stripeapi.String(customerID)}
	params.Limit = stripeapi.Int64(listPageSize)
	var subs []object
	for sub, err := range c.api.V1Subscriptions.List(ctx, params) {
		if err != nil {
			return nil, failCustomer("list subscriptions of customer "+customerID, err)
		}
		raw, err := rawOf(sub)
		if err != nil {
			return nil, fmt.Errorf("stripe list subscriptions of customer %s: %w", customerID, err)
		}
		subs = append(subs, objectOf(raw))
	}
	return subs, nil
}

// customerPage requests a page of the customer list (GET /v1/customers
// with the query q) and returns its raw JSON. It goes through the client's own HTTP
// stack (limits, retries, attempt deadline) but not through stripe-go's
// typed decode, which cost about a third of a sweep's CPU for structs
// billsync never reads. A refusal is decoded into Stripe's error, so it is
// classified like any other call's.
func (c *Client) customerPage(ctx context.Context, op string, q url.Values) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.baseURL+"/v1/customers?"+q.Encode(), nil)
	if err != nil {
		return nil, fmt.Errorf("stripe %s: %w", op, err)
	}
	req.Header.Set("Authorization", "Bearer "+c.apiKey)
	req.Header.Set("Stripe-Version", APIVersion)
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("stripe %s: %w", op, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return nil, fmt.Errorf("stripe %s: read the page: %w", op, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error *stripeapi.Error `json:"error"`
		}
		if json.Unmarshal(body, &e) != nil || e.Error == nil {
			e.Error = &stripeapi.Error{Msg: http.StatusText(resp.StatusCode)}
		}
		e.Error.HTTPStatusCode, e.Error.RequestID = resp.StatusCode, resp.Header.Get("Request-Id")
		return nil, fail(op, e.Error)
	}
	return body, nil
}

// listPageSize is Stripe's largest page.
const listPageSize = 100

// rawOf returns the subscription's own JSON. stripe-go v82.5.1 sets it on
// Retrieve results and on every item of a list page.
func rawOf(sub *stripeapi.Subscription) ([]byte, error) {
	if sub == nil || sub.LastResponse == nil || len(sub.LastResponse.RawJSON) == 0 {
		return nil, errors.New("stripe-go returned a subscription without its raw JSON")
	}
	return sub.LastResponse.RawJSON, nil
}

// failCustomer is fail for a call about one customer: Stripe's
// resource_missing (404 on /v1/customers/{id}, 400 for a customer= parameter)
// means the customer is unknown.
func failCustomer(op string, err error) error {
	var se *stripeapi.Error
	if errors.As(err, &se) && se.Code == stripeapi.ErrorCodeResourceMissing {
		return fmt.Errorf("stripe %s: %s: %w", op, describe(se), reconcile.ErrCustomerUnknown)
	}
	return fail(op, err)
}

// fail converts an error from stripe-go into billsync's classes; no stripe-go
// type leaves the package. A 400 is a request Stripe will never accept, so it
// is permanent; everything else is transient.
func fail(op string, err error) error {
	var se *stripeapi.Error
	switch {
	case !errors.As(err, &se):
		return fmt.Errorf("stripe %s: %w", op, err)
	case se.HTTPStatusCode == http.StatusBadRequest:
		return reconcile.Permanent("stripe %s: %s", op, describe(se))
	}
	return fmt.Errorf("stripe %s: %s", op, describe(se))
}

// describe renders a Stripe error without its stripe-go type:
// "429 invalid_request_error rate_limit: Request rate limit exceeded. (request req_…)".
func describe(se *stripeapi.Error) string {
	desc := fmt.Sprintf("%d %s", se.HTTPStatusCode, se.Type)
	if se.Code != "" {
		desc += " " + string(se.Code)
	}
	desc += ": " + se.Msg
	if se.RequestID != "" {
		desc += " (request " + se.RequestID + ")"
	}
	return desc
}

// checkRetry is retryablehttp's default policy (network errors, timeouts,
// 429, 5xx except 501) overridden by Stripe's own Stripe-Should-Retry header
// when present.
func checkRetry(ctx context.Context, resp *http.Response, err error) (bool, error) {
	retry, cerr := retryablehttp.DefaultRetryPolicy(ctx, resp, err)
	if ctx.Err() != nil || resp == nil {
		return retry, cerr
	}
	switch resp.Header.Get("Stripe-Should-Retry") {
	case "false":
		return false, nil
	case "true":
		return true, nil
	}
	return retry, cerr
}

// lastResponse hands the last attempt's response to stripe-go when retries
// run out, so Stripe's error body (type, code, message, request id) is
// reported instead of "giving up after N attempts".
func lastResponse(resp *http.Response, err error, attempts int) (*http.Response, error) {
	if resp != nil {
		return resp, nil
	}
	return nil, fmt.Errorf("giving up after %d attempt(s): %w", attempts, err)
}

// debugLogger sends retryablehttp's messages (every attempt, every retry) to
// slog at debug level: a retried request is routine, its final outcome is
// the caller's to log.
type debugLogger struct{ l *slog.Logger }

func (d debugLogger) Error(msg string, kv ...any) { d.l.Debug("stripe http: "+msg, kv...) }
func (d debugLogger) Info(msg string, kv ...any)  { d.l.Debug("stripe http: "+msg, kv...) }
func (d debugLogger) Debug(msg string, kv ...any) { d.l.Debug("stripe http: "+msg, kv...) }
func (d debugLogger) Warn(msg string, kv ...any)  { d.l.Debug("stripe http: "+msg, kv...) }

// CustomerOf reads the customer of a subscription or an invoice with one
// retrieve (GET /v1/subscriptions/{id} or /v1/invoices/{id}), for thin
// events: it makes *Client a Resolver. An id Stripe does not know wraps
// ErrObjectUnknown; a type it cannot read is a *reconcile.PermanentError.
func (c *Client) CustomerOf(ctx context.Context, objectType, id string) (string, error) {
	var (
		resp *stripeapi.APIResponse
		err  error
	)
	switch objectType {
	case "subscription":
		var sub *stripeapi.Subscription
		if sub, err = c.api.V1Subscriptions.Retrieve(ctx, id, nil); err == nil {
			resp = sub.LastResponse
		}
	case "invoice":
		var inv *stripeapi.Invoice
		if inv, err = c.api.V1Invoices.Retrieve(ctx, id, nil); err == nil {
			resp = inv.LastResponse
		}
	default:
		return "", reconcile.Permanent("stripe: cannot read the customer of a %q", objectType)
	}
	op := "retrieve " + objectType + " " + id
	var se *stripeapi.Error
	switch {
	case errors.As(err, &se) && se.Code == stripeapi.ErrorCodeResourceMissing:
		return "", fmt.Errorf("stripe %s: %s: %w", op, describe(se), ErrObjectUnknown)
	case err != nil:
		return "", fail(op, err)
	case resp == nil || len(resp.RawJSON) == 0:
		return "", fmt.Errorf("stripe %s: stripe-go returned no raw JSON", op)
	}
	customer, _ := customerIDOf(resp.RawJSON)
	return customer, nil
}
