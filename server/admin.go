package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/billsync/billsync/reconcile"
)

// AdminStore is what the admin API reads (store.Store implements it).
type AdminStore interface {
	FindAccounts(ctx context.Context, q string) ([]reconcile.Account, error)
	AccountByID(ctx context.Context, id int64) (reconcile.Account, error)
	AccountDetail(ctx context.Context, id int64) (reconcile.AccountDetail, error)
	Event(ctx context.Context, id int64) (reconcile.StoredEvent, error)
	Events(ctx context.Context, status reconcile.EventStatus, limit int) ([]reconcile.StoredEvent, error)
	SweepRuns(ctx context.Context, limit int) ([]reconcile.SweepRecord, error)
	EventsFeedStates(ctx context.Context) ([]reconcile.EventsFeedState, error)
	// ConnectedAccountViews lists Stripe Connect's accounts (at most limit).
	ConnectedAccountViews(ctx context.Context, limit int) ([]reconcile.ConnectedAccountView, error)
	EventPayload(ctx context.Context, id int64) ([]byte, error)
	Retries(ctx context.Context, limit int) ([]reconcile.Retry, error)
	// Overview is the console's first page (store.Store.Overview).
	Overview(ctx context.Context) (reconcile.Overview, error)
	// The console's sessions, by their hash (see sessions).
	StartSession(ctx context.Context, hash []byte, ttl time.Duration) error
	SessionActive(ctx context.Context, hash []byte) (bool, error)
	EndSession(ctx context.Context, hash []byte) error
}

// Sweeps starts sweeps in the background (reconcile.SweepRunner
// implements it): one per provider, each refused with
// reconcile.ErrSweepRunning while that provider's sweep runs.
type Sweeps interface {
	Start(ctx context.Context) ([]reconcile.SweepStart, error)
	// StartAccount starts the sweep of one Stripe Connect account's
	// customers: reconcile.ErrSweepRunning while it runs, an error
	// wrapping reconcile.ErrInvalid for an account not served.
	StartAccount(ctx context.Context, account string) (reconcile.SweepStart, error)
}

// Reconciler reconciles one customer now (reconcile.Worker implements it).
type Reconciler interface {
	ReconcileNow(ctx context.Context, req reconcile.Request) (reconcile.Outcome, error)
}

// Admin configures the admin API. Without a Token its routes do not
// exist (404): an API that changes accounts is never open by default.
type Admin struct {
	Token string
	Store AdminStore
	// Reconciler runs resyncs and replays; nil (a process without
	// workers) answers them 503.
	Reconciler Reconciler
	// Sweeps starts the sweeps POST /admin/api/sweeps and the console
	// ask for; nil answers 503 like Reconciler.
	Sweeps Sweeps
	// ProviderLimits are this process's provider request limits (requests
	// per second, by provider), drawn on the overview's request charts.
	ProviderLimits map[string]float64
	// EventsFeeds are the providers whose events feed this process runs:
	// the overview shows only their feeds' signals (a feed turned off
	// leaves its last state in the database, its poll ageing).
	EventsFeeds []string
	// Changes shows what the app was told (the console's account changes,
	// Deliveries page and oldest undelivered change); nil hides them.
	Changes ChangeConsoleStore
}

// Audit log actors of the reconciles the admin API and the console run.
const (
	adminActor   = "admin-api"
	consoleActor = "admin-console"
)

// eventsLimit bounds GET /admin/api/events.
const eventsLimit = 200

// Admin API failures of the request itself, mapped in failureOf.
var (
	errUnauthorized = errors.New("missing or wrong admin token: send Authorization: Bearer <BILLSYNC_ADMIN_TOKEN>")
	errBadRequest   = errors.New("bad request")
	errNoReconciler = errors.New("this process runs no workers (-workers 0): run the resync on one that does, or use 'billsync resync'")
)

func (s *Server) routeAdmin(a Admin) {
	if a.Token == "" || a.Store == nil {
		return
	}
	s.admin = a
	authorized := bearer(a.Token)
	handle := func(pattern string, h func(*http.Request) (any, error)) {
		s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			if !authorized(r) {
				s.writeError(w, r, toAPI, errUnauthorized)
				return
			}
			v, err := h(r)
			if err != nil {
				s.writeError(w, r, toAPI, err)
				return
			}
			writeJSON(w, http.StatusOK, v)
		})
	}
	handle("GET /admin/api/accounts", s.adminFind)
	handle("GET /admin/api/accounts/{id}", s.adminAccount)
	handle("POST /admin/api/accounts/{id}/resync", s.adminResync)
	handle("POST /admin/api/events/{id}/replay", s.adminReplay)
	handle("GET /admin/api/events", s.adminEvents)
	handle("GET /admin/api/retries", s.adminRetries)
	handle("GET /admin/api/sweeps", s.adminSweeps)
	handle("POST /admin/api/sweeps", s.adminStartSweep)
	s.routeConsole(a.Token)
}

