package server

import (
	"bytes"
	"cmp"
	"embed"
	"encoding/json"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/billsync/billsync/reconcile"
)

// The support console, /admin: server-rendered pages on the admin API's
// own code (findAccounts, resync, replay, startSweep and the AdminStore),
// for support staff who sign in with the admin token. It exists only when
// the admin API does.
//
// Sign-in sets an HttpOnly, SameSite=Strict session cookie (see sessions);
// every form that changes something carries the session's CSRF token; the
// pages load no script and the Content-Security-Policy allows none.
// Everything from a provider goes through html/template, which escapes it.

//go:embed console
var consoleFiles embed.FS

// sessionCookie names the console's session cookie.
const sessionCookie = "billsync_session"

// maxFormBytes bounds a console form's body.
const maxFormBytes = 16 << 10

var consoleTemplates = parseConsole("signin", "overview", "search", "account", "event", "outcome", "events", "sweeps", "error", "deliveries", "connected")

func parseConsole(pages ...string) map[string]*template.Template {
	funcs := template.FuncMap{
		"when":   when,
		"dash":   func(s string) string { return cmp.Or(s, "—") },
		"period": reconcile.Period,
		"pretty": pretty,
		"value":  reconcile.FeatureValueText,
	}
	m := make(map[string]*template.Template, len(pages))
	for _, p := range pages {
		m[p] = template.Must(template.New(p).Funcs(funcs).ParseFS(consoleFiles, "console/layout.html", "console/"+p+".html"))
	}
	return m
}

// when renders a time for support staff, in UTC; the zero time is "—".
func when(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format("2006-01-02 15:04:05 UTC")
}

// pretty renders a stored payload for reading: indented when it is JSON,
// as it came otherwise (a Kinde JWT), never with invalid UTF-8.
// html/template escapes the result.
func pretty(payload []byte) string {
	var b bytes.Buffer
	if json.Indent(&b, payload, "", "  ") == nil {
		return b.String()
	}
	return strings.ToValidUTF8(string(payload), "\uFFFD")
}

// page is what every console template gets.
type page struct {
	Title string
	CSRF  string // the session's CSRF token; empty when signed out
	Data  any
}

// console serves /admin.
type console struct {
	s        *Server
	sessions sessions
	token    func(string) bool
}

func (s *Server) routeConsole(token string) {
	c := &console{s: s, sessions: newSessions(token), token: sameSecret(token)}
	s.mux.Handle("GET /admin", http.RedirectHandler("/admin/", http.StatusMovedPermanently))
	s.mux.HandleFunc("GET /admin/assets/console.css", c.css)
	s.mux.HandleFunc("GET /admin/signin", c.signInPage)
	s.mux.HandleFunc("POST /admin/signin", c.signIn)
	c.handle("POST /admin/signout", c.signOut)
	c.handle("GET /admin/{$}", c.search)
	c.handle("GET /admin/accounts/{id}", c.account)
	c.handle("POST /admin/accounts/{id}/resync", c.resync)
	c.handle("GET /admin/events", c.events)
	c.handle("GET /admin/events/{id}", c.event)
	c.handle("POST /admin/events/{id}/replay", c.replay)
	c.handle("GET /admin/sweeps", c.sweeps)
	c.handle("POST /admin/sweeps", c.startSweep)
	c.handle("GET /admin/connected", c.connected)
	c.routeChanges()
}

// consoleHandler serves a page for a signed-in session.
type consoleHandler func(w http.ResponseWriter, r *http.Request, session string) error

// handle routes pattern to h for signed-in sessions only: a GET without a
// session goes to the sign-in page, a POST without one, or without the
// session's CSRF token, is refused (403) and changes nothing.
func (c *console) handle(pattern string, h consoleHandler) {
	c.s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		secureHeaders(w)
		session, err := c.session(r)
		if err != nil {
			c.failErr(w, r, "", err)
			return
		}
		if session == "" && r.Method == http.MethodGet {
			http.Redirect(w, r, "/admin/signin?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return
		}
		if session == "" {
			c.fail(w, "", http.StatusForbidden, "You are not signed in, or your session has ended: sign in again, then retry.")
			return
		}
		if r.Method == http.MethodPost {
			r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
			if !c.sessions.validCSRF(session, r.PostFormValue("csrf")) {
				c.s.log.Warn("console refused a form without its CSRF token", slog.String("path", r.URL.Path))
				c.fail(w, session, http.StatusForbidden, "This form did not come from this console (its CSRF token is missing or wrong), so nothing was done: reload the page and try again.")
				return
			}
		}
		if err := h(w, r, session); err != nil {
			c.failErr(w, r, session, err)
		}
	})
}

