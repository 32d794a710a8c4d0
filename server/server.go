// Package server is billsync's HTTP, both ways. Inbound: webhook intake,
// health, readiness, Prometheus metrics, the admin API, the support
// console and the app API. Outbound: AppSender (apphook.go), which signs
// and sends the app its account changes for reconcile's deliverer.
//
// It verifies and stores; it never applies a webhook to an account, and it
// never answers 200 for a delivery that was not committed to the store. It
// holds no domain rule of its own: it calls reconcile (through the
// interfaces it declares) and maps errors to status codes in one place.
package server

import (
	"cmp"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/billsync/billsync/reconcile"
)

// MaxBodyBytes is the largest webhook body accepted (1 MiB).
const MaxBodyBytes = 1 << 20

// Verifier authenticates a provider's delivery and reads its event. It
// asks no provider's API for the event (a webhook is only stored; a Stripe
// thin event is stored under its related object and the worker resolves
// it): only a Kinde token whose key the cached key set lacks waits for one
// key-set fetch, within ctx. Errors wrap reconcile.ErrBadSignature (401:
// nothing stored) or reconcile.ErrProviderUnavailable (503 with
// Retry-After: nothing stored, the provider delivers again).
type Verifier interface {
	Provider() string
	Verify(ctx context.Context, header http.Header, body []byte) (reconcile.Receipt, error)
}

// Config holds what the server needs.
type Config struct {
	Logger    *slog.Logger
	Inbox     reconcile.Inbox
	Verifiers []Verifier
	// Ready reports whether the server can do its work (the database answers).
	Ready func(context.Context) error
	// Metrics, when set, counts webhook receipts and serves GET /metrics.
	Metrics *Metrics
	// StoreTimeout bounds what a webhook delivery, once its body is in,
	// waits on outside the process: verifying it (only a Kinde token whose
	// key is not cached waits, for the key set) and storing it, together,
	// so a delivery is answered within one StoreTimeout; and the readiness
	// check. Past it the answer is 503 with Retry-After, so a hung
	// database never holds a provider's request open; Stripe waits longer
	// than the default, 5 s.
	StoreTimeout time.Duration
	// BodyTimeout bounds reading a webhook body once its headers are in
	// (default 10 s). A slower body gets 408 and is counted as a client
	// error.
	BodyTimeout time.Duration
	// BodyMemory bounds the bytes all webhook bodies being read at once
	// may hold beyond their first 8 KiB each (default 16 MiB: sixteen
	// bodies of the maximum size). See readBody.
	BodyMemory int64
	// Admin configures /admin/api/… (absent without a token).
	Admin Admin
	// App configures the app API, /api/users/… (absent without a token).
	App App
}

// Defaults for Config's limits.
const (
	DefaultStoreTimeout = 5 * time.Second
	DefaultBodyTimeout  = 10 * time.Second
	DefaultBodyMemory   = 16 << 20
)

// Server routes billsync's HTTP requests.
type Server struct {
	log       *slog.Logger
	inbox     reconcile.Inbox
	verifiers map[string]Verifier
	ready     func(context.Context) error
	metrics   *Metrics
	mux       *http.ServeMux
	admin     Admin

	storeTimeout  time.Duration
	bodyTimeout   time.Duration
	bodyMemoryMax int64
	bodyMemory    atomic.Int64 // reserved by bodies being read (see readBody)
	bodiesReading atomic.Int64
}

// New returns a Server for cfg.
func New(cfg Config) *Server {
	s := &Server{
		log:       cfg.Logger,
		inbox:     cfg.Inbox,
		verifiers: make(map[string]Verifier, len(cfg.Verifiers)),
		ready:     cfg.Ready,
		metrics:   cfg.Metrics,
		mux:       http.NewServeMux(),

		storeTimeout:  cmp.Or(cfg.StoreTimeout, DefaultStoreTimeout),
		bodyTimeout:   cmp.Or(cfg.BodyTimeout, DefaultBodyTimeout),
		bodyMemoryMax: cmp.Or(cfg.BodyMemory, DefaultBodyMemory),
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	for _, v := range cfg.Verifiers {
		s.verifiers[v.Provider()] = v
	}
	s.mux.HandleFunc("POST /webhooks/{provider}", s.handleWebhook)
	// Stripe's Connect endpoint may have a URL of its own; a delivery to
	// either verifies against either endpoint's secrets.
	s.mux.HandleFunc("POST /webhooks/{provider}/connect", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("provider") != "stripe" {
			writeJSON(w, http.StatusNotFound, map[string]string{"error": "only Stripe has a Connect endpoint"})
			return
		}
		s.handleWebhook(w, r)
	})
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	s.mux.HandleFunc("GET /readyz", s.handleReady)
	s.mux.HandleFunc("GET /api/openapi.json", s.handleOpenAPI)
	if s.metrics != nil {
		s.mux.Handle("GET /metrics", s.metrics.handler())
	}
	s.routeAdmin(cfg.Admin)
	s.routeApp(cfg.App)
	return s
}

// ServeHTTP implements http.Handler. Every answer under /admin (the
// console's pages, the admin API's JSON, and the mux's own 404 and 405 for
// a path or method no route has) carries the console's headers: never
// cached, never framed, no script, no sniffing.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == "/admin" || strings.HasPrefix(r.URL.Path, "/admin/"):
		secureHeaders(w)
	case strings.HasPrefix(r.URL.Path, "/api/"):
		// A user's plan and balance: no browser or proxy keeps a copy.
		w.Header().Set("Cache-Control", "no-store")
	}
	s.mux.ServeHTTP(w, r)
}

func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	if s.ready != nil {
		ctx, cancel := context.WithTimeout(r.Context(), s.storeTimeout)
		defer cancel()
		if err := s.ready(ctx); err != nil {
			s.writeError(w, r, toProvider, err)
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v) // the client went away; nothing to do
}