func (s *Server) adminRetries(r *http.Request) (any, error) {
	retries, err := s.admin.Store.Retries(r.Context(), eventsLimit)
	return map[string]any{"retries": retries}, err
}

// sweepsLimit bounds GET /admin/api/sweeps.
const sweepsLimit = 50

func (s *Server) adminSweeps(r *http.Request) (any, error) {
	runs, err := s.admin.Store.SweepRuns(r.Context(), sweepsLimit)
	return map[string]any{"sweeps": runs}, err
}

// adminStartSweep starts a sweep of each provider in the background (it
// can take minutes) and answers at once with each provider's run, or
// why it did not start; 409 when none started because each is running.
// Their outcome is in GET /admin/api/sweeps and in the log. A sweep cut
// short by a shutdown stays running and the next one resumes it.
func (s *Server) adminStartSweep(r *http.Request) (any, error) {
	if account := r.URL.Query().Get("stripe_account"); account != "" {
		return s.adminStartAccountSweep(r.Context(), account)
	}
	starts, err := s.startSweep(r.Context())
	if err != nil {
		return nil, err
	}
	type startJSON struct {
		Provider string `json:"provider"`
		Started  bool   `json:"started"`
		Run      int64  `json:"run,omitempty"`
		Resumed  bool   `json:"resumed,omitempty"`
		Error    string `json:"error,omitempty"`
	}
	out := make([]startJSON, len(starts))
	for i, st := range starts {
		out[i] = startJSON{Provider: st.Provider, Started: st.Err == nil, Run: st.Run.ID, Resumed: st.Run.Resumed}
		switch {
		case errors.Is(st.Err, reconcile.ErrSweepRunning), errors.Is(st.Err, reconcile.ErrSweepsStopped):
			out[i].Error = st.Err.Error()
		case st.Err != nil:
			// billsync's own failure: logged by startSweep, a generic word here.
			out[i].Error = "could not start: see billsync's log"
		}
	}
	return map[string]any{"sweeps": out, "see": "GET /admin/api/sweeps"}, nil
}

// adminStartAccountSweep starts the sweep of one Stripe Connect account
// (?stripe_account=acct_…) in the background and answers at once with its
// run: 409 while that account's sweep runs, 400 for an account not served.
func (s *Server) adminStartAccountSweep(ctx context.Context, account string) (any, error) {
	if s.admin.Sweeps == nil {
		return nil, errNoReconciler
	}
	st, err := s.admin.Sweeps.StartAccount(ctx, account)
	if err != nil {
		if !errors.Is(err, reconcile.ErrSweepRunning) && !errors.Is(err, reconcile.ErrSweepsStopped) && !errors.Is(err, reconcile.ErrInvalid) {
			s.log.Error("sweep start failed", slog.String("connected_account", account), slog.Any("error", err))
		}
		return nil, err
	}
	return map[string]any{"sweeps": []map[string]any{{"provider": st.Provider, "account": st.Account, "started": true,
		"run": st.Run.ID, "resumed": st.Run.Resumed}}, "see": "GET /admin/api/sweeps"}, nil
}

// startSweep starts each provider's sweep unless it is running; the error
// says why none started (reconcile.ErrSweepRunning for each: 409).
func (s *Server) startSweep(ctx context.Context) ([]reconcile.SweepStart, error) {
	if s.admin.Sweeps == nil {
		return nil, errNoReconciler
	}
	starts, err := s.admin.Sweeps.Start(ctx)
	for _, st := range starts {
		if st.Err != nil && !errors.Is(st.Err, reconcile.ErrSweepRunning) && !errors.Is(st.Err, reconcile.ErrSweepsStopped) {
			// The admin API and the console alike: a provider whose
			// sweep failed to start is in the log, whatever the others did.
			s.log.Error("sweep start failed", slog.String("provider", st.Provider), slog.Any("error", st.Err))
		}
	}
	return starts, err
}

func (s *Server) adminFind(r *http.Request) (any, error) {
	accounts, err := s.findAccounts(r.Context(), r.URL.Query().Get("q"))
	return map[string]any{"accounts": accounts}, err
}

