package kinde

import (
	"cmp"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
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
	// answered 2xx; default Kinde's (5 s, 30 s, 2 min, 10 min, 1 h, 4 h,
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

// Server is a fake Kinde business: its webhook key set, an OAuth token
// endpoint for M2M applications, the billing, users and organisations
// endpoints of the Management API, and a control API under /_mock/ that
// sets agreements, adds users and organisations and sends signed
// webhooks. Its zero value is not usable: build it with New.
type Server struct {
	opts Options
	keys *Keys
	mux  *http.ServeMux
	log  *slog.Logger

	mu         sync.Mutex
	agreements map[string][]Agreement        // by customer id
	users      []User                        // in the order Kinde lists them
	orgs       []Organization                // in the order Kinde lists them
	history    map[string][]agreementsChange // recent changes per customer, for StaleReads
	tokens     map[string]time.Time          // access token → expiry
	endpoints  []string
	faults     fault.State
	nextID     int
	deliveries []Delivery
	deliverer  *fault.Deliverer // sends the webhooks
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
		agreements: map[string][]Agreement{}, history: map[string][]agreementsChange{}, tokens: map[string]time.Time{},
	}
	schedule := make([]time.Duration, len(opts.RetrySchedule))
	for i, wait := range opts.RetrySchedule {
		schedule[i] = time.Duration(float64(wait) * opts.TimeFactor)
	}
	s.deliverer = fault.NewDeliverer(&http.Client{Timeout: 10 * time.Second}, schedule)
	s.faults.Set(opts.Faults)
	s.routes()
	return s, nil
}

// Keys returns the fake's webhook signing keys.
func (s *Server) Keys() *Keys { return s.keys }

// ServeHTTP serves the fake's API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Close stops sending webhooks (deliveries in flight are abandoned).
func (s *Server) Close() { s.deliverer.Close() }

func (s *Server) routes() {
	s.mux.HandleFunc("GET /.well-known/jwks", s.keys.ServeJWKS)
	s.mux.HandleFunc("GET /.well-known/jwks.json", s.keys.ServeJWKS)
	s.mux.HandleFunc("POST /oauth2/token", s.token)
	s.mux.HandleFunc("GET /api/v1/billing/agreements", s.api(s.listAgreements))
	s.mux.HandleFunc("GET /api/v1/billing/entitlements", s.api(s.listEntitlements))
	s.mux.HandleFunc("GET /api/v1/users", s.api(s.listUsers))
	s.mux.HandleFunc("GET /api/v1/organizations", s.api(s.listOrganizations))
	s.mux.HandleFunc("GET /api/v1/organization", s.api(s.getOrganization))

	s.mux.HandleFunc("PUT /_mock/customers/{id}/agreements", s.controlSetAgreements)
	s.mux.HandleFunc("POST /_mock/users", s.controlAddUser)
	s.mux.HandleFunc("POST /_mock/organizations", s.controlAddOrganization)
	s.mux.HandleFunc("POST /_mock/webhooks", s.controlAddEndpoint)
	s.mux.HandleFunc("POST /_mock/events", s.controlSendEvent)
	s.mux.HandleFunc("GET /_mock/faults", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, s.Faults()) })
	s.mux.HandleFunc("POST /_mock/faults", s.controlFaults)
	s.mux.HandleFunc("POST /_mock/keys/rotate", s.controlRotate)
	s.mux.HandleFunc("GET /_mock/deliveries", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, s.Deliveries()) })
}

// SetFaults replaces the fault knobs.
func (s *Server) SetFaults(f Faults) { s.faults.Set(f) }

// Faults returns the current fault knobs.
func (s *Server) Faults() Faults { return s.faults.Get() }

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
