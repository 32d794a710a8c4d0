package kinde

import (
	"bytes"
	"cmp"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/billsync/billsync/mocks/fault"
)

// Default credentials of the fake's machine-to-machine application.
const (
	DefaultClientID     = "billsync_m2m"
	DefaultClientSecret = "kinde_fake_secret_0123456789"
)

// Faults are the fault knobs the fake takes (package fault: the fake
// Stripe takes the same ones).
type Faults = fault.Faults

// Options configures a Server. Zero values take the defaults.
type Options struct {
	ClientID, ClientSecret string        // the M2M application's; defaults above
	TokenTTL               time.Duration // access tokens' lifetime; default 1 h
	// RetrySchedule is the wait before each retry of a webhook that was not
	// answered 200; default Kinde's (5 s, 30 s, 2 min, 10 min, 1 h, 4 h,
	// then every 12 h up to 36 h). TimeFactor scales it (0.001 turns an hour
	// into 3.6 s); default 1.
	RetrySchedule []time.Duration
	TimeFactor    float64
	// Faults are the same knobs as the fake Stripe's: copies, reordering,
	// drops, 5xx, 429 (with RateLimit-Reset), latency, a request rate.
	Faults Faults
	Now    func() time.Time // default time.Now
	Logger *slog.Logger
}

// kindeRetries is Kinde's documented webhook retry schedule.
var kindeRetries = []time.Duration{5 * time.Second, 30 * time.Second, 2 * time.Minute, 10 * time.Minute,
	time.Hour, 4 * time.Hour, 12 * time.Hour, 12 * time.Hour, 12 * time.Hour}

// Agreement is a customer's billing agreement (a plan subscription) as the
// fake holds it.
type Agreement struct {
	ID             string     `json:"id"`
	PlanCode       string     `json:"plan_code"`
	BillingGroupID string     `json:"billing_group_id,omitempty"`
	CreatedOn      time.Time  `json:"created_on"`
	ExpiresOn      *time.Time `json:"expires_on"` // nil: open-ended
	// PeriodStart and PeriodEnd are the current billing period, when set.
	PeriodStart *time.Time `json:"current_period_start,omitempty"`
	PeriodEnd   *time.Time `json:"current_period_end,omitempty"`
	// Entitlements are the features the agreement's plan grants; none
	// means one "units" feature without a limit (as before they could be
	// set).
	Entitlements []Entitlement `json:"entitlements,omitempty"`
}

// Entitlement is one feature an agreement grants, as Kinde's billing
// entitlements list it.
type Entitlement struct {
	FeatureCode string `json:"feature_code"`
	LimitMax    *int64 `json:"entitlement_limit_max"` // nil: no limit
}

// entitlementsOf returns what the agreement grants.
func entitlementsOf(a Agreement) []Entitlement {
	if len(a.Entitlements) == 0 {
		return []Entitlement{{FeatureCode: "units"}}
	}
	return a.Entitlements
}

// entitlementID is the id Kinde's list gives an agreement's entitlement.
func entitlementID(a Agreement, e Entitlement) string {
	return "entitlement_" + a.ID + "_" + e.FeatureCode
}

// Server is a fake Kinde business: its webhook key set, an OAuth token
// endpoint for M2M applications, the billing endpoints of the Management
// API, and a control API under /_mock/ that sets agreements and sends
// signed webhooks. Its zero value is not usable: build it with New.
type Server struct {
	opts Options
	keys *Keys
	mux  *http.ServeMux
	log  *slog.Logger

	mu         sync.Mutex
	agreements map[string][]Agreement // by customer id
	tokens     map[string]time.Time   // access token → expiry
	endpoints  []string
	faults     fault.State
	nextID     int
	deliveries []Delivery
	pending    sync.WaitGroup
	closed     chan struct{}
	client     *http.Client
}

// Delivery is one webhook attempt the fake made.
type Delivery struct {
	WebhookID string `json:"webhook_id"`
	EventID   string `json:"event_id"`
	Type      string `json:"type"`
	URL       string `json:"url"`
	Status    int    `json:"status"` // 0 when no answer came
	Attempt   int    `json:"attempt"`
}

