package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strconv"

	"github.com/billsync/billsync/reconcile"
)

// statusClientClosed is nginx's "client closed request": nobody reads it,
// but it keeps such requests apart from billsync's own failures.
const statusClientClosed = 499

// whose says whose failure an error is: it decides how the failure is
// logged, on every surface alike.
type whose int

const (
	theRequest  whose = iota // 4xx: the request cannot be done as sent; the reason is the message
	theClient                // hung up, short or slow body: never a server error, logged at debug
	notNow                   // billsync declines for now and says why: busy, stopping, no workers
	theProvider              // a provider failed or could not be asked: its outage, logged as a warning
	theStore                 // the database: billsync's own failure, logged as an error
	billsync                 // anything unexpected: a bug, logged as an error
)

// failure is what an error means for its answer.
type failure struct {
	code   int
	answer string // billsync_webhook_receipts_total's answer
	whose  whose
}

// failureOf maps an error to its HTTP status, its answer in
// billsync_webhook_receipts_total and whose failure it is, in one place.
func failureOf(err error) failure {
	var tooLarge *http.MaxBytesError
	f := failure{whose: theRequest}
	switch {
	case errors.Is(err, reconcile.ErrBadSignature), errors.Is(err, errUnauthorized), errors.Is(err, errAppUnauthorized):
		f.code = http.StatusUnauthorized
	case errors.Is(err, reconcile.ErrProviderUnavailable):
		f.code, f.whose = http.StatusServiceUnavailable, theProvider
	case errors.Is(err, reconcile.ErrTooLarge), errors.As(err, &tooLarge):
		f.code = http.StatusRequestEntityTooLarge
	case errors.Is(err, reconcile.ErrNotFound):
		f.code = http.StatusNotFound
	case errors.Is(err, errBadRequest), errors.Is(err, reconcile.ErrInvalid):
		f.code = http.StatusBadRequest
	case errors.Is(err, reconcile.ErrHeld), errors.Is(err, reconcile.ErrSweepRunning),
		errors.Is(err, reconcile.ErrInsufficient), errors.Is(err, reconcile.ErrAmbiguous):
		f.code = http.StatusConflict
	case errors.Is(err, reconcile.ErrKeyReused):
		f.code = http.StatusUnprocessableEntity
	case errors.Is(err, reconcile.ErrNotReconciled):
		f.code, f.whose = http.StatusBadGateway, theProvider // the customer stays queued
	case errors.Is(err, errNoReconciler), errors.Is(err, reconcile.ErrSweepsStopped):
		f.code, f.whose = http.StatusServiceUnavailable, notNow
	case errors.Is(err, errIncompleteBody) && errors.Is(err, os.ErrDeadlineExceeded):
		return failure{http.StatusRequestTimeout, "client_error", theClient}
	case errors.Is(err, errIncompleteBody):
		return failure{http.StatusBadRequest, "client_error", theClient}
	case errors.Is(err, context.Canceled):
		return failure{statusClientClosed, "client_error", theClient}
	case errors.Is(err, errBusy):
		return failure{http.StatusServiceUnavailable, "busy", notNow}
	case errors.Is(err, reconcile.ErrStoreUnavailable), errors.Is(err, context.DeadlineExceeded):
		f.code, f.whose = http.StatusServiceUnavailable, theStore
	default:
		f.code, f.whose = http.StatusInternalServerError, billsync
	}
	f.answer = strconv.Itoa(f.code)
	return f
}

// surface is who reads an error answer: the message policy is per
// surface, the status and the log line are not.
type surface int

const (
	// toProvider: a webhook receipt (and /readyz): terse text
	// saying whether it was stored and whether to retry, nothing of
	// billsync's inside.
	toProvider surface = iota
	// toAPI: the admin and app APIs: the reason a person or a program can
	// act on (ids, reasons, never a token); billsync's own failures say
	// only that they happened.
	toAPI
	// toConsole: a person at the console, on an HTML page.
	toConsole
)

