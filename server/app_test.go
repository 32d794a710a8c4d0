package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/server"
	"github.com/billsync/billsync/store"
	"github.com/billsync/billsync/store/storetest"
)

const appToken = "test-app-token-0123456789abcdef"

var (
	appPeriodStart = time.Date(2026, 11, 3, 0, 0, 0, 0, time.UTC)
	appPeriodEnd   = time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
)

// appEnv is the app API (and the admin API, with another token) on a real
// store.
type appEnv struct {
	t     *testing.T
	st    *store.Store
	url   string
	plans *reconcile.Plans
}

func newAppEnv(t *testing.T, token string) *appEnv {
	t.Helper()
	return newAppEnvWith(t, token, func(*server.App) {})
}

// newAppEnvWith is newAppEnv with the app API's configuration changed by
// set.
func newAppEnvWith(t *testing.T, token string, set func(*server.App)) *appEnv {
	t.Helper()
	e := &appEnv{t: t, st: storetest.NewStore(t)}
	e.plans = testenv.Plans()
	// Long polls wake only on the store's NOTIFY (the fallback poll is an
	// hour), so a feed test that passes proves the wake-up works.
	var committed reconcile.Signal
	ctx, cancel := context.WithCancel(context.Background())
	listening := make(chan struct{})
	var once sync.Once
	go e.st.ListenChanges(ctx, slog.New(slog.DiscardHandler), func() { once.Do(func() { close(listening) }); committed.Fire() })
	t.Cleanup(cancel)
	<-listening // the listener calls wake once it is listening
	app := server.App{Token: token, Store: e.st, ChangeFeed: e.st, Committed: &committed, ChangeFeedPoll: time.Hour}
	set(&app)
	srv := httptest.NewServer(server.New(server.Config{Inbox: e.st,
		Admin: server.Admin{Token: adminToken, Store: e.st}, App: app}))
	t.Cleanup(srv.Close)
	e.url = srv.URL
	return e
}

// account makes an account the way the worker does: a stored event queues
// the customer, and a snapshot (an active subscription on price for the
// period appPeriodStart–appPeriodEnd, naming userRef) is applied by the
// store's Apply, which grants the plan's allowance. It returns the
// account's id.
func (e *appEnv) account(provider, customer, userRef, price string) int64 {
	e.t.Helper()
	return e.accountOf(reconcile.Snapshot{Provider: provider, CustomerID: customer, UserRef: userRef,
		Subscriptions: []reconcile.Subscription{{ID: "sub_" + customer, Status: "active",
			Items: []reconcile.Item{{PriceRefs: []string{price}, Quantity: 1, PeriodStart: appPeriodStart, PeriodEnd: appPeriodEnd}}}}})
}

// accountOf makes an account of snap the way the worker does (see account).
func (e *appEnv) accountOf(snap reconcile.Snapshot) int64 {
	e.t.Helper()
	ctx := context.Background()
	provider, customer := snap.Provider, snap.CustomerID
	_, err := e.st.StoreReceipt(ctx, reconcile.Receipt{Event: reconcile.Event{
		Provider: provider, DedupeKey: "evt_" + customer, EventID: "evt_" + customer, Type: "customer.subscription.updated",
		CustomerID: customer, Payload: []byte(`{}`)}})
	require.NoError(e.t, err)
	jobs, err := e.st.Claim(ctx, "test", 1, time.Minute)
	require.NoError(e.t, err)
	require.Len(e.t, jobs, 1)
	obs, err := e.st.Now(ctx)
	require.NoError(e.t, err)
	out, err := e.st.Apply(ctx, jobs[0], obs, reconcile.NewDecider(jobs[0], snap, e.plans, obs))
	require.NoError(e.t, err)
	require.Equal(e.t, reconcile.ResultApplied, out.Result, out.Text)
	a, err := e.st.Account(ctx, provider, customer)
	require.NoError(e.t, err)
	return a.ID
}

type appAnswer struct {
	code   int
	body   string
	header http.Header
}

func (a appAnswer) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(a.body), &m), a.body)
	return m
}

// do sends a request with the bearer token (none when empty).
func (e *appEnv) do(method, path, token, body string) appAnswer {
	e.t.Helper()
	status, b, header := bearerRequest(e.t, method, e.url+path, token, body)
	return appAnswer{status, b, header}
}

func (e *appEnv) debit(userRef, key string, amount int64) appAnswer {
	e.t.Helper()
	return e.do("POST", "/api/users/"+userRef+"/usage", appToken, fmt.Sprintf(`{"idempotency_key": %q, "amount": %d}`, key, amount))
}