// New returns a fake Kinde with a fresh key set.
func New(opts Options) (*Server, error) {
	if err := opts.Faults.Validate(); err != nil {
		return nil, err
	}
	keys, err := NewKeys()
	if err != nil {
		return nil, err
	}
	opts.ClientID = cmp.Or(opts.ClientID, DefaultClientID)
	opts.ClientSecret = cmp.Or(opts.ClientSecret, DefaultClientSecret)
	opts.TokenTTL = cmp.Or(opts.TokenTTL, time.Hour)
	opts.TimeFactor = cmp.Or(opts.TimeFactor, 1)
	if opts.RetrySchedule == nil {
		opts.RetrySchedule = kindeRetries
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	s := &Server{
		opts: opts, keys: keys, mux: http.NewServeMux(),
		log:        cmp.Or(opts.Logger, slog.New(slog.DiscardHandler)),
		agreements: map[string][]Agreement{}, tokens: map[string]time.Time{},
		closed: make(chan struct{}), client: &http.Client{Timeout: 10 * time.Second},
	}
	s.faults.Set(opts.Faults)
	s.routes()
	return s, nil
}

// Keys returns the fake's webhook signing keys.
func (s *Server) Keys() *Keys { return s.keys }

// ServeHTTP serves the fake's API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Close stops sending webhooks (deliveries in flight give up).
func (s *Server) Close() {
	select {
	case <-s.closed:
	default:
		close(s.closed)
	}
	s.pending.Wait()
}

func (s *Server) routes() {
	s.mux.HandleFunc("GET /.well-known/jwks", s.keys.ServeJWKS)
	s.mux.HandleFunc("GET /.well-known/jwks.json", s.keys.ServeJWKS)
	s.mux.HandleFunc("POST /oauth2/token", s.token)
	s.mux.HandleFunc("GET /api/v1/billing/agreements", s.api(s.listAgreements))
	s.mux.HandleFunc("GET /api/v1/billing/entitlements", s.api(s.listEntitlements))

	s.mux.HandleFunc("PUT /_mock/customers/{id}/agreements", s.controlSetAgreements)
	s.mux.HandleFunc("POST /_mock/webhooks", s.controlAddEndpoint)
	s.mux.HandleFunc("POST /_mock/events", s.controlSendEvent)
	s.mux.HandleFunc("GET /_mock/faults", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, s.Faults()) })
	s.mux.HandleFunc("POST /_mock/faults", s.controlFaults)
	s.mux.HandleFunc("POST /_mock/keys/rotate", s.controlRotate)
	s.mux.HandleFunc("GET /_mock/deliveries", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, s.Deliveries()) })
}

// token is the client-credentials grant: the right client id, secret and
// audience (this server's /api) get a bearer token that expires.
func (s *Server) token(w http.ResponseWriter, r *http.Request) {
	if fault := s.injectFault(); fault != nil {
		fault(w)
		return
	}
	if err := r.ParseForm(); err != nil {
		writeJSON(w, http.StatusBadRequest, oauthError("invalid_request", err.Error()))
		return
	}
	f := r.PostForm
	switch {
	case f.Get("grant_type") != "client_credentials":
		writeJSON(w, http.StatusBadRequest, oauthError("unsupported_grant_type", "only client_credentials"))
		return
	case f.Get("client_id") != s.opts.ClientID || f.Get("client_secret") != s.opts.ClientSecret:
		writeJSON(w, http.StatusUnauthorized, oauthError("invalid_client", "client authentication failed"))
		return
	case f.Get("audience") != "http://"+r.Host+"/api" && f.Get("audience") != "https://"+r.Host+"/api":
		writeJSON(w, http.StatusBadRequest, oauthError("invalid_request", "audience must be this domain's /api"))
		return
	}
	token := randomHex(24)
	s.mu.Lock()
	s.tokens[token] = s.opts.Now().Add(s.opts.TokenTTL)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"access_token": token, "token_type": "bearer",
		"expires_in": int(s.opts.TokenTTL.Seconds()), "scope": "read:billing_agreements read:billing_entitlements"})
}

func oauthError(code, desc string) map[string]string {
	return map[string]string{"error": code, "error_description": desc}
}