// message is f's text for sf.
func (sf surface) message(f failure, err error, provider string) string {
	var tooLarge *http.MaxBytesError
	switch {
	case f.code == http.StatusRequestEntityTooLarge && errors.As(err, &tooLarge) && !errors.Is(err, reconcile.ErrTooLarge):
		return fmt.Sprintf("body larger than %d bytes", tooLarge.Limit)
	case f.code == http.StatusRequestEntityTooLarge:
		return "body larger than 1 MiB"
	case f.whose == theClient:
		return errIncompleteBody.Error()
	case errors.Is(err, errBusy):
		return "not stored: too many large bodies being read, retry later"
	case f.whose == theProvider && sf == toProvider:
		// The error says what could not be reached (Kinde's key set); the
		// answer names the provider only.
		return "not stored: " + cmp.Or(provider, "the provider") + " is unavailable, retry later"
	case f.whose == theStore && sf == toProvider:
		return "not stored: database unavailable, retry later"
	case f.whose == theStore && sf == toAPI:
		return "database unavailable, retry later"
	case f.whose == theStore:
		return "The database is unavailable or slow: try again in a moment."
	case f.whose == billsync && sf == toConsole:
		return "billsync failed to do this; the reason is in its log."
	case f.whose == billsync:
		return http.StatusText(f.code)
	}
	return err.Error() // the request's, a provider's or a refusal's reason
}

// explain logs err's failure once, by whose it is (billsync's own at
// error level, nobody else's), counts a webhook receipt's answer, sets
// Retry-After on a 503, and returns the status and sf's message. Every
// error answer goes through it: writeError writes it as JSON, the console
// as a page.
func (s *Server) explain(w http.ResponseWriter, r *http.Request, sf surface, err error) (int, string) {
	f := failureOf(err)
	provider := r.PathValue("provider")
	if sf == toProvider && provider != "" && s.metrics != nil {
		s.metrics.ObserveReceipt(provider, f.answer)
	}
	attrs := []slog.Attr{slog.String("path", r.URL.Path), slog.Any("error", err)}
	if provider != "" {
		attrs = append(attrs, slog.String("provider", provider))
	}
	ctx := r.Context()
	switch {
	case f.whose == theClient:
		s.log.LogAttrs(ctx, slog.LevelDebug, "client failed", attrs...)
	case f.code == http.StatusUnauthorized:
		s.log.LogAttrs(ctx, slog.LevelWarn, "refused: not authenticated", attrs...)
	case f.whose == notNow:
		s.log.LogAttrs(ctx, slog.LevelWarn, "declined for now", attrs...)
	case f.whose == theProvider && f.code == http.StatusBadGateway:
		s.log.LogAttrs(ctx, slog.LevelWarn, "reconcile failed at the provider", attrs...)
	case f.whose == theProvider:
		s.log.LogAttrs(ctx, slog.LevelWarn, "provider unavailable", attrs...)
	case f.whose == theStore:
		s.log.LogAttrs(ctx, slog.LevelError, "store unavailable", attrs...)
	case f.whose == billsync:
		s.log.LogAttrs(ctx, slog.LevelError, "request failed", attrs...)
	}
	if f.code == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "5")
	}
	return f.code, sf.message(f, err, provider)
}

// writeError answers err as JSON on sf (a webhook receipt, /readyz, the
// admin and app APIs), with what the app API's caller needs to act on
// beside the message: the balance when an allowance is short, the known
// features, the accounts a user reference names.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, sf surface, err error) {
	code, msg := s.explain(w, r, sf, err)
	body := map[string]any{"error": msg}
	var short *reconcile.InsufficientError
	if errors.As(err, &short) {
		body["balance"], body["amount"] = short.Balance, short.Amount
		if short.Feature != "" {
			body["feature"] = short.Feature
		}
	}
	var unknown *reconcile.UnknownFeatureError
	if errors.As(err, &unknown) {
		body["features"] = append([]string{}, unknown.Known...)
	}
	var amb *reconcile.AmbiguousError
	if errors.As(err, &amb) {
		accounts := make([]map[string]any, len(amb.Accounts))
		for i, a := range amb.Accounts {
			accounts[i] = map[string]any{"account_id": a.ID, "provider": a.Provider, "customer_id": a.CustomerID}
			if connected, _ := reconcile.SplitConnected(a.CustomerID); connected != "" {
				accounts[i]["connected_account"] = connected
			}
		}
		body["accounts"] = accounts
	}
	writeImporting(w, body, err)
	writeJSON(w, code, body)
}