func (e *appEnv) balance(id int64) int64 {
	e.t.Helper()
	b, err := e.st.Balance(context.Background(), id)
	require.NoError(e.t, err)
	return b
}

// usageRows counts the account's usage ledger rows and sums their deltas.
func (e *appEnv) usageRows(id int64) (n int, sum int64) {
	e.t.Helper()
	return storetest.LedgerTotal(e.t, e.st, id, "usage")
}

var appRoutes = []struct{ method, path, body string }{
	{"GET", "/api/users/u1", ""},
	{"GET", "/api/changes", ""},
	{"POST", "/api/users/u1/usage", `{"idempotency_key": "k1", "amount": 1}`},
}

func TestAppAbsentWithoutToken(t *testing.T) {
	e := newAppEnv(t, "")
	e.account("stripe", "cus_1", "u1", "price_pro")
	before := storetest.Tables(t, e.st)
	for _, r := range appRoutes {
		for _, token := range []string{"", appToken, adminToken} {
			a := e.do(r.method, r.path, token, r.body)
			require.Equal(t, http.StatusNotFound, a.code, "%s %s token %q", r.method, r.path, token)
		}
	}
	require.Equal(t, before, storetest.Tables(t, e.st))
}

func TestAppRefusesWrongToken(t *testing.T) {
	e := newAppEnv(t, appToken)
	id := e.account("stripe", "cus_1", "u1", "price_pro")
	before := storetest.Tables(t, e.st)
	for _, r := range appRoutes {
		// The admin token opens the admin API, not the app's.
		for _, token := range []string{"", "wrong", appToken + "x", appToken[:10], adminToken} {
			a := e.do(r.method, r.path, token, r.body)
			require.Equal(t, http.StatusUnauthorized, a.code, "%s %s token %q", r.method, r.path, token)
			require.Contains(t, a.body, "missing or wrong app token")
			require.NotContains(t, a.body, appToken)
			require.NotContains(t, a.body, `"balance"`)
		}
		// The token without "Bearer " is refused too.
		req, err := http.NewRequest(r.method, e.url+r.path, strings.NewReader(r.body))
		require.NoError(t, err)
		req.Header.Set("Authorization", appToken)
		resp, err := apiClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	}
	require.Equal(t, before, storetest.Tables(t, e.st))
	require.Equal(t, int64(500), e.balance(id))
	// And the app token does not open the admin API.
	a := e.do("GET", "/admin/api/accounts/1", appToken, "")
	require.Equal(t, http.StatusUnauthorized, a.code)
}

func TestAppUser(t *testing.T) {
	e := newAppEnv(t, appToken)
	e.account("stripe", "cus_other", "u0", "price_team")
	id := e.account("stripe", "cus_1", "u1", "price_pro")

	a := e.do("GET", "/api/users/u1", appToken, "")
	require.Equal(t, http.StatusOK, a.code, a.body)
	require.Equal(t, "application/json", a.header.Get("Content-Type"))
	require.Equal(t, map[string]any{
		"account_id": float64(id), "provider": "stripe", "customer_id": "cus_1", "user_ref": "u1",
		"plan": "pro", "status": "active", "period_start": "2026-11-03T00:00:00Z", "period_end": "2026-12-03T00:00:00Z",
		"balance": float64(500),
	}, normalizeTimes(t, a.json(t)))

	// The balance follows the ledger.
	require.Equal(t, http.StatusOK, e.debit("u1", "k", 120).code)
	require.Equal(t, float64(380), e.do("GET", "/api/users/u1", appToken, "").json(t)["balance"])

	for _, ref := range []string{"nobody", "U1", "u1%20", "cus_1", fmt.Sprint(id)} {
		a := e.do("GET", "/api/users/"+ref, appToken, "")
		require.Equal(t, http.StatusNotFound, a.code, ref)
		require.Contains(t, a.json(t)["error"], "no account has user reference", ref)
	}
	a = e.do("GET", "/api/users/u%001", appToken, "")
	require.Equal(t, http.StatusBadRequest, a.code, a.body)
	require.Contains(t, a.json(t)["error"], "NUL")
}

