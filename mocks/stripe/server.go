// Package stripe is a stateful, in-memory fake of the part of the Stripe
// REST API billsync uses: customers, prices, subscriptions, invoices, events
// and webhook endpoints. It speaks the real wire protocol (form-encoded
// requests, Stripe-shaped JSON and errors, Stripe-Version honoured for the
// shapes that moved in 2025-03-31.basil) and sends webhooks signed exactly
// like Stripe's, so the real stripe-go client and real signature checks can
// be tested against it. It also delivers thin events (v2.core.event) to event
// destinations. Faults (copies, reordering, drops, 5xx, 429, latency, a rate
// limit, stale reads, aimed at one API key or all) are injected on demand,
// and failed deliveries are retried on a Stripe-like schedule that a time
// factor compresses. Stripe's own rate limits (per operation, inside a
// global one) are enforced when asked (Limits), and every request is
// counted by operation (Usage). Its responses are checked against the
// OpenAPI spec that stripe-mock ships (see openapi_test.go).
//
// It knows Stripe Connect (connect.go): connected accounts (AddAccount,
// POST/GET /v1/accounts), each with its own customers, prices,
// subscriptions, invoices, entitlements and events, which a request picks
// with the Stripe-Account header (Stripe-Context on API v2); without it, a
// request acts in the platform's own objects, and in an account that does
// not exist or deauthorised the platform it is Stripe's 403
// account_invalid. A connected account's events go only to Connect
// endpoints (connect=true, AddConnectWebhookEndpoint), with "account" (a
// thin event, "context"), and are listed by GET /v1/events only with its
// header. account.application.authorized and .deauthorized announce an
// account (DeauthorizeAccount, AuthorizeAccount). Account(id) holds the Go
// helpers of one account's objects, its faults (Account.SetFaults), the
// livemode of its events (Account.SetLivemode) and its usage
// (Account.Usage); Limits.PerAccount and Limits.Accounts limit each
// account's requests.
//
// It is a test double only: it keeps nothing on disk, knows no real money
// movement (a customer's card pays every invoice unless a test makes it
// fail), and must never hold real keys.
package stripe

import (
	"cmp"
	"errors"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/billsync/billsync/mocks/fault"
)

// DefaultAPIKey is the secret key the fake accepts unless told otherwise.
const DefaultAPIKey = "sk_test_billsync"

// Options configures a Server. The zero value works.
type Options struct {
	APIKey string // required bearer key; default DefaultAPIKey
	// ExtraAPIKeys are accepted too: a test driver on its own key is left
	// alone by faults aimed at billsync's (Faults.TargetKey).
	ExtraAPIKeys []string
	Clock        *Clock       // nil → NewClock(time.Now())
	Faults       Faults       // initial faults; see SetFaults
	Logger       *slog.Logger // nil → discard
	HTTPClient   *http.Client // for webhook deliveries; nil → 10 s timeout client

	DeliveryAttempts int           // attempts per webhook copy; default 3
	RetryBackoff     time.Duration // wait before the 2nd attempt, doubled after; default 100ms
	// RetrySchedule, when set, replaces DeliveryAttempts and RetryBackoff:
	// the waits before each retry of a failed delivery (LiveRetrySchedule is
	// Stripe's live-mode shape), divided by TimeFactor.
	RetrySchedule []time.Duration
	// TimeFactor compresses RetrySchedule: 3600 turns an hour into a second,
	// so "delivered an hour after billsync came back" takes a second. 0 = 1.
	TimeFactor float64
	// Dunning is the account's failed-payment setting; see Dunning.
	Dunning Dunning
	// EventsKept is how far back (by the fake's clock) GET /v1/events
	// lists; default EventsKept, Stripe's 30 days; negative: every event
	// (for tests that advance the clock by months and read the history).
	EventsKept time.Duration
	// Limits are the initial rate limits (see SetLimits); the zero value
	// limits nothing, DocumentedLimits() is Stripe's model. New panics on
	// limits SetLimits would refuse.
	Limits Limits
}

