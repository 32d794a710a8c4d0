package server

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/billsync/billsync/reconcile"
)

// ImportStates is what the app API reads to tell an unknown user "not a
// customer" from "not known yet" (store.Store implements it).
type ImportStates interface {
	// Imports reports each provider's import state, in order.
	Imports(ctx context.Context, providers []string) ([]reconcile.ImportState, error)
}

// ImportHeader is the header of an app API 404 for an unknown user while a
// provider's import has not completed: ImportRunning while a run lists the
// provider's customers now, ImportPending when none does yet (or it failed
// and waits to be started again). Absent once every provider is imported:
// the user is then no customer.
const (
	ImportHeader  = "Billsync-Import"
	ImportRunning = "running"
	ImportPending = "pending"
)

// DefaultImportStateTTL is how long the app API reuses the import state it
// read: every unknown user's answer needs it, and it changes once a page.
const DefaultImportStateTTL = time.Second

// importWatch reads the import states for the app API's 404s, at most once
// per ttl.
type importWatch struct {
	store     ImportStates
	providers []string
	ttl       time.Duration

	mu     sync.Mutex
	readAt time.Time
	states []reconcile.ImportState
}

// current returns the providers' import states, read again when older
// than ttl.
func (w *importWatch) current(ctx context.Context) ([]reconcile.ImportState, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.states != nil && time.Since(w.readAt) < w.ttl {
		return w.states, nil
	}
	states, err := w.store.Imports(ctx, w.providers)
	if err != nil {
		return nil, err
	}
	w.states, w.readAt = states, time.Now()
	return states, nil
}

// absent returns err, an unknown user's ErrNotFound, as an *importingError
// while the import of provider (any configured one when "") has not
// completed; other errors, and every error once imported, as they are.
func (w *importWatch) absent(ctx context.Context, err error, provider string) error {
	if w == nil || !errors.Is(err, reconcile.ErrNotFound) {
		return err
	}
	states, readErr := w.current(ctx)
	if readErr != nil {
		// Whether the user is no customer cannot be told: not a plain
		// 404, but the read's failure (a 503 the app retries).
		return fmt.Errorf("user unknown, and whether an import is pending could not be read: %w", readErr)
	}
	var pending []reconcile.ImportState
	for _, st := range states {
		if st.Pending() && (provider == "" || provider == st.Provider) {
			pending = append(pending, st)
		}
	}
	if len(pending) == 0 {
		return err
	}
	return &importingError{err: err, states: pending, now: time.Now()}
}

// importingError is an unknown user's ErrNotFound while an import has not
// completed: writeError adds ImportHeader and each import's progress.
type importingError struct {
	err    error
	states []reconcile.ImportState // the pending ones
	now    time.Time
}

func (e *importingError) Error() string {
	parts := make([]string, len(e.states))
	for i, st := range e.states {
		parts[i] = importText(st, e.now)
	}
	return e.err.Error() + "; the user may not be known yet: " + strings.Join(parts, "; ")
}

func (e *importingError) Unwrap() error { return e.err }

// header is ImportHeader's value: running when a run lists now.
func (e *importingError) header() string {
	for _, st := range e.states {
		if st.Running != nil {
			return ImportRunning
		}
	}
	return ImportPending
}

// importText says where st's import stands, for the error message.
func importText(st reconcile.ImportState, now time.Time) string {
	r := st.Running
	if r == nil {
		return st.Provider + "'s import has not completed and is not running now"
	}
	s := fmt.Sprintf("%s's %s is running: %d customers seen", st.Provider, r.Kind, r.Seen)
	if r.Progress != nil {
		s += fmt.Sprintf(", %.0f%% done", *r.Progress*100)
	}
	if left, ok := r.Left(now); ok {
		s += ", about " + left.Round(time.Second).String() + " left"
	}
	return s
}

// importAnswer is one pending import in an app API 404 (imports).
type importAnswer struct {
	Provider  string     `json:"provider"`
	Status    string     `json:"status"` // ImportRunning or ImportPending
	Kind      string     `json:"kind,omitempty"`
	StartedAt *time.Time `json:"started_at,omitempty"`
	Seen      int        `json:"seen"`
	// Progress is the share of the listing done (0..1), absent when the
	// provider's listing cannot tell.
	Progress *float64 `json:"progress,omitempty"`
	Rate     float64  `json:"rate"` // customers listed a second so far
	// ETASeconds is the time left at that pace, absent when unknown.
	ETASeconds *int64 `json:"eta_seconds,omitempty"`
}

func importAnswers(e *importingError) []importAnswer {
	out := make([]importAnswer, len(e.states))
	for i, st := range e.states {
		a := importAnswer{Provider: st.Provider, Status: ImportPending}
		if r := st.Running; r != nil {
			started := r.StartedAt.UTC()
			a.Status, a.Kind, a.StartedAt, a.Seen, a.Progress = ImportRunning, r.Kind, &started, r.Seen, r.Progress
			a.Rate = math.Round(r.Rate(e.now)*10) / 10
			if left, ok := r.Left(e.now); ok {
				secs := int64(math.Ceil(left.Seconds()))
				a.ETASeconds = &secs
			}
		}
		out[i] = a
	}
	return out
}

// writeImporting adds what e says to an error answer's header and body.
func writeImporting(w http.ResponseWriter, body map[string]any, err error) {
	var e *importingError
	if errors.As(err, &e) {
		w.Header().Set(ImportHeader, e.header())
		body["imports"] = importAnswers(e)
	}
}