// TestAppUserWithoutSubscription: an account with no current subscription
// answers status "none" (the document's value for it), not "" (as it once
// did), and still its plan (the default) and balance.
func TestAppUserWithoutSubscription(t *testing.T) {
	e := newAppEnv(t, appToken)
	e.accountOf(reconcile.Snapshot{Provider: "stripe", CustomerID: "cus_free", UserRef: "u_free"})

	a := e.do("GET", "/api/users/u_free", appToken, "")
	require.Equal(t, http.StatusOK, a.code, a.body)
	m := a.json(t)
	require.Equal(t, "none", m["status"], a.body)
	require.NotEmpty(t, m["plan"], a.body)
}

// normalizeTimes rewrites the period fields in UTC, whatever zone the
// database session answered in.
func normalizeTimes(t *testing.T, m map[string]any) map[string]any {
	t.Helper()
	for _, k := range []string{"period_start", "period_end"} {
		s, ok := m[k].(string)
		require.True(t, ok, "%s: %v", k, m[k])
		tm, err := time.Parse(time.RFC3339Nano, s)
		require.NoError(t, err)
		m[k] = tm.UTC().Format(time.RFC3339)
	}
	return m
}

// TestAppUserOfTwoProviders: when a Stripe and a Kinde account carry the
// same user reference, billsync does not guess which allowance to read or
// spend: 409 names both, and ?provider= picks one.
func TestAppUserOfTwoProviders(t *testing.T) {
	e := newAppEnv(t, appToken)
	stripeID := e.account("stripe", "cus_1", "u1", "price_pro")
	kindeID := e.account("kinde", "kinde_cus_1", "u1", "customer_team_plan")
	before := storetest.Tables(t, e.st)

	for _, a := range []appAnswer{e.do("GET", "/api/users/u1", appToken, ""), e.debit("u1", "k1", 1)} {
		require.Equal(t, http.StatusConflict, a.code, a.body)
		m := a.json(t)
		require.Contains(t, m["error"], "add ?provider=")
		require.Equal(t, []any{
			map[string]any{"account_id": float64(stripeID), "provider": "stripe", "customer_id": "cus_1"},
			map[string]any{"account_id": float64(kindeID), "provider": "kinde", "customer_id": "kinde_cus_1"},
		}, m["accounts"])
	}
	require.Equal(t, before, storetest.Tables(t, e.st))

	a := e.do("GET", "/api/users/u1?provider=kinde", appToken, "")
	require.Equal(t, http.StatusOK, a.code, a.body)
	require.Equal(t, float64(kindeID), a.json(t)["account_id"])
	require.Equal(t, float64(2000), a.json(t)["balance"])

	a = e.do("POST", "/api/users/u1/usage?provider=stripe", appToken, `{"idempotency_key": "k1", "amount": 5}`)
	require.Equal(t, http.StatusOK, a.code, a.body)
	require.Equal(t, int64(495), e.balance(stripeID))
	require.Equal(t, int64(2000), e.balance(kindeID))

	require.Equal(t, http.StatusNotFound, e.do("GET", "/api/users/u1?provider=paddle", appToken, "").code)
}

// TestAppUserOfConnectedAccounts: Stripe Connect accounts may each hold a
// customer with the app's user reference (even the same customer id):
// 409 names them with their connected account, ?account= picks one (or
// the platform's own), and a malformed account is 400.
func TestAppUserOfConnectedAccounts(t *testing.T) {
	e := newAppEnv(t, appToken)
	platform := e.account("stripe", "cus_1", "u1", "price_pro")
	connected := e.account("stripe", reconcile.Connected("acct_a", "cus_1"), "u1", "free")

	a := e.do("GET", "/api/users/u1", appToken, "")
	require.Equal(t, http.StatusConflict, a.code, a.body)
	require.Contains(t, a.json(t)["error"], "?account=")
	require.Equal(t, []any{
		map[string]any{"account_id": float64(platform), "provider": "stripe", "customer_id": "cus_1"},
		map[string]any{"account_id": float64(connected), "provider": "stripe", "customer_id": "acct_a/cus_1", "connected_account": "acct_a"},
	}, a.json(t)["accounts"])

	a = e.do("GET", "/api/users/u1?account=acct_a", appToken, "")
	require.Equal(t, http.StatusOK, a.code, a.body)
	require.Equal(t, float64(connected), a.json(t)["account_id"])
	require.Equal(t, "acct_a", a.json(t)["connected_account"])
	a = e.do("GET", "/api/users/u1?account=platform", appToken, "")
	require.Equal(t, http.StatusOK, a.code, a.body)
	require.Equal(t, float64(platform), a.json(t)["account_id"])
	require.NotContains(t, a.json(t), "connected_account")

	a = e.do("POST", "/api/users/u1/usage?account=acct_a", appToken, `{"idempotency_key": "k1", "amount": 1}`)
	require.Equal(t, http.StatusOK, a.code, a.body)
	require.Equal(t, int64(9), e.balance(connected))
	require.Equal(t, int64(500), e.balance(platform))

	require.Equal(t, http.StatusBadRequest, e.do("GET", "/api/users/u1?account=cus_1", appToken, "").code)
	require.Equal(t, http.StatusNotFound, e.do("GET", "/api/users/u1?account=acct_b", appToken, "").code)
}