// Server is the fake Stripe. It implements http.Handler: /v1/… is the API,
// /_mock/… the control endpoints (see control.go). One mutex guards all
// state; handlers do no I/O while holding it.
type Server struct {
	apiKey      string
	apiKeys     []string
	clock       *Clock
	unsubscribe func()
	log         *slog.Logger
	api         *http.ServeMux
	control     *http.ServeMux
	patterns    []string // the API's route patterns: its operations
	gate        *gate    // rate limits, requests in flight, usage

	deliverer *fault.Deliverer // sends the webhooks

	mu      sync.Mutex
	closed  bool
	faults  fault.State
	dunning Dunning
	// *space holds the objects of the account the code under the lock
	// acts in: platform's, except while a request with a Stripe-Account
	// header (or a helper of Account) acts in a connected account's (see
	// in and handle). Between holders of the lock it is always platform.
	*space
	platform *space
	// accounts are the connected accounts (Stripe Connect), each with its
	// own space; accountFaults are faults aimed at one of them.
	accounts      table[*account]
	application   string // the platform's Connect application id, ca_…
	faultsMu      sync.Mutex
	accountFaults map[string]*fault.State
	endpoints     table[*endpoint]
	listLag       time.Duration // see SetEventListLag
	// healthFailing and notGenerated: see FailEventGeneration.
	healthFailing  bool
	notGenerated   []notGenerated
	v2Events       map[string]*event // thin v2 events, by id (GET /v2/core/events/{id})
	eventsKept     time.Duration     // see Options.EventsKept; < 0: forever
	idempotent     map[string]savedResponse
	idempotentKeys []string // in the order saved, for forgetting the oldest
	// lastBodySize is the size of the last answer: the next one's buffer
	// starts that large (a sweep asks for page after like page).
	lastBodySize int
	deliveries   []DeliveryRecord
	outcomes     map[deliveryKey]string // settled deliveries: delivered | gave_up | dropped
}

type savedResponse struct {
	route string
	body  []byte
}

// call is one API request as a handler sees it.
type call struct {
	r         *http.Request
	key       string // the API key it was made with
	account   string // the connected account it acts in (Stripe-Account); "" for the platform
	form      form
	version   string
	expand    expansion
	requestID string
	idemKey   string
	now       time.Time
	stale     time.Duration // > 0: this read sees objects as they were this long ago
	body      []byte        // an API v2 POST's JSON body (readJSONBody)
}

type handler func(c *call) (obj, error)

// New returns a running fake; Close it to stop webhook deliveries.
func New(opts Options) *Server {
	s := &Server{
		apiKey:        cmp.Or(opts.APIKey, DefaultAPIKey),
		clock:         opts.Clock,
		log:           opts.Logger,
		idempotent:    map[string]savedResponse{},
		platform:      newSpace(nil),
		application:   newID("ca"),
		accountFaults: map[string]*fault.State{},
		outcomes:      map[deliveryKey]string{},
		dunning:       opts.Dunning.withDefaults(),
		eventsKept:    cmp.Or(opts.EventsKept, EventsKept),
		api:           http.NewServeMux(),
		control:       http.NewServeMux(),
		gate:          newGate(),
	}
	if s.clock == nil {
		s.clock = NewClock(time.Now())
	}
	s.space = s.platform
	s.apiKeys = append([]string{s.apiKey}, opts.ExtraAPIKeys...)
	var schedule []time.Duration // real waits before each delivery retry
	if len(opts.RetrySchedule) > 0 {
		factor := cmp.Or(opts.TimeFactor, 1)
		for _, d := range opts.RetrySchedule {
			schedule = append(schedule, time.Duration(float64(d)/factor))
		}
	} else {
		attempts := cmp.Or(opts.DeliveryAttempts, 3)
		for i, wait := 1, cmp.Or(opts.RetryBackoff, 100*time.Millisecond); i < attempts; i, wait = i+1, wait*2 {
			schedule = append(schedule, wait)
		}
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	client := opts.HTTPClient
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second}
	}
	s.deliverer = fault.NewDeliverer(client, schedule)
	s.faults.Set(opts.Faults)
	s.unsubscribe = s.clock.subscribe(func(now time.Time) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.tick(now)
	})
	s.routes()
	if err := s.SetLimits(opts.Limits); err != nil {
		panic("stripemock: " + err.Error())
	}
	return s
}

