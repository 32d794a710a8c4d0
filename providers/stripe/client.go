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
	"strconv"
	"strings"
	"time"

	retryablehttp "github.com/hashicorp/go-retryablehttp"
	stripeapi "github.com/stripe/stripe-go/v82"
	"golang.org/x/time/rate"

	"github.com/billsync/billsync/providers/internal/attempt"
	"github.com/billsync/billsync/reconcile"
)

// APIVersion is the Stripe API version of every request, sent as
// Stripe-Version so responses never take the account's default version:
// the one stripe-go v82.5.1 pins (2025-08-27.basil), so the fake and the
// tests, which drive Stripe through stripe-go, speak it too. The readers still accept older
// shapes, for stored payloads and for proxies that rewrite the header.
const APIVersion = stripeapi.APIVersion

// Config configures a Client. Zero values take the defaults.
type Config struct {
	APIKey  string // secret or restricted key; required, never logged
	BaseURL string // empty = https://api.stripe.com

	// UserRefKey is the customer metadata key that holds the app's own user
	// reference; default "user_id".
	UserRefKey string

	// Entitlements: Fetch also reads the customer's active entitlements
	// (Stripe Entitlements; one more request, two or more past 100), a
	// source of the account's features. Off by default: then the account
	// has no feature from Stripe. The sweep's bulk listing never reads
	// them (one request per customer): accounts keep those last fetched.
	Entitlements bool

	// ProductPlans: every read also gives each item's product and the
	// plan its metadata names (reconcile.Item.ProductPlan), for a plans
	// file that maps products (reconcile.Plans.ReadsProductPlans). It
	// costs a product read (GET /v1/products/{id}) per product and
	// account a day (an hour for one that names no plan), kept in a
	// cache (product.go). Off: no product is read.
	ProductPlans bool

	// Connect says which connected accounts (Stripe Connect) may be read
	// on behalf of; a key of any other account is a
	// *reconcile.PermanentError. Zero: none, the platform's own only.
	Connect reconcile.ConnectPolicy

	// RateLimit is the account's global rate, requests per second, shared
	// by every call of this client, retries included; default
	// DefaultRate(APIKey): 100 for a live key, 25 for a test key. With
	// several replicas each takes its share (SetReplicas). Burst is the
	// limiter's bucket size; default 1 (evenly spaced requests).
	RateLimit float64
	Burst     int
	// OperationRateLimit is each named API operation's rate (Operation),
	// within RateLimit: Stripe limits each to 25 requests per second
	// unless it says otherwise, so a reconcile that reads two operations
	// spends from two budgets; default OperationRate.
	OperationRateLimit float64
	// ListRateLimit is requests per second the sweep's listing (ListPage,
	// Split) may take; default the list operation's rate or half of
	// RateLimit, whichever is lower, so webhook-triggered fetches keep the
	// rest of the global rate.
	ListRateLimit float64

	// ReadAllocation is the account's monthly read allocation, reads per
	// 30 days; 0 (the default) derives it from the transactions stored
	// (ReadAllocation).
	ReadAllocation float64
	// ConnectReadAllocation is the monthly read allocation of the
	// platform's reads on behalf of its connected accounts; 0 (the
	// default) derives it from their transactions (ConnectAllocation).
	ConnectReadAllocation float64

	// OnRateLimited, when set, sees every 429 with its operation and
	// Stripe-Rate-Limited-Reason ("none" when Stripe sent none: a lock
	// timeout, not a limiter).
	OnRateLimited func(operation, reason string)

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
	cfg.RateLimit = cmp.Or(cfg.RateLimit, DefaultRate(cfg.APIKey))
	cfg.Burst = cmp.Or(cfg.Burst, 1)
	cfg.OperationRateLimit = cmp.Or(cfg.OperationRateLimit, OperationRate)
	cfg.ListRateLimit = cmp.Or(cfg.ListRateLimit, min(cfg.OperationRateLimit, cfg.RateLimit/2))
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
	if cfg.RateLimit < 0 || cfg.Burst < 0 || cfg.ListRateLimit < 0 || cfg.OperationRateLimit < 0 || cfg.ReadAllocation < 0 ||
		cfg.ConnectReadAllocation < 0 {
		errs = append(errs, errors.New("rate limit and burst must not be negative"))
	}
	if cfg.Timeout < 0 || cfg.RetryWaitMin < 0 || cfg.RetryWaitMax < cfg.RetryWaitMin {
		errs = append(errs, errors.New("timeout and retry waits must not be negative, and the maximum wait must not be below the minimum"))
	}
	return errors.Join(errs...)
}