// TestAppUserConnectedAccountAuthorization: a connected account's user
// answers whether that account still authorises the platform, and since
// when, as the newest word recorded about it says (absent before any
// word); its plan and balance are unchanged by a deauthorisation; the
// platform's own user has no such field.
func TestAppUserConnectedAccountAuthorization(t *testing.T) {
	e := newAppEnv(t, appToken)
	ctx := context.Background()
	e.account("stripe", "cus_1", "u1", "price_pro")
	e.account("stripe", reconcile.Connected("acct_a", "cus_1"), "u1", "free")
	user := func(account string) map[string]any {
		t.Helper()
		a := e.do("GET", "/api/users/u1?account="+account, appToken, "")
		require.Equal(t, http.StatusOK, a.code, a.body)
		return a.json(t)
	}
	require.NotContains(t, user("acct_a"), "connected_account_authorization", "no word heard about the account yet")

	authorized := time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)
	require.NoError(t, e.st.SaveAuthorizations(ctx, "stripe", []reconcile.Authorization{{Account: "acct_a", Authorized: true, At: authorized}}))
	u := user("acct_a")
	require.Equal(t, "acct_a", u["connected_account"])
	require.Equal(t, map[string]any{"authorized": true, "since": "2026-11-01T09:00:00Z"}, u["connected_account_authorization"])

	withdrew := authorized.Add(36 * time.Hour)
	require.NoError(t, e.st.SaveAuthorizations(ctx, "stripe", []reconcile.Authorization{
		{Account: "acct_a", Authorized: false, At: withdrew},
		{Account: "acct_b", Authorized: false, At: withdrew}, // another account's word: not this user's
	}))
	u = user("acct_a")
	require.Equal(t, map[string]any{"authorized": false, "since": "2026-11-02T21:00:00Z"}, u["connected_account_authorization"])
	require.Equal(t, "free", u["plan"], "the state last read is kept")
	require.Equal(t, float64(10), u["balance"])

	platform := user("platform")
	require.NotContains(t, platform, "connected_account")
	require.NotContains(t, platform, "connected_account_authorization")
}

// TestAppConcurrentDebits: 50 debits with distinct keys at once never take
// the balance below zero: exactly floor(500/30) = 16 succeed, the others
// are refused with the balance, and the ledger agrees with the answers.
func TestAppConcurrentDebits(t *testing.T) {
	e := newAppEnv(t, appToken)
	id := e.account("stripe", "cus_1", "u1", "price_pro")
	const n, amount = 50, 30
	answers := make([]appAnswer, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			answers[i] = e.debit("u1", fmt.Sprintf("req-%d", i), amount)
		})
	}
	close(start)
	wg.Wait()

	var ok, refused int
	balances := map[float64]bool{}
	for _, a := range answers {
		m := a.json(t)
		switch a.code {
		case http.StatusOK:
			ok++
			b := m["balance"].(float64)
			require.False(t, balances[b], "two debits answered the same balance %v", b)
			balances[b] = true
		case http.StatusConflict:
			refused++
			require.Contains(t, m["error"], "insufficient allowance")
			require.Equal(t, float64(500%amount), m["balance"])
			require.Equal(t, float64(amount), m["amount"])
		default:
			t.Fatalf("appAnswer %d: %s", a.code, a.body)
		}
	}
	require.Equal(t, 500/amount, ok)
	require.Equal(t, n-500/amount, refused)
	for k := 1; k <= 500/amount; k++ {
		require.True(t, balances[float64(500-k*amount)], "no debit answered balance %d", 500-k*amount)
	}
	rows, sum := e.usageRows(id)
	require.Equal(t, 500/amount, rows)
	require.Equal(t, int64(-ok*amount), sum)
	require.Equal(t, int64(500%amount), e.balance(id))
}