func (s *Server) routes() {
	routes := map[string]handler{
		"POST /v1/customers":                          s.createCustomer,
		"GET /v1/customers":                           s.listCustomers,
		"GET /v1/customers/{id}":                      s.getCustomer,
		"POST /v1/customers/{id}":                     s.updateCustomer,
		"DELETE /v1/customers/{id}":                   s.deleteCustomer,
		"POST /v1/prices":                             s.createPrice,
		"GET /v1/prices":                              s.listPrices,
		"GET /v1/prices/{id}":                         s.getPrice,
		"POST /v1/subscriptions":                      s.createSubscription,
		"GET /v1/subscriptions":                       s.listSubscriptions,
		"GET /v1/subscriptions/{id}":                  s.getSubscription,
		"POST /v1/subscriptions/{id}":                 s.updateSubscription,
		"DELETE /v1/subscriptions/{id}":               s.cancelSubscription,
		"GET /v1/invoices":                            s.listInvoices,
		"GET /v1/invoices/{id}":                       s.getInvoice,
		"POST /v1/invoices/{id}/pay":                  s.payInvoice,
		"GET /v1/events":                              s.listEvents,
		"GET /v1/events/{id}":                         s.getEvent,
		"GET /v2/core/events/{id}":                    s.getV2Event,
		"POST /v1/webhook_endpoints":                  s.createEndpoint,
		"GET /v1/webhook_endpoints":                   s.listEndpoints,
		"GET /v1/webhook_endpoints/{id}":              s.getEndpoint,
		"POST /v1/webhook_endpoints/{id}":             s.updateEndpoint,
		"DELETE /v1/webhook_endpoints/{id}":           s.deleteEndpoint,
		"POST /v1/entitlements/features":              s.createFeature,
		"GET /v1/entitlements/features":               s.listFeatures,
		"GET /v1/entitlements/features/{id}":          s.getFeature,
		"POST /v1/products/{product}/features":        s.attachFeature,
		"GET /v1/products/{product}/features":         s.listProductFeatures,
		"GET /v1/products/{id}":                       s.getProduct,
		"DELETE /v1/products/{product}/features/{id}": s.detachFeature,
		"GET /v1/entitlements/active_entitlements":    s.listActiveEntitlements,
		"POST /v1/accounts":                           s.createAccount,
		"GET /v1/accounts":                            s.listAccounts,
		"GET /v1/accounts/{id}":                       s.getAccount,
		"/":                                           s.unknownRoute,
	}
	maps.Copy(routes, s.destinationRoutes())
	for pattern, h := range routes {
		s.patterns = append(s.patterns, pattern)
		s.api.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) { s.serveAPI(w, r, pattern, h) })
	}
	slices.Sort(s.patterns)
	s.controlRoutes()
}

// Clock returns the server's clock.
func (s *Server) Clock() *Clock { return s.clock }

// Close stops webhook deliveries (pending ones are abandoned) and waits for
// their goroutines. The handler keeps answering API requests.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.mu.Unlock()
	s.unsubscribe()
	s.deliverer.Close()
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, "/_mock/") {
		s.control.ServeHTTP(w, r)
		return
	}
	s.api.ServeHTTP(w, r)
}

// serveAPI runs the steps every Stripe request goes through: request id,
// API version, authentication, rate limits, latency, injected faults, form
// parsing, idempotency, then the handler under the lock. op is the route
// pattern: the operation Stripe's limits and the usage count by.
//
// The limits decide on arrival, before Latency, as Stripe's limiters do
// before any work: a refused request answers at once, and a let-through
// one is in flight (for Limits.Concurrency) through its latency until
// answered, so a slow Stripe makes requests pile up against the cap.
func (s *Server) serveAPI(w http.ResponseWriter, r *http.Request, op string, h handler) {
	c := &call{r: r, requestID: newID("req"), version: DefaultAPIVersion}
	w.Header().Set("Request-Id", c.requestID)
	w.Header().Set("Stripe-Version", c.version)
	if v := r.Header.Get("Stripe-Version"); v != "" {
		if !versionPattern.MatchString(v) {
			badRequest("Invalid Stripe API version: " + v).write(w)
			return
		}
		c.version = v
		w.Header().Set("Stripe-Version", v)
	}
	key, authErr := s.authenticate(r)
	c.key, c.account = key, requestAccount(r)
	if authErr == nil {
		done, reason := s.gate.admit(key, c.account, r.Method, op, s.clock.Now())
		if reason != "" {
			rateLimited(reason, 0).write(w)
			return
		}
		defer done()
	}
	states := []*fault.State{&s.faults}
	if af := s.faultsOf(c.account); af != nil {
		states = append(states, af) // faults aimed at the account, after the server's
	}
	for _, st := range states {
		if f := st.Get(); f.Targets(key) {
			if f.Latency > 0 && !fault.Sleep(r.Context(), f.Latency) {
				return
			}
			if r.Method == http.MethodGet && f.StaleReads > 0 {
				c.stale = f.StaleReads
			}
		}
	}
	if authErr != nil {
		authErr.write(w)
		return
	}
	for _, st := range states {
		if err := injectFault(st, key); err != nil {
			err.write(w)
			return
		}
	}
	if err := r.ParseForm(); err != nil {
		badRequest("Invalid request body: " + err.Error()).write(w)
		return
	}
	c.form = form(r.Form)
	var bodyErr *stripeError
	if c.body, bodyErr = readJSONBody(r); bodyErr != nil {
		bodyErr.write(w)
		return
	}
	c.idemKey = r.Header.Get("Idempotency-Key")
	if c.idemKey != "" && r.Method == http.MethodPost {
		w.Header().Set("Idempotency-Key", c.idemKey)
	}
	expand, err := c.form.list("expand")
	c.expand = expansion{}
	for _, p := range expand {
		c.expand[p] = true
	}
	var body []byte
	if err == nil {
		var replayed bool
		body, replayed, err = s.handle(c, h)
		if replayed {
			w.Header().Set("Idempotent-Replayed", "true")
		}
	}
	if err != nil {
		s.log.Debug("stripemock request failed", "method", r.Method, "path", r.URL.Path, "error", err)
		var se *stripeError
		if !errors.As(err, &se) {
			se = &stripeError{status: http.StatusInternalServerError, Type: typeAPI, Message: err.Error()}
		}
		se.write(w)
		return
	}
	s.log.Debug("stripemock request", "method", r.Method, "path", r.URL.Path, "request_id", c.requestID)
	writeJSON(w, http.StatusOK, body)
}