// findAccounts returns the accounts q names (none is an empty list).
func (s *Server) findAccounts(ctx context.Context, q string) ([]reconcile.Account, error) {
	q = strings.TrimSpace(q)
	if q == "" {
		return nil, fmt.Errorf("%w: the search is empty: search by account id, customer id, user reference or email", errBadRequest)
	}
	accounts, err := s.admin.Store.FindAccounts(ctx, q)
	if errors.Is(err, reconcile.ErrNotFound) {
		return []reconcile.Account{}, nil
	}
	return accounts, err
}

func (s *Server) adminAccount(r *http.Request) (any, error) {
	id, err := pathID(r)
	if err != nil {
		return nil, err
	}
	return s.admin.Store.AccountDetail(r.Context(), id)
}

func (s *Server) adminResync(r *http.Request) (any, error) {
	id, err := pathID(r)
	if err != nil {
		return nil, err
	}
	req, out, err := s.resync(r.Context(), id, adminActor, dryRun(r.URL.Query().Get("dry_run")))
	return answer(req, out), err
}

func (s *Server) adminReplay(r *http.Request) (any, error) {
	id, err := pathID(r)
	if err != nil {
		return nil, err
	}
	req, out, err := s.replay(r.Context(), id, adminActor, dryRun(r.URL.Query().Get("dry_run")))
	return answer(req, out), err
}

func dryRun(v string) bool { return v == "1" || v == "true" }

// answer is the admin API's answer to a resync or replay.
func answer(req reconcile.Request, out reconcile.Outcome) any {
	return map[string]any{"dry_run": req.DryRun, "trigger": req.Trigger, "outcome": out}
}

// resync reconciles the account's customer now (dry: write nothing).
func (s *Server) resync(ctx context.Context, accountID int64, actor string, dry bool) (reconcile.Request, reconcile.Outcome, error) {
	a, err := s.admin.Store.AccountByID(ctx, accountID)
	if err != nil {
		return reconcile.Request{}, reconcile.Outcome{}, err
	}
	return s.reconcileNow(ctx, reconcile.Request{Provider: a.Provider, CustomerID: a.CustomerID,
		Trigger: reconcile.TriggerResync, Actor: actor, DryRun: dry})
}

// replay reconciles the stored event's customer now (dry: write nothing).
func (s *Server) replay(ctx context.Context, eventID int64, actor string, dry bool) (reconcile.Request, reconcile.Outcome, error) {
	ev, err := s.admin.Store.Event(ctx, eventID)
	if err != nil {
		return reconcile.Request{}, reconcile.Outcome{}, err
	}
	if ev.CustomerID == "" {
		return reconcile.Request{}, reconcile.Outcome{}, fmt.Errorf("%w: event %d (%s) names no customer, so there is nothing to replay; it is %s: %s",
			errBadRequest, ev.ID, ev.Type, ev.Status, ev.Outcome)
	}
	return s.reconcileNow(ctx, reconcile.Request{Provider: ev.Provider, CustomerID: ev.CustomerID,
		Trigger: reconcile.TriggerReplay, Actor: actor, DryRun: dry})
}

// reconcileNow runs a resync or replay through the worker's path.
func (s *Server) reconcileNow(ctx context.Context, req reconcile.Request) (reconcile.Request, reconcile.Outcome, error) {
	if s.admin.Reconciler == nil {
		return req, reconcile.Outcome{}, errNoReconciler
	}
	out, err := s.admin.Reconciler.ReconcileNow(ctx, req)
	return req, out, err
}

func (s *Server) adminEvents(r *http.Request) (any, error) {
	status := reconcile.EventStatus(r.URL.Query().Get("status"))
	switch status {
	case reconcile.EventDead, reconcile.EventIgnored, reconcile.EventPending, reconcile.EventApplied:
	default:
		return nil, fmt.Errorf("%w: status %q: want dead, ignored, pending or applied", errBadRequest, status)
	}
	events, err := s.admin.Store.Events(r.Context(), status, eventsLimit)
	return map[string]any{"events": events}, err
}

// pathID reads the {id} of a path: billsync's id in its one spelling, so
// "+5" or "05" is not account 5 (one resource, one URL; a cache or a log
// search keyed by path sees every request for it).
func pathID(r *http.Request) (int64, error) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 || strconv.FormatInt(id, 10) != r.PathValue("id") {
		return 0, fmt.Errorf("%w: id %q: want billsync's numeric id", errBadRequest, r.PathValue("id"))
	}
	return id, nil
}