// Client reads customers' current state from the Stripe API. It
// implements reconcile.Provider, reconcile.Lister, reconcile.Splitter and
// Resolver (thin events' customers) and is safe for concurrent use.
//
// Every call is one or more GETs sent by get, whose answers the readers
// (read.go) decode straight from the raw JSON. stripe-go's typed structs
// are not used here: each is cut for one API version (the typed v82
// Subscription has no current_period_* at all), and decoding into them
// cost about a third of a sweep's CPU for fields billsync never reads.
//
// The layers of one call, outermost first:
//
//	ctx (caller's deadline for the whole Fetch/ListPage)
//	get (Authorization, the pinned Stripe-Version; a refusal read into
//	  an *apiError)
//	go-retryablehttp (RetryMax retries of network errors, timeouts, 429 and
//	  5xx, backoff honouring Retry-After, Stripe-Should-Retry obeyed)
//	attempt.Transport (per attempt: wait for the listing's limiter when it
//	  calls, the operation's limiter and the account's global one (budget:
//	  this replica's share, slowed by 429s); then run the attempt under its
//	  own Timeout, and count its answer)
//	http.Transport
type Client struct {
	http       *http.Client // retrying and limited: the layers above
	baseURL    string
	apiKey     string // never logged
	userRefKey string
	connect    reconcile.ConnectPolicy
	// entitlements: Fetch reads active entitlements (Config.Entitlements).
	entitlements bool
	// products caches the plans of products' metadata; nil unless
	// Config.ProductPlans (then no product is read).
	products          *productCache
	log               *slog.Logger
	listLimiter       *rate.Limiter
	budget            *budget
	readAllocation    float64 // Config.ReadAllocation
	connectAllocation float64 // Config.ConnectReadAllocation
	listRate          float64 // Config.ListRateLimit
	// latency averages Fetch's durations and listLatency ListPage's
	// (pages of 100 customers take longer than one), each less its waits
	// for the rate limits (attempt.Timed): each sizes its own calls in
	// flight.
	latency, listLatency reconcile.LatencyMeter
}

var (
	_ reconcile.Provider = (*Client)(nil)
	_ reconcile.Lister   = (*Client)(nil)
	_ reconcile.Splitter = (*Client)(nil)
)

// NewClient validates cfg and returns a Client.
func NewClient(cfg Config) (*Client, error) {
	return newClient(cfg, attempt.NetTransport())
}