// session returns the request's session, or "" when it has none that is
// valid and active.
func (c *console) session(r *http.Request) (string, error) {
	ck, err := r.Cookie(sessionCookie)
	if err != nil || !c.sessions.valid(ck.Value) {
		return "", nil
	}
	active, err := c.s.admin.Store.SessionActive(r.Context(), hash(ck.Value))
	if !active || err != nil {
		return "", err
	}
	return ck.Value, nil
}

// secureHeaders keeps the console's pages out of caches and frames and
// forbids scripts, whatever a provider's field holds.
func secureHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
}

func (c *console) render(w http.ResponseWriter, code int, name string, p page) {
	var b bytes.Buffer
	if err := consoleTemplates[name].ExecuteTemplate(&b, "layout", p); err != nil {
		c.s.log.Error("console page failed", slog.String("page", name), slog.Any("error", err))
		code, b = http.StatusInternalServerError, *bytes.NewBufferString("billsync could not render this page; the reason is in its log")
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_, _ = b.WriteTo(w) // the browser went away; nothing to do
}

// show renders a signed-in page (its forms carry the session's CSRF token).
func (c *console) show(w http.ResponseWriter, session, name, title string, data any) {
	c.render(w, http.StatusOK, name, page{Title: title, CSRF: c.sessions.csrf(session), Data: data})
}

// errorPage is the error template's data.
type errorPage struct {
	Code    int
	Message string
}

func (c *console) fail(w http.ResponseWriter, session string, code int, msg string) {
	p := page{Title: http.StatusText(code), Data: errorPage{code, msg}}
	if session != "" {
		p.CSRF = c.sessions.csrf(session)
	}
	c.render(w, code, "error", p)
}

// failErr shows err with its status, by the one policy (Server.explain):
// ids and reasons a person can act on; billsync's own failures are logged
// and shown without their details.
func (c *console) failErr(w http.ResponseWriter, r *http.Request, session string, err error) {
	code, msg := c.s.explain(w, r, toConsole, err)
	c.fail(w, session, code, msg)
}

func (c *console) css(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "max-age=300")
	http.ServeFileFS(w, r, consoleFiles, "console/console.css")
}

// signInData is the sign-in page's data.
type signInData struct {
	Next, Message string
	Refused       bool
}

func (c *console) signInPage(w http.ResponseWriter, r *http.Request) {
	secureHeaders(w)
	next := safeNext(r.URL.Query().Get("next"))
	if session, err := c.session(r); err == nil && session != "" {
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	}
	d := signInData{Next: next}
	if r.URL.Query().Get("out") == "1" {
		d.Message = "You are signed out."
	}
	c.render(w, http.StatusOK, "signin", page{Title: "Sign in", Data: d})
}