// api wraps a Management API handler: latency and faults first, then the
// bearer token.
func (s *Server) api(h func(r *http.Request) (any, int)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if d := s.Faults().Latency; d > 0 {
			time.Sleep(d)
		}
		if fault := s.injectFault(); fault != nil {
			fault(w)
			return
		}
		token, ok := bearer(r)
		s.mu.Lock()
		expiry, known := s.tokens[token]
		s.mu.Unlock()
		if !ok || !known || !s.opts.Now().Before(expiry) {
			writeJSON(w, http.StatusUnauthorized, map[string]any{"errors": []map[string]string{{"code": "TOKEN_INVALID", "message": "Invalid or expired token"}}})
			return
		}
		body, status := h(r)
		writeJSON(w, status, body)
	}
}

func bearer(r *http.Request) (string, bool) {
	const prefix = "Bearer "
	h := r.Header.Get("Authorization")
	if len(h) <= len(prefix) || h[:len(prefix)] != prefix {
		return "", false
	}
	return h[len(prefix):], true
}

// page cuts items (ordered by id) after starting_after, page_size of them
// (default 10, at most 500), as Kinde's list endpoints page.
func page[T any](r *http.Request, items []T, id func(T) string) ([]T, bool, error) {
	size := 10
	if v := r.URL.Query().Get("page_size"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 500 {
			return nil, false, fmt.Errorf("page_size must be 1-500, got %q", v)
		}
		size = n
	}
	start := 0
	if after := r.URL.Query().Get("starting_after"); after != "" {
		i := slices.IndexFunc(items, func(v T) bool { return id(v) == after })
		if i < 0 {
			return nil, false, fmt.Errorf("starting_after %q is not in the list", after)
		}
		start = i + 1
	}
	end := min(start+size, len(items))
	return items[start:end], end < len(items), nil
}

func (s *Server) listAgreements(r *http.Request) (any, int) {
	customer := r.URL.Query().Get("customer_id")
	if customer == "" {
		return apiError("CUSTOMER_ID_REQUIRED", "customer_id is required"), http.StatusBadRequest
	}
	s.mu.Lock()
	all := slices.Clone(s.agreements[customer])
	s.mu.Unlock()
	items, more, err := page(r, all, func(a Agreement) string { return a.ID })
	if err != nil {
		return apiError("INVALID_PAGING", err.Error()), http.StatusBadRequest
	}
	out := make([]map[string]any, 0, len(items))
	for _, a := range items {
		out = append(out, agreementJSON(a))
	}
	return map[string]any{"code": "OK", "message": "Success", "has_more": more, "agreements": out}, http.StatusOK
}

func agreementJSON(a Agreement) map[string]any {
	m := map[string]any{"id": a.ID, "plan_code": a.PlanCode, "billing_group_id": a.BillingGroupID,
		"created_on": a.CreatedOn.Format(time.RFC3339), "expires_on": nil,
		"entitlements": []map[string]string{}}
	for _, e := range entitlementsOf(a) {
		m["entitlements"] = append(m["entitlements"].([]map[string]string), map[string]string{"feature_code": e.FeatureCode, "entitlement_id": entitlementID(a, e)})
	}
	if a.ExpiresOn != nil {
		m["expires_on"] = a.ExpiresOn.Format(time.RFC3339)
	}
	if a.PeriodStart != nil && a.PeriodEnd != nil {
		m["current_period_start"], m["current_period_end"] = a.PeriodStart.Format(time.RFC3339), a.PeriodEnd.Format(time.RFC3339)
	}
	return m
}

func (s *Server) listEntitlements(r *http.Request) (any, int) {
	customer := r.URL.Query().Get("customer_id")
	if customer == "" {
		return apiError("CUSTOMER_ID_REQUIRED", "customer_id is required"), http.StatusBadRequest
	}
	now := s.opts.Now()
	s.mu.Lock()
	agreements := slices.Clone(s.agreements[customer])
	s.mu.Unlock()
	plans := []map[string]string{}
	all := []map[string]any{}
	for _, a := range agreements {
		if a.ExpiresOn != nil && !a.ExpiresOn.After(now) {
			continue
		}
		plans = append(plans, map[string]string{"code": a.PlanCode, "subscribed_on": a.CreatedOn.Format(time.RFC3339)})
		for _, e := range entitlementsOf(a) {
			all = append(all, map[string]any{"id": entitlementID(a, e), "feature_code": e.FeatureCode, "feature_name": e.FeatureCode,
				"price_name": a.PlanCode, "unit_amount": nil, "fixed_charge": nil,
				"entitlement_limit_max": e.LimitMax, "entitlement_limit_min": nil})
		}
	}
	items, more, err := page(r, all, func(e map[string]any) string { return e["id"].(string) })
	if err != nil {
		return apiError("INVALID_PAGING", err.Error()), http.StatusBadRequest
	}
	return map[string]any{"code": "OK", "message": "Success", "has_more": more, "entitlements": items, "plans": plans}, http.StatusOK
}