// TestAppDebitOncePerKey: a key debits once; its repeat answers the first
// appAnswer byte for byte, even after the balance moved; the same key with
// another amount is refused and writes nothing.
func TestAppDebitOncePerKey(t *testing.T) {
	e := newAppEnv(t, appToken)
	id := e.account("stripe", "cus_1", "u1", "price_pro")

	first := e.debit("u1", "order-42", 100)
	require.Equal(t, http.StatusOK, first.code, first.body)
	m := first.json(t)
	require.Equal(t, float64(400), m["balance"])
	require.Equal(t, "order-42", m["idempotency_key"])
	entry := m["entry"].(map[string]any)
	require.Equal(t, fmt.Sprintf("usage:%d:order-42", id), entry["key"])
	require.Equal(t, "usage", entry["kind"])
	require.Equal(t, float64(-100), entry["delta"])
	require.Empty(t, first.header.Get("Idempotent-Replayed"))

	again := e.debit("u1", "order-42", 100)
	require.Equal(t, first.code, again.code)
	require.Equal(t, first.body, again.body)
	require.Equal(t, "true", again.header.Get("Idempotent-Replayed"))
	require.Equal(t, int64(400), e.balance(id))

	// The balance moves on; the repeat still answers what the first got.
	require.Equal(t, http.StatusOK, e.debit("u1", "order-43", 50).code)
	later := e.debit("u1", "order-42", 100)
	require.Equal(t, http.StatusOK, later.code)
	require.Equal(t, first.body, later.body)

	before := storetest.Tables(t, e.st)
	other := e.debit("u1", "order-42", 99)
	require.Equal(t, http.StatusUnprocessableEntity, other.code, other.body)
	require.Contains(t, other.json(t)["error"], "debited 100, this request asks for 99")
	require.Equal(t, before, storetest.Tables(t, e.st))

	rows, sum := e.usageRows(id)
	require.Equal(t, 2, rows)
	require.Equal(t, int64(-150), sum)
	require.Equal(t, int64(350), e.balance(id))
}

// TestAppDebitRefusedWhenShort: a debit over the balance is 409 with the
// balance, and writes nothing; the key stays free for a later try.
func TestAppDebitRefusedWhenShort(t *testing.T) {
	e := newAppEnv(t, appToken)
	id := e.account("stripe", "cus_1", "u1", "price_free") // 10
	before := storetest.Tables(t, e.st)
	a := e.debit("u1", "big", 11)
	require.Equal(t, http.StatusConflict, a.code, a.body)
	m := a.json(t)
	require.Equal(t, float64(10), m["balance"])
	require.Equal(t, float64(11), m["amount"])
	require.Equal(t, before, storetest.Tables(t, e.st))

	a = e.debit("u1", "all", 10)
	require.Equal(t, http.StatusOK, a.code, a.body)
	require.Equal(t, float64(0), a.json(t)["balance"])
	require.Equal(t, http.StatusConflict, e.debit("u1", "one-more", 1).code)
	require.Equal(t, int64(0), e.balance(id))

	require.Equal(t, http.StatusNotFound, e.debit("nobody", "k", 1).code)
}

