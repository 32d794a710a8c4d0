package server_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/server"
	"github.com/billsync/billsync/store/storetest"
)

// browser is a console client: a cookie jar that does not follow
// redirects, so each answer can be checked.
type browser struct {
	t    *testing.T
	base string
	c    *http.Client
}

func (e *adminEnv) browser() *browser {
	jar, err := cookiejar.New(nil)
	require.NoError(e.t, err)
	return &browser{t: e.t, base: e.url, c: &http.Client{Jar: jar,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func (b *browser) do(method, path string, form url.Values) (*http.Response, string) {
	b.t.Helper()
	req, err := http.NewRequest(method, b.base+path, strings.NewReader(form.Encode()))
	require.NoError(b.t, err)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := b.c.Do(req)
	require.NoError(b.t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(b.t, err)
	return resp, string(body)
}

func (b *browser) get(path string) (int, string) {
	b.t.Helper()
	resp, body := b.do("GET", path, nil)
	return resp.StatusCode, body
}

// signIn signs in with token and returns the answer.
func (b *browser) signIn(token string) *http.Response {
	b.t.Helper()
	resp, _ := b.do("POST", "/admin/signin", url.Values{"token": {token}})
	return resp
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrf returns the CSRF token of the page at path.
func (b *browser) csrf(path string) string {
	b.t.Helper()
	code, body := b.get(path)
	require.Equal(b.t, http.StatusOK, code, body)
	m := csrfField.FindStringSubmatch(body)
	require.NotNil(b.t, m, "no CSRF token on %s", path)
	return m[1]
}

func TestConsoleSignIn(t *testing.T) {
	e := newAdminEnv(t, adminToken)
	b := e.browser()

	// No session: pages send to the sign-in page, which holds no secret.
	resp, _ := b.do("GET", "/admin", nil)
	require.Equal(t, "/admin/", resp.Header.Get("Location"))
	resp, _ = b.do("GET", "/admin/accounts/1", nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/admin/signin?next=%2Fadmin%2Faccounts%2F1", resp.Header.Get("Location"))
	code, body := b.get("/admin/signin")
	require.Equal(t, http.StatusOK, code)
	require.NotContains(t, body, adminToken)
	require.Contains(t, resp.Header.Get("Content-Security-Policy"), "default-src 'none'")

	// A wrong token: 401, no cookie.
	for _, token := range []string{"", "wrong", adminToken + "x", strings.ToUpper(adminToken)} {
		resp := b.signIn(token)
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "token %q", token)
		require.Empty(t, resp.Cookies())
	}
	code, _ = b.get("/admin/")
	require.Equal(t, http.StatusSeeOther, code)

	// The right token: an HttpOnly, SameSite=Strict session for /admin.
	resp = b.signIn(adminToken)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/admin/", resp.Header.Get("Location"))
	require.Len(t, resp.Cookies(), 1)
	ck := resp.Cookies()[0]
	require.True(t, ck.HttpOnly)
	require.Equal(t, http.SameSiteStrictMode, ck.SameSite)
	require.Equal(t, "/admin", ck.Path)
	require.NotContains(t, ck.Value, adminToken)
	code, body = b.get("/admin/")
	require.Equal(t, http.StatusOK, code)
	require.NotContains(t, body, adminToken)

	// A forged or altered session is no session.
	forged := e.browser()
	u, _ := url.Parse(e.url + "/admin")
	forged.c.Jar.SetCookies(u, []*http.Cookie{{Name: "billsync_session", Value: ck.Value[:len(ck.Value)-2] + "xx", Path: "/admin"}})
	code, _ = forged.get("/admin/")
	require.Equal(t, http.StatusSeeOther, code)

	// Sign-out needs the CSRF token, then ends the session: in the browser,
	// and for a copy of its cookie too.
	resp, _ = b.do("POST", "/admin/signout", url.Values{})
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	copied := e.browser()
	copied.c.Jar.SetCookies(u, []*http.Cookie{{Name: "billsync_session", Value: ck.Value, Path: "/admin"}})
	code, _ = copied.get("/admin/")
	require.Equal(t, http.StatusOK, code)
	csrf := b.csrf("/admin/")
	resp, _ = b.do("POST", "/admin/signout", url.Values{"csrf": {csrf}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	code, _ = b.get("/admin/")
	require.Equal(t, http.StatusSeeOther, code)
	code, _ = copied.get("/admin/")
	require.Equal(t, http.StatusSeeOther, code, "a copy of a signed-out session still works")
	resp, _ = copied.do("POST", "/admin/sweeps", url.Values{"csrf": {csrf}})
	require.Equal(t, http.StatusForbidden, resp.StatusCode)

	// An expired session is no session, though its row is still there.
	b.signIn(adminToken)
	storetest.ExpireSessions(t, e.st)
	code, _ = b.get("/admin/")
	require.Equal(t, http.StatusSeeOther, code)

	// After sign-in, "next" returns to the page asked for, never elsewhere.
	for next, want := range map[string]string{"/admin/sweeps": "/admin/sweeps", "https://evil.example/": "/admin/",
		"//evil.example/admin/": "/admin/", "/admin//evil.example": "/admin/", "/admin/\\evil": "/admin/"} {
		resp, _ := e.browser().do("POST", "/admin/signin", url.Values{"token": {adminToken}, "next": {next}})
		require.Equal(t, want, resp.Header.Get("Location"), "next %q", next)
	}
}

// TestConsoleRefusesWithoutSessionOrCSRF: every state-changing form is
// refused without a session, or with one but without its CSRF token (or
// with another session's), and nothing is written.
func TestConsoleRefusesWithoutSessionOrCSRF(t *testing.T) {
	e := newAdminEnv(t, adminToken)
	id := e.customer("u1", "u1@example.com", "price_pro")
	storetest.DriftAccount(t, e.st, id, "free", "") // drift a resync would heal
	eventID := e.newestEvent().ID

	other := e.browser()
	other.signIn(adminToken)
	otherCSRF := other.csrf("/admin/")
	signedIn := e.browser()
	signedIn.signIn(adminToken)
	anon := e.browser()

	before := e.tables()
	posts := []string{fmt.Sprintf("/admin/accounts/%d/resync", id), fmt.Sprintf("/admin/events/%d/replay", eventID), "/admin/sweeps"}
	for _, path := range posts {
		for name, try := range map[string]struct {
			b    *browser
			form url.Values
		}{
			"no session":          {anon, url.Values{"csrf": {otherCSRF}}},
			"no CSRF token":       {signedIn, url.Values{}},
			"wrong CSRF token":    {signedIn, url.Values{"csrf": {"x" + otherCSRF[1:]}}},
			"another's CSRF":      {signedIn, url.Values{"csrf": {otherCSRF}}},
			"CSRF in the query":   {signedIn, nil},
			"empty CSRF, dry run": {signedIn, url.Values{"csrf": {""}, "dry_run": {"1"}}},
		} {
			p := path
			if try.form == nil {
				p += "?csrf=" + url.QueryEscape(otherCSRF)
			}
			resp, body := try.b.do("POST", p, try.form)
			require.Equal(t, http.StatusForbidden, resp.StatusCode, "%s: %s", name, path)
			require.NotContains(t, body, adminToken)
		}
	}
	require.Equal(t, before, e.tables())
	require.Equal(t, "free", e.plan(id))

	// With the session's own token the same resync goes through.
	resp, body := signedIn.do("POST", posts[0], url.Values{"csrf": {signedIn.csrf("/admin/")}})
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Contains(t, body, "applied: ")
	require.Equal(t, "pro", e.plan(id))
	log := storetest.ReconcileLog(t, e.st)
	require.Equal(t, "admin-console", log[len(log)-1].Actor)
}

// TestConsoleEscapesProviderData: a provider's fields holding markup are
// shown as text on every page that shows them.
func TestConsoleEscapesProviderData(t *testing.T) {
	e := newAdminEnv(t, adminToken)
	ref := `<script>alert("ref")</script>`
	email := `<script>alert(1)</script>@example.com`
	id := e.customer(ref, email, "price_pro")
	// A payload whose JSON holds markup unescaped, as a provider may send it.
	eventID := e.newestEvent().ID
	storetest.SetEventPayload(t, e.st, eventID, []byte(`{"name":"<script>alert(2)</script>"}`))
	b := e.browser()
	b.signIn(adminToken)
	for _, path := range []string{"/admin/?q=" + url.QueryEscape(email), fmt.Sprintf("/admin/accounts/%d", id),
		fmt.Sprintf("/admin/events/%d", eventID), "/admin/?q=" + url.QueryEscape(`"><script>x()</script>`)} {
		code, body := b.get(path)
		require.Equal(t, http.StatusOK, code, path)
		require.NotContains(t, body, "<script", path)
		require.Contains(t, body, "&lt;script&gt;", path)
	}
	// The stored payload is shown pretty-printed (and escaped).
	_, body := b.get(fmt.Sprintf("/admin/events/%d", eventID))
	require.Contains(t, body, "{\n  &#34;name&#34;: &#34;&lt;script&gt;alert(2)&lt;/script&gt;&#34;\n}")
}

// TestConsolePages: every page renders for an account with history, and
// a resync's dry run writes nothing while its apply heals.
func TestConsolePages(t *testing.T) {
	e := newAdminEnv(t, adminToken)
	id := e.customer("u1", "u1@example.com", "price_pro")
	storetest.DriftAccount(t, e.st, id, "free", "")
	b := e.browser()
	b.signIn(adminToken)

	code, body := b.get("/admin/?q=u1%40example.com")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, fmt.Sprintf(`href="/admin/accounts/%d"`, id))
	code, body = b.get("/admin/?q=nobody")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "No account matches")
	for _, q := range []string{"%00", "a%00b", "%ff"} {
		code, body = b.get("/admin/?q=" + q)
		require.Equal(t, http.StatusBadRequest, code, q)
		require.Contains(t, body, "without NUL bytes", q)
		code, body = e.do("GET", "/admin/api/accounts?q="+q, adminToken)
		require.Equal(t, http.StatusBadRequest, code, q)
		require.Contains(t, body, "without NUL bytes", q)
	}

	code, body = b.get(fmt.Sprintf("/admin/accounts/%d", id))
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `<dd id="plan">free</dd>`)
	require.Contains(t, body, "customer.subscription.created")

	csrf := b.csrf("/admin/")
	before := e.tables()
	resp, body := b.do("POST", fmt.Sprintf("/admin/accounts/%d/resync", id), url.Values{"csrf": {csrf}, "dry_run": {"1"}})
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Contains(t, body, "would be applied: ")
	require.Contains(t, body, `id="apply"`)
	require.Equal(t, before, e.tables())

	resp, body = b.do("POST", fmt.Sprintf("/admin/accounts/%d/resync", id), url.Values{"csrf": {csrf}})
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.NotContains(t, body, `id="apply"`)
	_, body = b.get(fmt.Sprintf("/admin/accounts/%d", id))
	require.Contains(t, body, `<dd id="plan">pro</dd>`)
	require.Contains(t, body, "admin-console")

	// The failures page: a customer the worker gave up on, with its error,
	// and its dead event.
	code, body = b.get("/admin/events")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "No reconcile is failing.")
	a, err := e.st.AccountByID(context.Background(), id)
	require.NoError(t, err)
	storetest.SetQueueDead(t, e.st, a.Provider, a.CustomerID, 8, "stripe: 503 <b>unavailable</b>")
	events := storetest.Events(t, e.st)
	created := slices.IndexFunc(events, func(ev storetest.EventRow) bool { return ev.Type == "customer.subscription.created" })
	require.GreaterOrEqual(t, created, 0, "no customer.subscription.created stored")
	storetest.SetEventStatus(t, e.st, events[created].ID, reconcile.EventDead, "gave up after 8 attempts")
	code, body = b.get("/admin/events")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "gave up")
	require.Contains(t, body, "stripe: 503 &lt;b&gt;unavailable&lt;/b&gt;")
	require.Contains(t, body, fmt.Sprintf(`href="/admin/accounts/%d"`, id))
	require.Contains(t, body, "customer.subscription.created")
	require.Contains(t, body, "gave up after 8 attempts")

	for _, path := range []string{"/admin/events", "/admin/events?status=applied", "/admin/events?status=pending", "/admin/sweeps"} {
		code, body := b.get(path)
		require.Equal(t, http.StatusOK, code, path)
		require.NotContains(t, body, adminToken)
	}
	code, body = b.get("/admin/events?status=bogus")
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, body, "want failed, pending, ignored or applied")
	code, _ = b.get("/admin/accounts/999999")
	require.Equal(t, http.StatusNotFound, code)

	// A sweep started from the console is recorded and listed.
	resp, _ = b.do("POST", "/admin/sweeps", url.Values{"csrf": {csrf}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	storetest.WaitFor(t, "the sweep started from the console succeeds", func() bool {
		_, body := b.get("/admin/sweeps")
		return strings.Contains(body, ">succeeded<")
	})

	// The events feed's health is on the same page.
	_, body = b.get("/admin/sweeps")
	require.Contains(t, body, "The events feed has not polled yet")
	require.NoError(t, e.st.SaveEventsFeedPoll(context.Background(), "stripe", reconcile.EventsFeedPoll{
		Cursor: time.Now(), NewestEventAt: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC), Undelivered: 2,
		EndpointChecked: true, EndpointID: "we_123", EndpointEnabled: false}))
	storetest.SetFeedCaught(t, e.st, "stripe", 7)
	_, body = b.get("/admin/sweeps")
	require.Contains(t, body, "2026-03-01 12:00:00 UTC")
	require.Regexp(t, `>7</td>\s*<td[^>]*>2</td>`, body)
	require.Contains(t, body, `we_123 <span class="status disabled">disabled</span>`)
}

// newestEvent is the event stored last.
func (e *adminEnv) newestEvent() storetest.EventRow {
	e.t.Helper()
	events := storetest.Events(e.t, e.st)
	require.NotEmpty(e.t, events)
	return events[len(events)-1]
}

// TestConsoleNextHoldsNoControlCharacters: http.Redirect escapes only
// non-ASCII bytes, so a next= with a TAB or another control character
// (or a space) would reach the Location header raw: such a next goes to
// the console's front page instead.
func TestConsoleNextHoldsNoControlCharacters(t *testing.T) {
	e := newAdminEnv(t, adminToken)
	for _, next := range []string{"/admin/\tsweeps", "/admin/sweeps\x00", "/admin/\x7fx", "/admin/\u0085x",
		"/admin/\x1bx", "/admin/\rx", "/admin/ sweeps"} {
		resp, _ := e.browser().do("POST", "/admin/signin", url.Values{"token": {adminToken}, "next": {next}})
		require.Equal(t, http.StatusSeeOther, resp.StatusCode)
		require.Equal(t, "/admin/", resp.Header.Get("Location"), "next %q", next)

		// Signed in already, the sign-in page sends to next at once.
		b := e.browser()
		b.signIn(adminToken)
		resp, _ = b.do("GET", "/admin/signin?next="+url.QueryEscape(next), nil)
		require.Equal(t, http.StatusSeeOther, resp.StatusCode)
		require.Equal(t, "/admin/", resp.Header.Get("Location"), "next %q", next)
		require.False(t, strings.ContainsFunc(resp.Header.Get("Location"), func(r rune) bool { return r < 0x20 || r == 0x7f }))
	}
	resp, _ := e.browser().do("POST", "/admin/signin", url.Values{"token": {adminToken}, "next": {"/admin/events?status=dead"}})
	require.Equal(t, "/admin/events?status=dead", resp.Header.Get("Location"), "a plain console path is kept")
}

// TestSweepDuringShutdownIsNotAnOutage: a sweep asked for while serve
// stops (every provider's start refused with ErrSweepsStopped) is a 503
// that says so, on the console and in the admin API alike: not "the
// database is unavailable", and nothing logged as billsync's own failure.
func TestSweepDuringShutdownIsNotAnOutage(t *testing.T) {
	st := storetest.NewStore(t)
	stopping := sweepsFunc(func(context.Context) ([]reconcile.SweepStart, error) {
		err := fmt.Errorf("stripe: %w", reconcile.ErrSweepsStopped)
		return []reconcile.SweepStart{{Provider: "stripe", Err: err}}, errors.Join(err)
	})
	logs := &recordingHandler{}
	srv := httptest.NewServer(server.New(server.Config{Logger: slog.New(logs), Inbox: st,
		Admin: server.Admin{Token: adminToken, Store: st, Sweeps: stopping}}))
	t.Cleanup(srv.Close)

	b := (&adminEnv{t: t, url: srv.URL}).browser()
	b.signIn(adminToken)
	resp, body := b.do("POST", "/admin/sweeps", url.Values{"csrf": {b.csrf("/admin/sweeps")}})
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, body)
	require.Contains(t, body, "shutting down: no sweep starts now")
	require.NotContains(t, body, "database")
	require.Equal(t, "5", resp.Header.Get("Retry-After"))

	code, body, _ := bearerRequest(t, "POST", srv.URL+"/admin/api/sweeps", adminToken, "")
	require.Equal(t, http.StatusServiceUnavailable, code, body)
	require.JSONEq(t, `{"error":"stripe: shutting down: no sweep starts now"}`, body)

	require.Empty(t, logs.atLeast(slog.LevelError), "a shutdown is not billsync's failure")
}

// TestConsoleConnectedAccounts: the console lists Stripe Connect's
// accounts with their state and how many customers billsync keeps of
// each, a search by an account id finds its customers, and the sweeps
// page names the account each run swept.
func TestConsoleConnectedAccounts(t *testing.T) {
	e := newAdminEnv(t, adminToken)
	b := e.browser()
	b.signIn(adminToken)
	code, body := b.get("/admin/connected")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "No connected account is known")

	ctx := context.Background()
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	require.NoError(t, e.st.SaveAuthorizations(ctx, "stripe", []reconcile.Authorization{
		{Account: "acct_live", Authorized: true, At: at}, {Account: "acct_gone", At: at}}))
	storetest.BareAccount(t, e.st, "stripe", reconcile.Connected("acct_live", "cus_1"))
	storetest.BareAccount(t, e.st, "stripe", reconcile.Connected("acct_live", "cus_2"))
	storetest.BareAccount(t, e.st, "stripe", "cus_9") // the platform's own

	_, body = b.get("/admin/connected")
	require.Regexp(t, `acct_gone</a>.*\s*.*deauthorized</span>[\s\S]*?>0</td>`, body)
	require.Regexp(t, `acct_live</a>.*\s*.*authorized</span>[\s\S]*?>2</td>`, body)
	code, body = b.get("/admin/?q=acct_live")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "acct_live/cus_1")
	require.Contains(t, body, "acct_live/cus_2")
	require.NotContains(t, body, "cus_9")

	// The sweeps page shows each account's run with its account.
	run, err := e.st.StartSweep(ctx, "stripe", "acct_live", reconcile.RunSweep)
	require.NoError(t, err)
	require.NoError(t, e.st.FinishSweep(ctx, run, nil))
	_, body = b.get("/admin/sweeps")
	require.Regexp(t, `stripe <span class="connected">acct_live</span>`, body)
}