func (c *console) signIn(w http.ResponseWriter, r *http.Request) {
	secureHeaders(w)
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	next := safeNext(r.PostFormValue("next"))
	if !c.token(r.PostFormValue("token")) {
		c.s.log.Warn("console sign-in refused: wrong admin token", slog.String("remote", r.RemoteAddr))
		c.render(w, http.StatusUnauthorized, "signin", page{Title: "Sign in", Data: signInData{Next: next,
			Message: "That is not the admin token (BILLSYNC_ADMIN_TOKEN). Nothing was signed in.", Refused: true}})
		return
	}
	session := c.sessions.issue()
	if err := c.s.admin.Store.StartSession(r.Context(), hash(session), sessionTTL); err != nil {
		c.failErr(w, r, "", err)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: session, Path: "/admin",
		MaxAge: int(sessionTTL / time.Second), HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: overTLS(r)})
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (c *console) signOut(w http.ResponseWriter, r *http.Request, session string) error {
	if err := c.s.admin.Store.EndSession(r.Context(), hash(session)); err != nil {
		return err
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/admin", MaxAge: -1,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: overTLS(r)})
	http.Redirect(w, r, "/admin/signin?out=1", http.StatusSeeOther)
	return nil
}

// overTLS reports whether the browser reached billsync over HTTPS, itself
// or through a proxy that says so; the session cookie is then Secure.
func overTLS(r *http.Request) bool {
	return r.TLS != nil || r.Header.Get("X-Forwarded-Proto") == "https"
}

// safeNext returns where to go after signing in: a console path, never
// another site, and nothing http.Redirect would put raw into Location (it
// escapes only non-ASCII bytes): no control character, no space.
func safeNext(next string) string {
	if !strings.HasPrefix(next, "/admin/") || strings.HasPrefix(next, "/admin/signin") ||
		strings.ContainsAny(next, "\\ ") || strings.Contains(next, "//") ||
		strings.ContainsFunc(next, unicode.IsControl) {
		return "/admin/"
	}
	return next
}

// searchData is the search page's data.
type searchData struct {
	Q        string
	Accounts []reconcile.Account
}

// search is /admin/: the overview, or with ?q= the accounts found.
func (c *console) search(w http.ResponseWriter, r *http.Request, session string) error {
	d := searchData{Q: strings.TrimSpace(r.URL.Query().Get("q"))}
	if d.Q == "" {
		return c.overview(w, r, session)
	}
	var err error
	if d.Accounts, err = c.s.findAccounts(r.Context(), d.Q); err != nil {
		return err
	}
	c.show(w, session, "search", "Find a customer", d)
	return nil
}

// accountData is the account page's data.
type accountData struct {
	reconcile.AccountDetail
	Limit   int                         // each list shows at most this many rows, newest first
	Changes []reconcile.ChangeFeedEntry // what the app was told, newest first (nil: not shown)
}

func (c *console) account(w http.ResponseWriter, r *http.Request, session string) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	d, err := c.s.admin.Store.AccountDetail(r.Context(), id)
	if err != nil {
		return err
	}
	data := accountData{AccountDetail: d, Limit: reconcile.DetailLimit}
	if c.s.admin.Changes != nil {
		if data.Changes, err = c.s.admin.Changes.AccountChanges(r.Context(), id, reconcile.DetailLimit); err != nil {
			return err
		}
	}
	c.show(w, session, "account", "Account "+strconv.FormatInt(id, 10), data)
	return nil
}

// outcomeData is the page after a resync or replay.
type outcomeData struct {
	Request   reconcile.Request
	Outcome   reconcile.Outcome
	AccountID int64 // the account resynced, or the replayed event's (0: none yet)
	EventID   int64 // the replayed event; 0 for a resync
	Diff      []reconcile.FieldDiff
}

// Words is the outcome in words, "would be …" for a dry run.
func (d outcomeData) Words() string {
	result := string(d.Outcome.Result)
	if d.Request.DryRun {
		result = "would be " + result
	}
	return result + ": " + d.Outcome.Text
}

func (c *console) resync(w http.ResponseWriter, r *http.Request, session string) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	req, out, err := c.s.resync(r.Context(), id, consoleActor, dryRun(r.PostFormValue("dry_run")))
	if err != nil {
		return err
	}
	c.showOutcome(w, session, outcomeData{Request: req, Outcome: out, AccountID: id})
	return nil
}

func (c *console) replay(w http.ResponseWriter, r *http.Request, session string) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	req, out, err := c.s.replay(r.Context(), id, consoleActor, false)
	if err != nil {
		return err
	}
	c.showOutcome(w, session, outcomeData{Request: req, Outcome: out, AccountID: out.AccountID, EventID: id})
	return nil
}

func (c *console) showOutcome(w http.ResponseWriter, session string, d outcomeData) {
	d.Diff = reconcile.Diff(d.Outcome.Before, d.Outcome.After)
	title := "Resync applied"
	switch {
	case d.Request.DryRun:
		title = "Resync: dry run (nothing written)"
	case d.EventID != 0:
		title = fmt.Sprintf("Replayed event %d", d.EventID)
	}
	c.show(w, session, "outcome", title, d)
}