// handle runs h under the lock, acting in the request's account, or
// replays the saved answer of a POST whose Idempotency-Key was seen before
// in that account (successful answers are saved). A request in an account
// that does not authorise the platform is refused.
func (s *Server) handle(c *call, h handler) (body []byte, replayed bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	idemKey := c.idemKey
	if c.account != "" {
		a, ok := s.accounts.get(c.account)
		if !ok || !a.Authorized {
			return nil, false, accountInvalid(c.key, c.account)
		}
		s.space = a.space
		defer func() { s.space = s.platform }()
		idemKey = c.account + "/" + idemKey // Stripe keeps keys per account
	}
	route := c.r.Method + " " + c.r.URL.Path
	keyed := c.idemKey != "" && c.r.Method == http.MethodPost
	if saved, ok := s.idempotent[idemKey]; ok && keyed {
		if saved.route != route {
			return nil, false, badRequest("Keys for idempotent requests can only be used for the same endpoint they were first used for.")
		}
		return saved.body, true, nil
	}
	c.now = s.clock.Now()
	if c.stale > 0 {
		defer s.staleView(time.Now().Add(-c.stale))()
	}
	res, err := h(c)
	if err != nil {
		return nil, false, err
	}
	if c.r.Method != http.MethodGet {
		s.syncEntitlements(c, c.now.Unix())
	}
	body, err = indented(res, s.lastBodySize)
	if err != nil {
		return nil, false, err
	}
	s.lastBodySize = len(body)
	if keyed {
		s.saveIdempotent(idemKey, savedResponse{route: route, body: body})
	}
	return body, false, nil
}

// keptIdempotent is how many idempotent answers the fake keeps. Stripe
// keeps a key for 24 hours; the newest 10,000 hold every retry a test
// makes, without holding every answer of a bench that seeds 100,000
// customers (half a gigabyte the GC would scan while the bench measures).
const keptIdempotent = 10000

func (s *Server) saveIdempotent(key string, saved savedResponse) {
	s.idempotent[key] = saved
	s.idempotentKeys = append(s.idempotentKeys, key)
	if len(s.idempotentKeys) > keptIdempotent {
		delete(s.idempotent, s.idempotentKeys[0])
		s.idempotentKeys = s.idempotentKeys[1:]
	}
}

// authenticate accepts the key as a bearer token or as the basic-auth user
// (curl -u sk_test_…:), like Stripe. It returns the key sent.
func (s *Server) authenticate(r *http.Request) (string, *stripeError) {
	key, isBearer := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !isBearer {
		key, _, _ = r.BasicAuth()
	}
	key = strings.TrimSpace(key)
	switch {
	case key == "":
		return key, &stripeError{status: http.StatusUnauthorized, Type: typeInvalidRequest,
			Message: "You did not provide an API key. You need to provide your API key in the Authorization header, using Bearer auth (e.g. 'Authorization: Bearer YOUR_SECRET_KEY')."}
	case !contains(s.apiKeys, key):
		return key, &stripeError{status: http.StatusUnauthorized, Type: typeInvalidRequest, Code: "api_key_invalid",
			Message: "Invalid API Key provided: " + maskKey(key)}
	}
	return key, nil
}

// maskKey shows only a key's last four characters, as Stripe's errors do.
func maskKey(key string) string {
	if len(key) <= 4 {
		return key
	}
	return strings.Repeat("*", len(key)-4) + key[len(key)-4:]
}

func (s *Server) unknownRoute(c *call) (obj, error) {
	return nil, &stripeError{status: http.StatusNotFound, Type: typeInvalidRequest,
		Message: "Unrecognized request URL (" + c.r.Method + ": " + c.r.URL.Path + "). stripemock serves only part of the Stripe API."}
}
