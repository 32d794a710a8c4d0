package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	stripeapi "github.com/stripe/stripe-go/v82"

	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/server"
	"github.com/billsync/billsync/server/openapitest"
	"github.com/billsync/billsync/store"
	"github.com/billsync/billsync/store/storetest"
)

const adminToken = "test-admin-token-0123456789"

// apiClient sends every admin and app API request of these tests: it
// checks each request and answer against server/openapi.yaml.
var apiClient = openapitest.Client()

// adminEnv is the admin API on a real store, with a worker on billsync's
// Stripe client at the fake for resyncs and replays.
type adminEnv struct {
	t   *testing.T
	st  *store.Store
	sh  *testenv.Test
	url string
	w   *reconcile.Worker
}

func newAdminEnv(t *testing.T, token string) *adminEnv {
	t.Helper()
	e := &adminEnv{t: t, st: storetest.NewStore(t)}
	e.sh = testenv.ForTest(t, testenv.Stripe, testenv.Options{Store: e.st})
	plans := testenv.Plans()
	var err error
	e.w, err = reconcile.NewWorker(reconcile.WorkerConfig{Store: e.st, Providers: []reconcile.Provider{e.sh.Stripe.Client}, Plans: plans})
	require.NoError(t, err)
	sweeper, err := reconcile.NewSweeper(reconcile.SweeperConfig{Store: e.st, Provider: "stripe", Lister: e.sh.Stripe.Client, Plans: plans})
	require.NoError(t, err)
	sweeps, err := reconcile.NewSweepRunner(reconcile.SweepRunnerConfig{Sweepers: []*reconcile.Sweeper{sweeper}})
	require.NoError(t, err)
	ctx, stopSweeps := context.WithCancel(context.Background())
	sweepsDone := make(chan struct{})
	go func() { sweeps.Run(ctx); close(sweepsDone) }()
	t.Cleanup(func() { stopSweeps(); <-sweepsDone })
	srv := httptest.NewServer(server.New(server.Config{Inbox: e.st,
		Admin: server.Admin{Token: token, Store: e.st, Reconciler: e.w, Sweeps: sweeps}}))
	t.Cleanup(srv.Close)
	e.url = srv.URL
	return e
}

// customer creates a subscribed customer, stores its webhooks and
// reconciles them; it returns billsync's account id.
func (e *adminEnv) customer(userRef, email, price string) int64 {
	e.t.Helper()
	ctx := context.Background()
	c, err := e.sh.Stripe.API.V1Customers.Create(ctx, &stripeapi.CustomerCreateParams{
		Email: stripeapi.String(email), Metadata: map[string]string{"user_id": userRef}})
	require.NoError(e.t, err)
	_, err = e.sh.Stripe.Subscribe(ctx, c.ID, price)
	require.NoError(e.t, err)
	require.NoError(e.t, e.sh.WaitDelivered(ctx))
	_, err = e.w.Drain(ctx)
	require.NoError(e.t, err)
	a, err := e.st.Account(ctx, "stripe", c.ID)
	require.NoError(e.t, err)
	return a.ID
}

// do sends an admin request with token (none when empty) and returns the
// status and body.
func (e *adminEnv) do(method, path, token string) (int, string) {
	e.t.Helper()
	status, body, _ := bearerRequest(e.t, method, e.url+path, token, "")
	return status, body
}

// bearerRequest sends a request with a bearer token (none when empty) and
// returns the answer's status, body and header: the admin and app APIs'
// tests.
func bearerRequest(t testing.TB, method, url, token, body string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := apiClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b), resp.Header
}

// plan is the account's plan as stored.
func (e *adminEnv) plan(id int64) string {
	e.t.Helper()
	a, err := e.st.AccountByID(context.Background(), id)
	require.NoError(e.t, err)
	return a.Plan
}

// lastLog is the newest reconcile_log row, whoever it is of: trigger actor
// result.
func (e *adminEnv) lastLog() string {
	e.t.Helper()
	log := storetest.ReconcileLog(e.t, e.st)
	require.NotEmpty(e.t, log)
	l := log[len(log)-1]
	return l.Trigger + " " + l.Actor + " " + string(l.Result)
}

// ledgerState is the account's plan, then the whole ledger's sum and rows.
func (e *adminEnv) ledgerState(id int64) string {
	e.t.Helper()
	rows, sum := storetest.LedgerTotal(e.t, e.st, 0, "")
	return fmt.Sprintf("%s %d %d", e.plan(id), sum, rows)
}

// tables is every table's row count and a digest of its rows.
func (e *adminEnv) tables() map[string]string { return storetest.Tables(e.t, e.st) }