func apiError(code, msg string) map[string]any {
	return map[string]any{"errors": []map[string]string{{"code": code, "message": msg}}}
}

// SetAgreements replaces a customer's agreements; missing ids and creation
// times are filled in. It returns them as stored.
func (s *Server) SetAgreements(customer string, agreements []Agreement) []Agreement {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.opts.Now().UTC().Truncate(time.Second)
	stored := make([]Agreement, len(agreements))
	for i, a := range agreements {
		if a.ID == "" {
			s.nextID++
			a.ID = fmt.Sprintf("agreement_%06d", s.nextID)
		}
		if a.CreatedOn.IsZero() {
			a.CreatedOn = now
		}
		stored[i] = a
	}
	slices.SortFunc(stored, func(a, b Agreement) int { return cmp.Compare(a.ID, b.ID) })
	s.agreements[customer] = stored
	return slices.Clone(stored)
}

// Agreements returns a customer's agreements.
func (s *Server) Agreements(customer string) []Agreement {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.agreements[customer])
}

func (s *Server) controlSetAgreements(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Agreements []Agreement `json:"agreements"`
	}
	if err := decode(r, &body); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"agreements": s.SetAgreements(r.PathValue("id"), body.Agreements)})
}

// AddWebhookEndpoint registers url for every webhook the fake sends.
func (s *Server) AddWebhookEndpoint(url string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.endpoints = append(s.endpoints, url)
}

func (s *Server) controlAddEndpoint(w http.ResponseWriter, r *http.Request) {
	var body struct {
		URL string `json:"url"`
	}
	if err := decode(r, &body); err != nil || body.URL == "" {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "want {\"url\": \"http://…\"}"})
		return
	}
	s.AddWebhookEndpoint(body.URL)
	writeJSON(w, http.StatusOK, map[string]string{"url": body.URL})
}

// Event is a webhook the fake sends: its type, the customer it is about,
// extra data fields, and when the change happened (default now).
type Event struct {
	Type       string         `json:"type"`
	CustomerID string         `json:"customer_id"`
	Data       map[string]any `json:"data,omitempty"`
	At         time.Time      `json:"event_timestamp,omitzero"`
}

// Sent is what SendEvent sent: the ids a receiver deduplicates on.
type Sent struct {
	WebhookID string `json:"webhook_id"`
	EventID   string `json:"event_id"`
}

// SendEvent signs ev as Kinde signs a webhook and delivers it to every
// registered endpoint, in the background, with the fault knobs applied
// (drop, copies, reordering) and retries on Kinde's schedule until answered
// 200. WaitIdle waits for it.
func (s *Server) SendEvent(ev Event) (Sent, error) {
	now := s.opts.Now().UTC()
	at := ev.At
	if at.IsZero() {
		at = now
	}
	data := map[string]any{"customer_id": ev.CustomerID}
	for k, v := range ev.Data {
		data[k] = v
	}
	sent := Sent{WebhookID: "msg_" + randomHex(12), EventID: "event_" + randomHex(12)}
	token, err := s.keys.Sign(map[string]any{
		"type": ev.Type, "event_id": sent.EventID, "source": "admin", "data": data,
		"timestamp": now.Format(time.RFC3339Nano), "event_timestamp": at.Format(time.RFC3339Nano),
	})
	if err != nil {
		return Sent{}, err
	}
	s.mu.Lock()
	endpoints := slices.Clone(s.endpoints)
	f := s.faults.Get()
	drop := s.faults.Chance(f.DropRate)
	delays := make([]time.Duration, 1+max(f.DuplicateCopies, 0))
	for i := range delays {
		delays[i] = s.faults.Delay(f.ReorderDelay)
	}
	s.mu.Unlock()
	if drop {
		return sent, nil
	}
	for _, url := range endpoints {
		for _, delay := range delays {
			s.pending.Add(1)
			go s.deliver(url, token, sent, ev.Type, delay)
		}
	}
	return sent, nil
}