// newClient is NewClient sending each attempt through base: tests put an
// in-process transport there to run the client on a fake clock.
func newClient(cfg Config, base http.RoundTripper) (*Client, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("stripe client config: %w", err)
	}
	rc := retryablehttp.NewClient()
	c := &Client{
		baseURL:           cmp.Or(strings.TrimRight(cfg.BaseURL, "/"), stripeapi.APIURL),
		apiKey:            cfg.APIKey,
		userRefKey:        cfg.UserRefKey,
		entitlements:      cfg.Entitlements,
		connect:           cfg.Connect,
		log:               cfg.Logger.With("provider", Provider),
		listLimiter:       rate.NewLimiter(rate.Limit(cfg.ListRateLimit), 1),
		budget:            newBudget(cfg.RateLimit, cfg.OperationRateLimit, cfg.Burst),
		readAllocation:    cfg.ReadAllocation,
		connectAllocation: cfg.ConnectReadAllocation,
		listRate:          cfg.ListRateLimit,
	}
	if cfg.ProductPlans {
		c.products = newProductCache(time.Now, productTTL, productMissTTL, productCacheSize)
	}
	rc.HTTPClient = &http.Client{Transport: &attempt.Transport{
		Base: base,
		// the listing's own limiter (a sweep's share), the connected
		// account's (Stripe Connect: slowed by its own 429s), the
		// operation's, then the platform's global one.
		Limits: func(req *http.Request) []attempt.Limit {
			return []attempt.Limit{
				{Name: "stripe list", Limiter: listLimiter(req.Context())},
				{Name: "stripe connected account", Limiter: c.budget.ofAccount(accountOf(req.Context())).limiter()},
				{Name: "stripe operation", Limiter: c.budget.of(Operation(req.Method, req.URL.Path)).limiter()},
				{Name: "stripe", Limiter: c.budget.global.limiter()},
			}
		},
		Timeout:   cfg.Timeout,
		OnAttempt: cfg.OnAttempt,
		OnAnswer: func(req *http.Request, resp *http.Response) {
			op := Operation(req.Method, req.URL.Path)
			if req.Method == http.MethodGet {
				c.budget.count(op, accountOf(req.Context()))
			}
			if reason := c.budget.answered(op, accountOf(req.Context()), resp); reason != "" && cfg.OnRateLimited != nil {
				cfg.OnRateLimited(op, reason)
			}
		},
	}}
	rc.RetryMax, rc.RetryWaitMin, rc.RetryWaitMax = cfg.RetryMax, cfg.RetryWaitMin, cfg.RetryWaitMax
	// DefaultBackoff waits exactly Retry-After (seconds or HTTP date) on 429
	// and 503, else doubles from RetryWaitMin up to RetryWaitMax. ctx bounds
	// a long Retry-After.
	rc.Backoff = retryablehttp.DefaultBackoff
	rc.CheckRetry = checkRetry
	rc.ErrorHandler = lastResponse
	rc.Logger = debugLogger{cfg.Logger}
	c.http = rc.StandardClient()
	return c, nil
}

// Name returns "stripe".
func (c *Client) Name() string { return Provider }

// Budget returns the rate a reconcile can be read at and its recent
// fetches' latency: the worker keeps as many fetches in flight as they
// call for. The rate is this replica's share of the global rate, or of
// the two operations a customer is read with (see fetch), whichever is
// lower.
func (c *Client) Budget() reconcile.Budget {
	global, _ := c.budget.snapshot()
	reads := c.budget.of(opRetrieveCustomer).rate() + c.budget.of(opListSubscriptions).rate()
	return reconcile.Budget{Rate: min(global, reads), Latency: c.latency.Latency()}
}

// ListBudget returns the listing's share of the rate (ListRateLimit) and
// its recent pages' latency: an adapting sweep lists as many parts at once
// as they call for.
func (c *Client) ListBudget() reconcile.Budget {
	return reconcile.Budget{Rate: c.listRate, Latency: c.listLatency.Latency()}
}

// Fetch returns the customer's snapshot now, in one request where it can:
// the customer retrieved with its subscriptions expanded
// (GET /v1/customers/{id}?expand[]=subscriptions). Stripe embeds the
// customer's current subscriptions (every status but canceled), newest
// first, up to 10; only when it says has_more are they read from the
// subscription list instead (see resolve). A customer with no current
// subscription costs that one request and has empty Subscriptions. With
// Config.Entitlements, the customer's active entitlements are listed at
// the same time (see startEntitlements): one round trip still.
//
// A deleted customer (Stripe answers {"deleted": true} and has canceled its
// subscriptions) is a snapshot with Deleted set; a customer Stripe never
// knew (404 resource_missing) is reconcile.ErrCustomerUnknown. Unreadable
// data and 400 answers are *reconcile.PermanentError. Everything else
// (network, timeouts, 429, 5xx, and also 401/403: a bad or revoked key is an
// outage to alert on, not a reason to ignore events) is transient.
func (c *Client) Fetch(ctx context.Context, customerID string) (snap reconcile.Snapshot, err error) {
	attempt.Timed(ctx, &c.latency, func(ctx context.Context) { snap, err = c.fetch(ctx, customerID) })
	return snap, err
}