var adminRoutes = []struct{ method, path string }{
	{"GET", "/admin/api/accounts?q=1"},
	{"GET", "/admin/api/accounts/1"},
	{"POST", "/admin/api/accounts/1/resync"},
	{"POST", "/admin/api/events/1/replay"},
	{"GET", "/admin/api/events?status=dead"},
	{"GET", "/admin/api/retries"},
}

func TestAdminAbsentWithoutToken(t *testing.T) {
	e := newAdminEnv(t, "")
	id := e.customer("u1", "u1@example.com", "price_pro")
	require.Equal(t, int64(1), id)
	for _, r := range adminRoutes {
		for _, token := range []string{"", adminToken} {
			code, _ := e.do(r.method, r.path, token)
			require.Equal(t, http.StatusNotFound, code, "%s %s", r.method, r.path)
		}
	}
}

func TestAdminRefusesWrongToken(t *testing.T) {
	e := newAdminEnv(t, adminToken)
	id := e.customer("u1", "u1@example.com", "price_pro")
	storetest.DriftAccount(t, e.st, id, "free", "") // drift a resync would heal
	before := e.tables()
	for _, r := range adminRoutes {
		for _, token := range []string{"", "wrong", adminToken + "x", adminToken[:10]} {
			code, body := e.do(r.method, r.path, token)
			require.Equal(t, http.StatusUnauthorized, code, "%s %s token %q", r.method, r.path, token)
			require.Contains(t, body, "missing or wrong admin token")
			require.NotContains(t, body, adminToken)
		}
		// A token sent without "Bearer " is refused too.
		req, _ := http.NewRequest(r.method, e.url+r.path, nil)
		req.Header.Set("Authorization", adminToken)
		resp, err := apiClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	}
	require.Equal(t, before, e.tables())
	require.Equal(t, "free", e.plan(id))
}

// TestAdminEscapesProviderData: a customer's email and user reference are
// the provider's data, not billsync's: they come back as escaped JSON.
func TestAdminEscapesProviderData(t *testing.T) {
	e := newAdminEnv(t, adminToken)
	ref := `<script>alert("ref")</script>`
	email := `<script>alert(1)</script>@example.com`
	id := e.customer(ref, email, "price_pro")
	for _, path := range []string{"/admin/api/accounts?q=" + url.QueryEscape(ref), fmt.Sprintf("/admin/api/accounts/%d", id)} {
		code, body := e.do("GET", path, adminToken)
		require.Equal(t, http.StatusOK, code, body)
		require.NotContains(t, body, "<script>")
		require.Contains(t, body, `\u003cscript\u003e`)
		var v struct {
			Accounts []reconcile.Account `json:"accounts"`
			Account  reconcile.Account   `json:"account"`
		}
		require.NoError(t, json.Unmarshal([]byte(body), &v))
		a := v.Account
		if len(v.Accounts) > 0 {
			require.Len(t, v.Accounts, 1)
			a = v.Accounts[0]
		}
		require.Equal(t, ref, a.UserRef)
		require.Equal(t, email, a.Email)
	}
}

