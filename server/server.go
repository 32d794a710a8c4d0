// Package server is billsync's HTTP surface: webhook intake, health,
// readiness and Prometheus metrics (later: admin API and page, app API).
//
// It verifies and stores; it never applies a webhook to an account, and it
// never answers 200 for a delivery that was not committed to the store.
package server

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"

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

// Config holds what the server needs.
type Config struct {
	Logger    *slog.Logger
	Inbox     reconcile.Inbox
	Verifiers []Verifier
	// Ready reports whether the server can do its work (the database answers).
	Ready func(context.Context) error
	// Metrics, when set, counts deliveries and serves GET /metrics.
	Metrics *Metrics
}

// Server routes billsync's HTTP requests.
type Server struct {
	log       *slog.Logger
	inbox     reconcile.Inbox
	verifiers map[string]Verifier
	ready     func(context.Context) error
	metrics   *Metrics
	mux       *http.ServeMux
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
	if s.metrics != nil {
		s.mux.Handle("GET /metrics", s.metrics.handler())
	}
	return s
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	if s.ready != nil {
		if err := s.ready(r.Context()); err != nil {
			s.writeError(w, r, err)
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// errorStatus maps domain failures to HTTP status codes, in one place.
func errorStatus(err error) int {
	var tooBig *http.MaxBytesError
	switch {
	case errors.Is(err, reconcile.ErrBadSignature):
		return http.StatusUnauthorized
	case errors.Is(err, reconcile.ErrTooLarge), errors.As(err, &tooBig):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, reconcile.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, reconcile.ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable
	default:
		return http.StatusInternalServerError
	}
}

// writeError answers with err's status. Only unexpected errors are logged
// at error level; the message sent never includes secrets or payloads.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	code := errorStatus(err)
	if p := r.PathValue("provider"); p != "" && s.metrics != nil {
		s.metrics.ObserveDelivery(p, strconv.Itoa(code))
	}
	msg := http.StatusText(code)
	switch code {
	case http.StatusUnauthorized:
		s.log.Warn("refused delivery", slog.String("path", r.URL.Path), slog.Any("error", err))
		msg = err.Error()
	case http.StatusRequestEntityTooLarge:
		msg = "body larger than 1 MiB"
	case http.StatusServiceUnavailable:
		s.log.Error("store unavailable", slog.String("path", r.URL.Path), slog.Any("error", err))
		w.Header().Set("Retry-After", "5")
		msg = "not stored: database unavailable, retry later"
	case http.StatusInternalServerError:
		s.log.Error("request failed", slog.String("path", r.URL.Path), slog.Any("error", err))
	}
	writeJSON(w, code, map[string]string{"error": msg})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v) // the client went away; nothing to do
}