func (c *Client) fetch(ctx context.Context, key string) (reconcile.Snapshot, error) {
	ctx, customerID, err := c.onBehalfOfKey(ctx, key)
	if err != nil {
		return reconcile.Snapshot{}, err
	}
	if customerID == "" {
		return reconcile.Snapshot{}, reconcile.Permanent("stripe: empty customer id")
	}
	if reconcile.IsConnectedAccount(customerID) {
		return c.fetchCustomerAccount(ctx, customerID)
	}
	// The entitlements (when on) are listed while the customer is
	// retrieved: at Stripe's latency a reconcile then takes one round
	// trip, not two. Every return waits for that list to end.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ents := c.startEntitlements(ctx, customerID)
	snap, err := c.readCustomer(ctx, customerID)
	if err != nil {
		cancel()
		ents.wait()
		return reconcile.Snapshot{}, err
	}
	if snap, err = ents.complete(snap); err != nil {
		return reconcile.Snapshot{}, err
	}
	c.log.DebugContext(ctx, "stripe snapshot fetched", "customer", customerID,
		"deleted", snap.Deleted, "subscriptions", len(snap.Subscriptions), "entitlements", len(snap.Entitlements))
	return snap, nil
}

// fetchCustomer retrieves the customer with its subscriptions expanded
// and resolves its snapshot (without entitlements).
func (c *Client) fetchCustomer(ctx context.Context, customerID string) (reconcile.Snapshot, error) {
	op := "retrieve customer " + customerID
	body, err := c.get(ctx, "/v1/customers/"+url.PathEscape(customerID), url.Values{"expand[0]": {"subscriptions"}})
	if err != nil {
		return reconcile.Snapshot{}, failMissing(op, err, reconcile.ErrCustomerUnknown)
	}
	read, err := customerOfJSON(body, c.userRefKey)
	if err != nil {
		return reconcile.Snapshot{}, fmt.Errorf("stripe %s: %w", op, err)
	}
	return c.resolve(ctx, read)
}