func TestAppDebitBadInput(t *testing.T) {
	e := newAppEnv(t, appToken)
	e.account("stripe", "cus_1", "u1", "price_pro")
	before := storetest.Tables(t, e.st)
	tests := map[string]struct{ body, want string }{
		"ErrEmpty":        {``, "body is not"},
		"ErrNotJSON":      {`amount=1`, "body is not"},
		"ErrArray":        {`[{"idempotency_key": "k", "amount": 1}]`, "body is not"},
		"ErrUnknownField": {`{"idempotency_key": "k", "amount": 1, "user": "u2"}`, `unknown field "user"`},
		"ErrNameCase":     {`{"IDEMPOTENCY_KEY": "k", "Amount": 1}`, `unknown field "`},
		"ErrNoKey":        {`{"amount": 1}`, "idempotency_key is missing"},
		"ErrNullKey":      {`{"idempotency_key": null, "amount": 1}`, "idempotency_key is missing"},
		"ErrEmptyKey":     {`{"idempotency_key": "", "amount": 1}`, "idempotency_key is empty"},
		"ErrLongKey":      {`{"idempotency_key": "` + strings.Repeat("k", 256) + `", "amount": 1}`, "at most 255"},
		"ErrNULKey":       {`{"idempotency_key": "a\u0000b", "amount": 1}`, "without NUL"},
		"ErrKeyNotString": {`{"idempotency_key": 7, "amount": 1}`, "body is not"},
		"ErrNoAmount":     {`{"idempotency_key": "k"}`, "amount is missing"},
		"ErrZero":         {`{"idempotency_key": "k", "amount": 0}`, "above 0"},
		"ErrNegative":     {`{"idempotency_key": "k", "amount": -5}`, "above 0"},
		"ErrFraction":     {`{"idempotency_key": "k", "amount": 1.5}`, "body is not"},
		"ErrExponent":     {`{"idempotency_key": "k", "amount": 1e2}`, "body is not"},
		"ErrString":       {`{"idempotency_key": "k", "amount": "5"}`, "body is not"},
		"ErrOverflow":     {`{"idempotency_key": "k", "amount": 9223372036854775808}`, "body is not"},
		"ErrTrailing":     {`{"idempotency_key": "k", "amount": 1} {"idempotency_key": "k2", "amount": 1}`, "data after the object"},
		"ErrTrailingJunk": {`{"idempotency_key": "k", "amount": 1} x`, "data after the object"},
		"ErrTruncated":    {`{"idempotency_key": "k", "amount": 1`, "body is not"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			a := e.do("POST", "/api/users/u1/usage", appToken, tt.body)
			require.Equal(t, http.StatusBadRequest, a.code, a.body)
			require.Contains(t, a.json(t)["error"], tt.want)
		})
	}
	t.Run("ErrTooLarge", func(t *testing.T) {
		a := e.do("POST", "/api/users/u1/usage", appToken, `{"idempotency_key": "k", "amount": 1}`+strings.Repeat(" ", server.MaxUsageBodyBytes))
		require.Equal(t, http.StatusRequestEntityTooLarge, a.code, a.body)
		require.Contains(t, a.json(t)["error"], "body larger than 4096 bytes")
	})
	t.Run("ErrNULUser", func(t *testing.T) {
		a := e.do("POST", "/api/users/u%001/usage", appToken, `{"idempotency_key": "k", "amount": 1}`)
		require.Equal(t, http.StatusBadRequest, a.code, a.body)
	})
	require.Equal(t, before, storetest.Tables(t, e.st))
	// Whitespace around the object is fine, and a 255-byte key is.
	a := e.do("POST", "/api/users/u1/usage", appToken, "\n "+`{"idempotency_key": "`+strings.Repeat("k", 255)+`", "amount": 1}`+"\n")
	require.Equal(t, http.StatusOK, a.code, a.body)
}

// TestAppDebitRefusesKeysThatAreNotUTF8: an idempotency_key holding an
// invalid byte or half a surrogate pair is 400, not a key that the JSON
// decoder silently turned into U+FFFD (then "\ud800" and "\udfff" would be
// one key, and the second debit a replay of the first).
func TestAppDebitRefusesKeysThatAreNotUTF8(t *testing.T) {
	e := newAppEnv(t, appToken)
	id := e.account("stripe", "cus_1", "u1", "price_pro")
	for name, key := range map[string]string{
		"LoneHighSurrogate": `"\ud800"`,
		"LoneLowSurrogate":  `"\udfff"`,
		"HighThenLetter":    `"a\ud800b"`,
		"InvalidByte":       "\"k\xff\"",
		"CutSequence":       "\"k\xc3\"",
	} {
		t.Run(name, func(t *testing.T) {
			a := e.do("POST", "/api/users/u1/usage", appToken, `{"idempotency_key": `+key+`, "amount": 1}`)
			require.Equal(t, http.StatusBadRequest, a.code, a.body)
			require.Contains(t, a.json(t)["error"], "not valid UTF-8")
		})
	}
	require.EqualValues(t, 500, e.balance(id), "nothing was debited")

	a := e.do("POST", "/api/users/u1/usage", appToken, `{"idempotency_key": "smile-\ud83d\ude00", "amount": 2}`)
	require.Equal(t, http.StatusOK, a.code, a.body)
	require.Equal(t, "smile-😀", a.json(t)["idempotency_key"], "a whole surrogate pair is a character")
	require.EqualValues(t, 498, e.balance(id))
}

// TestAppAnswersAreNotCached: the app API answers with a user's plan and
// balance, and no browser or proxy may keep them, refusals included.
func TestAppAnswersAreNotCached(t *testing.T) {
	e := newAppEnv(t, appToken)
	for _, tc := range []struct {
		token string
		code  int
	}{{appToken, http.StatusNotFound}, {"", http.StatusUnauthorized}} {
		a := e.do("GET", "/api/users/nobody", tc.token, "")
		require.Equal(t, tc.code, a.code, a.body)
		require.Equal(t, "no-store", a.header.Get("Cache-Control"), "token %q", tc.token)
	}
}
