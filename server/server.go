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
	"errors"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/billsync/billsync/reconcile"
)

// MaxBodyBytes is the largest webhook body accepted (1 MiB).
const MaxBodyBytes = 1 << 20

// Verifier authenticates a provider's delivery and reads its event.
// Errors wrap reconcile.ErrBadSignature.
type Verifier interface {
	Provider() string
	Verify(header http.Header, body []byte) (reconcile.Delivery, error)
}

// ContextVerifier is a Verifier whose reading of an event may ask the
// provider's API (a Stripe thin event names an object whose customer takes
// one retrieve to learn). The intake calls it instead of Verify, with a
// context bounded by StoreTimeout. An error whose Unavailable method
// returns true means the provider could not be asked: the answer is 503
// with Retry-After, nothing is stored, and the provider delivers again.
type ContextVerifier interface {
	Verifier
	VerifyContext(ctx context.Context, header http.Header, body []byte) (reconcile.Delivery, error)
}

// providerUnavailable reports whether err says that the provider's API
// could not be asked (see ContextVerifier).
func providerUnavailable(err error) bool {
	var u interface{ Unavailable() bool }
	return errors.As(err, &u) && u.Unavailable()
}

// Config holds what the server needs.
type Config struct {
	Logger    *slog.Logger
	Inbox     reconcile.Inbox
	Verifiers []Verifier
	// Ready reports whether the server can do its work (the database answers).
	Ready func(context.Context) error
	// Metrics, when set, counts deliveries and serves GET /metrics.
	Metrics *Metrics
	// StoreTimeout bounds the database's part of a request (storing a
	// delivery, the readiness check). Past it the answer is 503 with
	// Retry-After, so a hung database never holds a provider's request
	// open; Stripe waits longer than the default, 5 s.
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
			s.writeError(w, r, err)
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// statusClientClosed is nginx's "client closed request": nobody reads it,
// but it keeps such requests apart from billsync's own failures.
const statusClientClosed = 499

// errorStatus maps a failure to its HTTP status and its answer in
// billsync_webhook_deliveries_total, in one place. Failures of the client
// (hung up, short or slow body) are "client_error", never a 5xx.
func errorStatus(err error) (code int, answer string) {
	switch {
	case errors.Is(err, reconcile.ErrBadSignature):
		code = http.StatusUnauthorized
	case providerUnavailable(err):
		code = http.StatusServiceUnavailable
	case errors.Is(err, reconcile.ErrTooLarge):
		code = http.StatusRequestEntityTooLarge
	case errors.Is(err, reconcile.ErrNotFound):
		code = http.StatusNotFound
	case errors.Is(err, errUnauthorized), errors.Is(err, errAppUnauthorized):
		code = http.StatusUnauthorized
	case errors.Is(err, errBadRequest), errors.Is(err, reconcile.ErrInvalid):
		code = http.StatusBadRequest
	case errors.Is(err, reconcile.ErrHeld), errors.Is(err, reconcile.ErrSweepRunning),
		errors.Is(err, reconcile.ErrInsufficient), errors.Is(err, reconcile.ErrAmbiguous):
		code = http.StatusConflict
	case errors.Is(err, reconcile.ErrKeyReused):
		code = http.StatusUnprocessableEntity
	case errors.Is(err, reconcile.ErrNotReconciled):
		code = http.StatusBadGateway // the provider failed; the customer stays queued
	case errors.Is(err, errNoReconciler), errors.Is(err, reconcile.ErrSweepsStopped):
		code = http.StatusServiceUnavailable
	case errors.Is(err, errIncompleteBody) && errors.Is(err, os.ErrDeadlineExceeded):
		return http.StatusRequestTimeout, "client_error"
	case errors.Is(err, errIncompleteBody):
		return http.StatusBadRequest, "client_error"
	case errors.Is(err, context.Canceled):
		return statusClientClosed, "client_error"
	case errors.Is(err, errBusy):
		return http.StatusServiceUnavailable, "busy"
	case errors.Is(err, reconcile.ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		code = http.StatusServiceUnavailable
	default:
		code = http.StatusInternalServerError
	}
	return code, strconv.Itoa(code)
}

// writeError answers with err's status. Only billsync's own failures are
// logged at error level; the message sent never includes secrets or
// payloads.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	code, answer := errorStatus(err)
	if p := r.PathValue("provider"); p != "" && s.metrics != nil {
		s.metrics.ObserveDelivery(p, answer)
	}
	msg := http.StatusText(code)
	switch {
	case answer == "client_error":
		s.log.Debug("client failed", slog.String("path", r.URL.Path), slog.Any("error", err))
		msg = errIncompleteBody.Error()
	case answer == "busy":
		s.log.Warn("refused delivery: body memory in use", slog.String("path", r.URL.Path), slog.Any("error", err))
		w.Header().Set("Retry-After", "5")
		msg = "not stored: too many large bodies being read, retry later"
	case code == http.StatusUnauthorized:
		s.log.Warn("refused delivery", slog.String("path", r.URL.Path), slog.Any("error", err))
		msg = err.Error()
	case code == http.StatusRequestEntityTooLarge:
		msg = "body larger than 1 MiB"
	case code == http.StatusServiceUnavailable && providerUnavailable(err):
		// The error says what could not be reached (Stripe's API for a thin
		// event, Kinde's key set); the answer names the provider only.
		provider := cmp.Or(r.PathValue("provider"), "the provider")
		s.log.Warn("refused delivery: provider unavailable", slog.String("provider", provider), slog.Any("error", err))
		w.Header().Set("Retry-After", "5")
		msg = "not stored: " + provider + " is unavailable, retry later"
	case code == http.StatusServiceUnavailable:
		s.log.Error("store unavailable", slog.String("path", r.URL.Path), slog.Any("error", err))
		w.Header().Set("Retry-After", "5")
		msg = "not stored: database unavailable, retry later"
	case code == http.StatusInternalServerError:
		s.log.Error("request failed", slog.String("path", r.URL.Path), slog.Any("error", err))
	}
	writeJSON(w, code, map[string]string{"error": msg})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v) // the client went away; nothing to do
}