func TestAdminResyncAndReplay(t *testing.T) {
	e := newAdminEnv(t, adminToken)
	id := e.customer("u1", "u1@example.com", "price_pro")
	storetest.DriftAccount(t, e.st, id, "free", "")

	// Dry run: says what it would do, writes nothing.
	before := e.tables()
	code, body := e.do("POST", fmt.Sprintf("/admin/api/accounts/%d/resync?dry_run=1", id), adminToken)
	require.Equal(t, http.StatusOK, code, body)
	var res struct {
		DryRun  bool              `json:"dry_run"`
		Outcome reconcile.Outcome `json:"outcome"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &res))
	require.True(t, res.DryRun)
	require.Equal(t, reconcile.ResultApplied, res.Outcome.Result)
	require.Equal(t, "free", res.Outcome.Before.Plan)
	require.Equal(t, "pro", res.Outcome.After.Plan)
	require.Equal(t, before, e.tables())

	// The real resync heals it and is audited as admin-api.
	code, body = e.do("POST", fmt.Sprintf("/admin/api/accounts/%d/resync", id), adminToken)
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, "pro", e.plan(id))
	require.Equal(t, "resync admin-api applied", e.lastLog())

	// Replaying an applied event changes nothing.
	events := storetest.Events(t, e.st)
	require.NotEmpty(t, events)
	ev := events[0].ID
	state := e.ledgerState(id)
	code, body = e.do("POST", fmt.Sprintf("/admin/api/events/%d/replay", ev), adminToken)
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `"result":"unchanged"`)
	require.Contains(t, body, "no change")
	require.Equal(t, state, e.ledgerState(id))
	require.Equal(t, "replay admin-api unchanged", e.lastLog())

	// The account's detail shows the history; events list by status.
	code, body = e.do("GET", fmt.Sprintf("/admin/api/accounts/%d", id), adminToken)
	require.Equal(t, http.StatusOK, code, body)
	var d reconcile.AccountDetail
	require.NoError(t, json.Unmarshal([]byte(body), &d))
	require.Equal(t, int64(500), d.Balance)
	require.Len(t, d.Ledger, 1)
	require.NotEmpty(t, d.Events)
	require.Equal(t, "admin-api", d.History[0].Actor)
	require.Equal(t, "worker", d.History[len(d.History)-1].Actor)

	code, body = e.do("GET", "/admin/api/events?status=applied", adminToken)
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, len(d.Events), strings.Count(body, `"status":"applied"`))

	for path, want := range map[string]int{
		"/admin/api/events?status=nonsense": http.StatusBadRequest,
		"/admin/api/accounts/999":           http.StatusNotFound,
		"/admin/api/accounts/abc":           http.StatusBadRequest,
		"/admin/api/accounts?q=":            http.StatusBadRequest,
	} {
		code, body := e.do("GET", path, adminToken)
		require.Equal(t, want, code, "%s: %s", path, body)
		require.Contains(t, body, `"error":`)
	}
	code, body = e.do("POST", "/admin/api/events/999/replay", adminToken)
	require.Equal(t, http.StatusNotFound, code, body)
}

// TestAdminSweeps: the sweep list, 409 while a sweep runs elsewhere, and a
// sweep started from the API (it answers its run at once and heals a
// drifted account in the background).
func TestAdminSweeps(t *testing.T) {
	e := newAdminEnv(t, adminToken)
	id := e.customer("u1", "u1@example.com", "price_pro")
	code, body := e.do("GET", "/admin/api/sweeps", adminToken)
	require.Equal(t, http.StatusOK, code, body)
	require.JSONEq(t, `{"sweeps":[]}`, body)

	// Another replica is sweeping (it holds the lock): refused, nothing written.
	ctx := context.Background()
	_, unlock, err := e.st.SweepLock(ctx, "stripe", "")
	require.NoError(t, err)
	before := e.tables()
	code, body = e.do("POST", "/admin/api/sweeps", adminToken)
	require.Equal(t, http.StatusConflict, code, body)
	require.JSONEq(t, `{"error":"stripe: a sweep is already running"}`, body)
	require.Equal(t, before, e.tables(), "a refused start writes nothing")

	// Once it ended, a new one starts and heals the drifted account.
	unlock()
	storetest.DriftAccount(t, e.st, id, "free", "")
	code, body = e.do("POST", "/admin/api/sweeps", adminToken)
	require.Equal(t, http.StatusOK, code, body)
	var started struct {
		Sweeps []struct {
			Provider string
			Started  bool
			Run      int64
		}
	}
	require.NoError(t, json.Unmarshal([]byte(body), &started))
	require.Len(t, started.Sweeps, 1)
	require.Equal(t, "stripe", started.Sweeps[0].Provider)
	require.True(t, started.Sweeps[0].Started)
	storetest.WaitFor(t, "the started sweep succeeds", func() bool {
		runs, err := e.st.SweepRuns(ctx, 1)
		return err == nil && len(runs) == 1 && runs[0].Status == "succeeded"
	})
	require.Equal(t, "pro", e.plan(id))
	code, body = e.do("GET", "/admin/api/sweeps", adminToken)
	require.Equal(t, http.StatusOK, code, body)
	var res struct{ Sweeps []reconcile.SweepRecord }
	require.NoError(t, json.Unmarshal([]byte(body), &res))
	require.Len(t, res.Sweeps, 1)
	require.Equal(t, started.Sweeps[0].Run, res.Sweeps[0].ID)
	require.Equal(t, "succeeded", res.Sweeps[0].Status)
	require.Equal(t, 1, res.Sweeps[0].Healed)
}

// sweepsFunc adapts a function to server.Sweeps.
type sweepsFunc func(ctx context.Context) ([]reconcile.SweepStart, error)

func (f sweepsFunc) Start(ctx context.Context) ([]reconcile.SweepStart, error) { return f(ctx) }

func (f sweepsFunc) StartAccount(context.Context, string) (reconcile.SweepStart, error) {
	return reconcile.SweepStart{}, reconcile.ErrNoAccountSweeps
}

// TestAdminSweepStartsEachProvider: the answer holds each provider's
// start as it went; billsync's own failure to start one is logged, not
// echoed.
func TestAdminSweepStartsEachProvider(t *testing.T) {
	st := storetest.NewStore(t)
	sweeps := sweepsFunc(func(context.Context) ([]reconcile.SweepStart, error) {
		return []reconcile.SweepStart{
			{Provider: "stripe", Err: fmt.Errorf("stripe: %w", reconcile.ErrSweepRunning)},
			{Provider: "kinde", Run: reconcile.SweepRun{ID: 12, Provider: "kinde", Resumed: true}},
			{Provider: "other", Err: fmt.Errorf("start other sweep: %w: dial tcp 10.1.2.3:5432", reconcile.ErrStoreUnavailable)},
		}, nil
	})
	srv := httptest.NewServer(server.New(server.Config{Inbox: st, Admin: server.Admin{Token: adminToken, Store: st, Sweeps: sweeps}}))
	t.Cleanup(srv.Close)
	code, body, _ := bearerRequest(t, "POST", srv.URL+"/admin/api/sweeps", adminToken, "")
	require.Equal(t, http.StatusOK, code, body)
	require.JSONEq(t, `{"see":"GET /admin/api/sweeps","sweeps":[
		{"provider":"stripe","started":false,"error":"stripe: a sweep is already running"},
		{"provider":"kinde","started":true,"run":12,"resumed":true},
		{"provider":"other","started":false,"error":"could not start: see billsync's log"}]}`, body)
}

// TestAdminAnswersAreNotCached: the admin API's answers hold customers'
// data and are never stored by a browser or a proxy, errors included.
func TestAdminAnswersAreNotCached(t *testing.T) {
	e := newAdminEnv(t, adminToken)
	for _, tc := range []struct {
		token string
		code  int
	}{{adminToken, http.StatusOK}, {"", http.StatusUnauthorized}} {
		status, body, header := bearerRequest(t, "GET", e.url+"/admin/api/accounts?q=nobody", tc.token, "")
		require.Equal(t, tc.code, status, body)
		require.Equal(t, "no-store", header.Get("Cache-Control"), "token %q", tc.token)
		require.Equal(t, "nosniff", header.Get("X-Content-Type-Options"))
	}
}

// TestAdminRefusesNonCanonicalIDs: an id is billsync's number in its one
// spelling; "+5" or "05" is not account 5, on the admin API or the console.
func TestAdminRefusesNonCanonicalIDs(t *testing.T) {
	e := newAdminEnv(t, adminToken)
	id := e.customer("u1", "u1@example.com", "price_pro")
	status, body := e.do("GET", fmt.Sprintf("/admin/api/accounts/%d", id), adminToken)
	require.Equal(t, http.StatusOK, status, body)
	b := e.browser()
	b.signIn(adminToken)
	code, _ := b.get(fmt.Sprintf("/admin/accounts/%d", id))
	require.Equal(t, http.StatusOK, code)
	n := strconv.FormatInt(id, 10)
	for _, path := range []string{"+" + n, "%2B" + n, "0" + n, "00" + n, "+0" + n} {
		status, body := e.do("GET", "/admin/api/accounts/"+path, adminToken)
		require.Equal(t, http.StatusBadRequest, status, "id %s: %s", path, body)
		status, body = e.do("POST", "/admin/api/accounts/"+path+"/resync?dry_run=1", adminToken)
		require.Equal(t, http.StatusBadRequest, status, "id %s: %s", path, body)
		code, _ := b.get("/admin/accounts/" + path)
		require.Equal(t, http.StatusBadRequest, code, "console, id %s", path)
	}
}

// TestAdminUnknownPathsHaveTheConsoleHeaders: a path or method under
// /admin that no route has is answered by the mux itself, with the same
// headers as the console's pages.
func TestAdminUnknownPathsHaveTheConsoleHeaders(t *testing.T) {
	e := newAdminEnv(t, adminToken)
	for _, tc := range []struct {
		method, path string
		code         int
	}{
		{"GET", "/admin/nope", http.StatusNotFound},
		{"GET", "/admin/api/nope", http.StatusNotFound},
		{"GET", "/admin/accounts/1/nope", http.StatusNotFound},
		{"DELETE", "/admin/accounts/1", http.StatusMethodNotAllowed},
	} {
		status, body, header := bearerRequest(t, tc.method, e.url+tc.path, "", "")
		require.Equal(t, tc.code, status, "%s %s: %s", tc.method, tc.path, body)
		require.Contains(t, header.Get("Content-Security-Policy"), "default-src 'none'", tc.path)
		require.Equal(t, "DENY", header.Get("X-Frame-Options"), tc.path)
		require.Equal(t, "nosniff", header.Get("X-Content-Type-Options"), tc.path)
		require.Equal(t, "no-store", header.Get("Cache-Control"), tc.path)
	}
}