func (s *Server) controlSendEvent(w http.ResponseWriter, r *http.Request) {
	var ev Event
	if err := decode(r, &ev); err != nil || ev.Type == "" {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "want {\"type\", \"customer_id\", \"data\"}"})
		return
	}
	sent, err := s.SendEvent(ev)
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, sent)
}

// deliver posts one copy of a webhook until it is answered 200 or the
// retry schedule runs out.
func (s *Server) deliver(url string, token []byte, sent Sent, typ string, delay time.Duration) {
	defer s.pending.Done()
	waits := append([]time.Duration{delay}, s.opts.RetrySchedule...)
	for attempt, wait := range waits {
		if attempt > 0 {
			wait = time.Duration(float64(wait) * s.opts.TimeFactor)
		}
		select {
		case <-s.closed:
			return
		case <-time.After(wait):
		}
		status := s.post(url, token, sent.WebhookID)
		s.mu.Lock()
		s.deliveries = append(s.deliveries, Delivery{WebhookID: sent.WebhookID, EventID: sent.EventID, Type: typ,
			URL: url, Status: status, Attempt: attempt + 1})
		s.mu.Unlock()
		if status == http.StatusOK {
			return
		}
	}
	s.log.Warn("kinde fake: webhook given up", "webhook_id", sent.WebhookID, "url", url)
}

func (s *Server) post(url string, token []byte, webhookID string) int {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(token))
	if err != nil {
		return 0
	}
	req.Header.Set("Content-Type", "application/jwt")
	req.Header.Set("webhook-id", webhookID)
	resp, err := s.client.Do(req)
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// Deliveries returns every webhook attempt so far.
func (s *Server) Deliveries() []Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.deliveries)
}

// WaitIdle waits until every webhook sent so far is delivered or given up.
func (s *Server) WaitIdle(ctx context.Context) error {
	done := make(chan struct{})
	go func() { s.pending.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("kinde fake: webhooks still being delivered: %w", ctx.Err())
	}
}

// SetFaults replaces the fault knobs.
func (s *Server) SetFaults(f Faults) { s.faults.Set(f) }

// Faults returns the current fault knobs.
func (s *Server) Faults() Faults { return s.faults.Get() }

func (s *Server) controlFaults(w http.ResponseWriter, r *http.Request) {
	var f Faults
	if err := decode(r, &f); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	if err := f.Validate(); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	s.SetFaults(f)
	writeJSON(w, http.StatusOK, f)
}

func (s *Server) controlRotate(w http.ResponseWriter, r *http.Request) {
	kid, err := s.keys.Rotate()
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"kid": kid})
}

// injectFault decides whether a request fails: 429 with RateLimit-Reset
// (seconds, as Kinde sends it) over the rate or by chance, or a 500. A
// failed request changes nothing.
func (s *Server) injectFault() func(http.ResponseWriter) {
	switch failure, f := s.faults.Request(); failure {
	case fault.RateLimited:
		reset := max(1, int(math.Ceil(cmp.Or(f.RetryAfter, time.Second).Seconds())))
		return func(w http.ResponseWriter) {
			w.Header().Set("RateLimit-Reset", strconv.Itoa(reset))
			writeJSON(w, http.StatusTooManyRequests, apiError("TOO_MANY_REQUESTS", "Request rate limit exceeded"))
		}
	case fault.ServerError:
		return func(w http.ResponseWriter) {
			writeJSON(w, http.StatusInternalServerError, apiError("INTERNAL_ERROR", "fault injected by the fake Kinde"))
		}
	}
	return nil
}

func decode(r *http.Request, v any) error {
	dec := json.NewDecoder(io.LimitReader(r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("request body: %w", err)
	}
	return nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := crand.Read(b); err != nil {
		panic(errors.New("kinde fake: no randomness"))
	}
	return hex.EncodeToString(b)
}