// eventData is the event page's data.
type eventData struct {
	Event   reconcile.StoredEvent
	Payload []byte
}

func (c *console) event(w http.ResponseWriter, r *http.Request, session string) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	ev, err := c.s.admin.Store.Event(r.Context(), id)
	if err != nil {
		return err
	}
	payload, err := c.s.admin.Store.EventPayload(r.Context(), id)
	if err != nil {
		return err
	}
	c.show(w, session, "event", fmt.Sprintf("Event %d", id), eventData{ev, payload})
	return nil
}

// eventsData is the events page's data: with no status asked, the
// failures (reconciles retrying or given up, and dead events).
type eventsData struct {
	Status   string
	Statuses []string
	Retries  []reconcile.Retry
	Events   []reconcile.StoredEvent
	Outbox   *reconcile.AppDeliveryStats // app deliveries; nil when not shown
}

func (c *console) events(w http.ResponseWriter, r *http.Request, session string) error {
	d := eventsData{Status: cmp.Or(r.URL.Query().Get("status"), "failed"),
		Statuses: []string{"failed", "pending", "ignored", "applied"}}
	status := reconcile.EventStatus(d.Status)
	var err error
	switch status {
	case "failed":
		if d.Retries, err = c.s.admin.Store.Retries(r.Context(), eventsLimit); err != nil {
			return err
		}
		if c.s.admin.Changes != nil {
			st, err := c.s.admin.Changes.AppDeliveryStats(r.Context())
			if err != nil {
				return err
			}
			d.Outbox = &st
		}
		status = reconcile.EventDead
	case reconcile.EventPending, reconcile.EventIgnored, reconcile.EventApplied:
	default:
		return fmt.Errorf("%w: no such list %q: want failed, pending, ignored or applied", errBadRequest, d.Status)
	}
	if d.Events, err = c.s.admin.Store.Events(r.Context(), status, eventsLimit); err != nil {
		return err
	}
	c.show(w, session, "events", "Events", d)
	return nil
}

// sweepsData is the sweeps page's data.
type sweepsData struct {
	Runs    []reconcile.SweepRecord     // the sweeps among the newest runs
	Imports []importView                // the imports among them, apart
	Feeds   []reconcile.EventsFeedState // the events feeds' health
	Started bool
	CanRun  bool // this process can start a sweep
}

func (c *console) sweeps(w http.ResponseWriter, r *http.Request, session string) error {
	runs, err := c.s.admin.Store.SweepRuns(r.Context(), sweepsLimit)
	if err != nil {
		return err
	}
	feeds, err := c.s.admin.Store.EventsFeedStates(r.Context())
	if err != nil {
		return err
	}
	d := sweepsData{Feeds: feeds, Started: r.URL.Query().Get("started") == "1", CanRun: c.s.admin.Sweeps != nil}
	now := time.Now()
	for _, run := range runs {
		if run.Kind == reconcile.RunImport {
			d.Imports = append(d.Imports, importViewOf(run, "", now))
			continue
		}
		d.Runs = append(d.Runs, run)
	}
	c.show(w, session, "sweeps", "Sweeps", d)
	return nil
}

// connectedLimit bounds the connected accounts page.
const connectedLimit = 1000

// connectedData is the connected accounts page.
type connectedData struct {
	Accounts []reconcile.ConnectedAccountView
	More     bool // more than connectedLimit: the page shows the first
}

func (c *console) connected(w http.ResponseWriter, r *http.Request, session string) error {
	views, err := c.s.admin.Store.ConnectedAccountViews(r.Context(), connectedLimit+1)
	if err != nil {
		return err
	}
	d := connectedData{Accounts: views, More: len(views) > connectedLimit}
	if d.More {
		d.Accounts = views[:connectedLimit]
	}
	c.show(w, session, "connected", "Connected accounts", d)
	return nil
}

func (c *console) startSweep(w http.ResponseWriter, r *http.Request, _ string) error {
	if _, err := c.s.startSweep(r.Context()); err != nil {
		return err
	}
	http.Redirect(w, r, "/admin/sweeps?started=1", http.StatusSeeOther)
	return nil
}