// fetchCustomerAccount reads the snapshot of an Account billed as a
// customer (Accounts v2: subscriptions that name customer_account, keyed
// by the acct_ id, see customerKeyOf). The account is retrieved first
// (GET /v1/accounts/{id}: the app's reference in its metadata, its email),
// then its subscriptions are listed (GET /v1/subscriptions?customer_account=…,
// every status but canceled, as a customer's are), and the snapshot is
// made by resolve, the rule every customer's read shares. An account
// Stripe does not know, or no longer lets the platform read, is
// reconcile.ErrCustomerUnknown. No entitlements are read: Stripe lists a
// Customer's; the account keeps those last read (none).
func (c *Client) fetchCustomerAccount(ctx context.Context, accountID string) (reconcile.Snapshot, error) {
	op := "retrieve account " + accountID
	body, err := c.get(ctx, "/v1/accounts/"+url.PathEscape(accountID), nil)
	var ae *apiError
	if errors.As(err, &ae) && ae.Code == codeAccountInvalid && ae.Account == "" {
		// The platform's own read: the account billed is the one refused.
		// Read on behalf of a connected account, fail tells a lost one.
		return reconcile.Snapshot{}, fmt.Errorf("stripe %s: %s: %w", op, ae, reconcile.ErrCustomerUnknown)
	}
	if err != nil {
		return reconcile.Snapshot{}, failMissing(op, err, reconcile.ErrCustomerUnknown)
	}
	var acct customerObject // an account's id, email and metadata read as a customer's
	if err := readAnswer(body, &acct); err != nil {
		return reconcile.Snapshot{}, fmt.Errorf("stripe %s: %w", op, err)
	}
	cust, err := acct.read(c.userRefKey)
	if err != nil {
		return reconcile.Snapshot{}, fmt.Errorf("stripe %s: %w", op, err)
	}
	op = "list subscriptions of customer account " + accountID
	subs, err := listAll(ctx, c, "/v1/subscriptions", url.Values{"customer_account": {accountID}}, idOfObject)
	if err != nil {
		return reconcile.Snapshot{}, failMissing(op, err, reconcile.ErrCustomerUnknown)
	}
	for _, s := range subs {
		if s.CustomerAccount.s != accountID {
			return reconcile.Snapshot{}, reconcile.Permanent("stripe %s: subscription %s is listed with customer_account %q",
				op, s.ID.s, s.CustomerAccount.s)
		}
	}
	cust.id, cust.subs, cust.complete = accountID, subs, true
	return c.resolve(ctx, cust)
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
	// A listing reads no entitlements: with them on, the account keeps
	// those last fetched (Fetch reads them); with them off, there are
	// none to keep.
	snap := reconcile.Snapshot{Provider: Provider, CustomerID: connectedKey(ctx, cust.id), KeepEntitlements: c.entitlements}
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
	// subscription. An ended one is left out of the snapshot: no request.
	var items map[string][]object
	for _, sub := range subs {
		if !sub.Items.HasMore.v || !sub.ID.ok || ended(sub) {
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
	if err = c.readProductPlans(ctx, &snap, subs, items); err != nil {
		return reconcile.Snapshot{}, err
	}
	return snap, nil
}

// listItems reads every item of a subscription
// (GET /v1/subscription_items?subscription=…, 100 a page).
func (c *Client) listItems(ctx context.Context, subscriptionID string) ([]object, error) {
	items, err := listAll(ctx, c, "/v1/subscription_items", url.Values{"subscription": {subscriptionID}}, idOfObject)
	if err != nil {
		return nil, fail("list items of subscription "+subscriptionID, err)
	}
	return items, nil
}

// listSubscriptions reads every current subscription of a customer.
func (c *Client) listSubscriptions(ctx context.Context, customerID string) ([]object, error) {
	subs, err := listAll(ctx, c, "/v1/subscriptions", url.Values{"customer": {customerID}}, idOfObject)
	if err != nil {
		return nil, failMissing("list subscriptions of customer "+customerID, err, reconcile.ErrCustomerUnknown)
	}
	return subs, nil
}

func idOfObject(o object) (string, bool) { return o.ID.s, o.ID.ok }

// get sends GET path?q through the client's stack (the layers in Client's
// doc) and returns the answer's raw JSON, for the readers. Every call of
// the client goes through it. A refusal (any status but 200) is an
// *apiError, for the caller to classify with fail or failMissing.
func (c *Client) get(ctx context.Context, path string, q url.Values) ([]byte, error) {
	u := c.baseURL + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	return c.do(req)
}

// post sends a form-encoded POST (a create or an update) with an
// Idempotency-Key, so a retried attempt is not applied twice, and returns
// the answer's body as get does.
func (c *Client) post(ctx context.Context, path string, form url.Values, idempotencyKey string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.baseURL+path, strings.NewReader(form.Encode()))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Idempotency-Key", idempotencyKey)
	return c.do(req)
}

// do sends req with billsync's headers and reads the answer: the body of a
// 200, an *apiError for any other status.
func (c *Client) do(req *http.Request) ([]byte, error) {
	req.Header.Set("Authorization", "Bearer "+c.apiKey)
	req.Header.Set("Stripe-Version", APIVersion)
	req.Header.Set("User-Agent", userAgent)
	if account := accountOf(req.Context()); account != "" {
		// API v2 names the account a request acts in its Stripe-Context.
		header := "Stripe-Account"
		if strings.HasPrefix(req.URL.Path, "/v2/") {
			header = "Stripe-Context"
		}
		req.Header.Set(header, account)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	limit := int64(maxAnswerBytes)
	if resp.StatusCode != http.StatusOK {
		limit = maxErrorBytes // an error object, or a proxy's page: its first bytes say enough
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit))
	if err != nil {
		return nil, fmt.Errorf("read the answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		apiErr := apiErrorOf(resp, body)
		apiErr.Account = accountOf(req.Context())
		if ctxErr := req.Context().Err(); ctxErr != nil {
			// The caller's deadline ended the retries: say so, whatever
			// the last attempt's answer was (it may have come after it).
			return nil, fmt.Errorf("%w (retries stopped: %w)", apiErr, ctxErr)
		}
		return nil, apiErr
	}
	return body, nil
}

// userAgent names billsync to Stripe (its logs, and support's).
const userAgent = "billsync (Stripe API " + APIVersion + ")"

// maxAnswerBytes bounds an answer read: a page of 100 customers with
// their subscriptions expanded is a few MB; more is not Stripe's, and is
// cut (then unreadable, and retried later).
const maxAnswerBytes = 256 << 20

// maxErrorBytes bounds a refusal's body read: Stripe's error objects are
// under 1 KiB.
const maxErrorBytes = 64 << 10

// listAll reads every entry of a Stripe list: GET path?q, listPageSize a
// page, each page after the last entry of the one before (starting_after,
// as Stripe's libraries page), every entry decoded into T by the readers.
// idOf reads an entry's id; q is changed. The entries are never nil (an
// empty list reads as one with no entries: the subscription items listed
// replace the embedded ones). Errors are get's, or unreadable pages.
func listAll[T any](ctx context.Context, c *Client, path string, q url.Values, idOf func(T) (string, bool)) ([]T, error) {
	q.Set("limit", strconv.Itoa(listPageSize))
	all := []T{}
	for {
		body, err := c.get(ctx, path, q)
		if err != nil {
			return nil, err
		}
		entries, more, err := listPageOf[T](body)
		if err != nil {
			return nil, fmt.Errorf("unreadable page: %w", err)
		}
		all = append(all, entries...)
		if !more || len(entries) == 0 {
			return all, nil
		}
		last, ok := idOf(entries[len(entries)-1])
		if !ok {
			return nil, reconcile.Permanent("a list page's last entry has no id: the next page cannot be asked for")
		}
		q.Set("starting_after", last)
	}
}

// listPageSize is Stripe's largest page.
const listPageSize = 100

// apiError is Stripe's refusal of a request: the answer's status and
// request id, and what its error object says.
type apiError struct {
	Status    int    `json:"-"`
	RequestID string `json:"-"`
	Account   string `json:"-"` // the connected account the request acted in, "" for the platform
	Type      string `json:"type"`
	Code      string `json:"code"`
	Message   string `json:"message"`
}

// codeResourceMissing is Stripe's error code for an id it does not know.
const codeResourceMissing = "resource_missing"

// apiErrorOf reads the error of a refused answer. A body that holds no
// Stripe error (a proxy's page) is described by its status.
func apiErrorOf(resp *http.Response, body []byte) *apiError {
	var answer struct {
		Error *apiError `json:"error"`
	}
	if json.Unmarshal(body, &answer) != nil || answer.Error == nil {
		answer.Error = &apiError{Message: http.StatusText(resp.StatusCode)}
	}
	e := answer.Error
	e.Status, e.RequestID = resp.StatusCode, resp.Header.Get("Request-Id")
	return e
}

// Error renders the refusal:
// "429 invalid_request_error rate_limit: Request rate limit exceeded. (request req_…)".
func (e *apiError) Error() string {
	desc := strconv.Itoa(e.Status)
	for _, s := range []string{e.Type, e.Code} {
		if s != "" {
			desc += " " + s
		}
	}
	desc += ": " + e.Message
	if e.RequestID != "" {
		desc += " (request " + e.RequestID + ")"
	}
	return desc
}

// failMissing is fail for a call about one object: Stripe's
// resource_missing (404 on /v1/customers/{id}, 400 for a customer=
// parameter) wraps missing (reconcile.ErrCustomerUnknown).
func failMissing(op string, err, missing error) error {
	var ae *apiError
	if errors.As(err, &ae) && ae.Code == codeResourceMissing {
		return fmt.Errorf("stripe %s: %s: %w", op, ae, missing)
	}
	return fail(op, err)
}

// fail converts an error of get into billsync's classes. A 400 is a
// request Stripe will never accept, so it is permanent; every other
// refusal, and every failure to get an answer, is transient.
func fail(op string, err error) error {
	var ae *apiError
	switch {
	case !errors.As(err, &ae):
		return fmt.Errorf("stripe %s: %w", op, err)
	case ae.Status == http.StatusBadRequest:
		return reconcile.Permanent("stripe %s: %s", op, ae)
	case ae.accountLost():
		return reconcile.Permanent("stripe %s: connected account %s does not authorise the platform: %s", op, ae.Account, ae)
	}
	return fmt.Errorf("stripe %s: %s", op, ae)
}

// accountLost reports whether a refusal says the platform may no longer
// act in the connected account it asked for (it deauthorised the
// platform, or never existed): every read in it would be refused alike,
// so its events end ignored with the reason. A refusal of the platform's
// own key stays transient (an outage to alert on).
func (ae *apiError) accountLost() bool {
	return ae.Account != "" && (ae.Status == http.StatusUnauthorized || ae.Status == http.StatusForbidden) &&
		(ae.Code == codeAccountInvalid || strings.Contains(ae.Message, "does not have access to account"))
}

// codeAccountInvalid is Stripe's error code for a Stripe-Account the key
// cannot act in.
const codeAccountInvalid = "account_invalid"

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

// lastResponse hands the last attempt's response to get when retries
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

// CustomerOf reads the customer of a thin event's related object, a
// subscription or an invoice, with one retrieve (GET /v1/subscriptions/{id}
// or /v1/invoices/{id}), for the worker (see reconcile.Related): its
// customer, or the Account it bills as a customer (customerKeyOf). An id
// Stripe does not know, or a type it cannot read, is a
// *reconcile.PermanentError.
func (c *Client) CustomerOf(ctx context.Context, obj reconcile.Related) (string, error) {
	ctx, err := c.onBehalfOf(ctx, obj.Account)
	if err != nil {
		return "", err
	}
	var path string
	switch obj.Type {
	case thinEvent:
		return c.customerOfLostEvent(ctx, obj.ID)
	case "subscription":
		path = "/v1/subscriptions/"
	case "invoice":
		path = "/v1/invoices/"
	default:
		return "", reconcile.Permanent("stripe: cannot read the customer of a %q", obj.Type)
	}
	var o object // its customer or customer_account (customerKeyOf)
	if err := c.retrieve(ctx, "retrieve "+obj.String(), path+url.PathEscape(obj.ID), &o); err != nil {
		return "", err
	}
	customer, _ := customerKeyOf(o) // none: "", which names no customer
	return connectedKey(ctx, customer), nil
}

// retrieve reads the object at path into v: one Stripe does not know is a
// *reconcile.PermanentError, any other failure transient (fail); op names
// the request in errors.
func (c *Client) retrieve(ctx context.Context, op, path string, v any) error {
	body, err := c.get(ctx, path, nil)
	var ae *apiError
	switch {
	case errors.As(err, &ae) && ae.Code == codeResourceMissing:
		return reconcile.Permanent("stripe %s: %s", op, ae)
	case err != nil:
		return fail(op, err)
	}
	if err := readAnswer(body, v); err != nil {
		return fmt.Errorf("stripe %s: %w", op, err)
	}
	return nil
}

// customerOfLostEvent reads the customer of the object whose event Stripe
// failed to create, from the health event that says so
// (HealthEventResolved): its data's impact names the object, which is
// read as a thin event's related object is. An impact on a connected
// account, or on an object that names no customer billsync reads, is a
// *reconcile.PermanentError.
func (c *Client) customerOfLostEvent(ctx context.Context, eventID string) (string, error) {
	var e struct {
		Data struct {
			Impact struct {
				Context       string `json:"context"`
				EventType     string `json:"event_type"`
				RelatedObject struct {
					ID   string `json:"id"`
					Type string `json:"type"`
				} `json:"related_object"`
			} `json:"impact"`
		} `json:"data"`
	}
	if err := c.retrieve(ctx, "retrieve event "+eventID, "/v2/core/events/"+url.PathEscape(eventID), &e); err != nil {
		return "", err
	}
	impact := e.Data.Impact
	lost := impact.RelatedObject
	account := cmp.Or(impact.Context, accountOf(ctx))
	switch {
	case account != "" && !reconcile.IsConnectedAccount(account):
		return "", reconcile.Permanent("stripe event %s: the lost %s was in %q, not a connected account billsync can read", eventID, impact.EventType, account)
	case lost.Type == "customer":
		return reconcile.Connected(account, lost.ID), nil
	case lost.Type == "subscription" || lost.Type == "invoice":
		return c.CustomerOf(ctx, reconcile.Related{Account: account, Type: lost.Type, ID: lost.ID})
	}
	return "", reconcile.Permanent("stripe event %s: the lost %s was about a %q, which names no customer billsync reads", eventID, impact.EventType, lost.Type)
}
