package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/server"
	"github.com/billsync/billsync/store/storetest"
)

// newFeatureAppEnv is newAppEnv with the feature plans, which the app API
// declares too.
func newFeatureAppEnv(t *testing.T) *appEnv {
	t.Helper()
	e := &appEnv{t: t, st: storetest.NewStore(t), plans: testenv.FeaturePlans()}
	srv := httptest.NewServer(server.New(server.Config{Inbox: e.st,
		Admin: server.Admin{Token: adminToken, Store: e.st},
		App:   server.App{Token: appToken, Store: e.st, Plans: e.plans, ChangeFeed: e.st}}))
	t.Cleanup(srv.Close)
	e.url = srv.URL
	return e
}

func (e *appEnv) debitMeter(userRef, feature, key string, amount int64) appAnswer {
	e.t.Helper()
	return e.do("POST", "/api/users/"+userRef+"/usage", appToken,
		fmt.Sprintf(`{"feature": %q, "idempotency_key": %q, "amount": %d}`, feature, key, amount))
}

// TestAppFeatures: the user's answer lists every declared feature with
// its source; one feature's answer is {type, allowed, limit, used,
// remaining, source}; the plan without a feature answers allowed: false;
// an unknown feature is 404 naming the ones that exist.
func TestAppFeatures(t *testing.T) {
	e := newFeatureAppEnv(t)
	e.account("stripe", "cus_pro", "pro_user", "price_pro")
	e.account("stripe", "cus_free", "free_user", "price_free")

	user := e.do("GET", "/api/users/pro_user", appToken, "")
	require.Equal(t, http.StatusOK, user.code, user.body)
	require.Equal(t, map[string]any{
		"ai_credits": map[string]any{"type": "metered", "allowed": true, "limit": 1000.0, "used": 0.0, "remaining": 1000.0, "source": "plan:pro"},
		"export":     map[string]any{"type": "boolean", "allowed": true, "limit": nil, "used": nil, "remaining": nil, "source": "plan:pro"},
		"seats":      map[string]any{"type": "limit", "allowed": true, "limit": 5.0, "used": nil, "remaining": nil, "source": "plan:pro"},
		"sso":        map[string]any{"type": "boolean", "allowed": false, "limit": nil, "used": nil, "remaining": nil, "source": nil},
	}, user.json(t)["features"])
	require.EqualValues(t, 500, user.json(t)["balance"])

	seats := e.do("GET", "/api/users/pro_user/features/seats", appToken, "")
	require.Equal(t, http.StatusOK, seats.code, seats.body)
	require.JSONEq(t, `{"type":"limit","allowed":true,"limit":5,"used":null,"remaining":null,"source":"plan:pro"}`, seats.body)

	export := e.do("GET", "/api/users/free_user/features/export", appToken, "")
	require.Equal(t, http.StatusOK, export.code, export.body)
	require.JSONEq(t, `{"type":"boolean","allowed":false,"limit":null,"used":null,"remaining":null,"source":null}`, export.body)

	unknown := e.do("GET", "/api/users/pro_user/features/exprot", appToken, "")
	require.Equal(t, http.StatusNotFound, unknown.code, unknown.body)
	require.Equal(t, []any{"ai_credits", "export", "seats", "sso"}, unknown.json(t)["features"])
	require.Contains(t, unknown.json(t)["error"], `unknown feature "exprot"`)

	nobody := e.do("GET", "/api/users/nobody/features/seats", appToken, "")
	require.Equal(t, http.StatusNotFound, nobody.code, nobody.body)
	require.Nil(t, nobody.json(t)["features"], "an unknown user is not an unknown feature")

	require.Equal(t, http.StatusUnauthorized, e.do("GET", "/api/users/pro_user/features/seats", "", "").code)
}

// TestAppDebitMeter: a debit names its meter and is answered with that
// meter's balance; the feature answer counts it; a feature that is not
// metered is 400, an unknown one 404, and neither writes anything.
func TestAppDebitMeter(t *testing.T) {
	e := newFeatureAppEnv(t)
	id := e.account("stripe", "cus_1", "u1", "price_pro")
	res := e.debitMeter("u1", "ai_credits", "k1", 250)
	require.Equal(t, http.StatusOK, res.code, res.body)
	require.Equal(t, "ai_credits", res.json(t)["feature"])
	require.EqualValues(t, 750, res.json(t)["balance"])

	check := e.do("GET", "/api/users/u1/features/ai_credits", appToken, "")
	require.JSONEq(t, `{"type":"metered","allowed":true,"limit":1000,"used":250,"remaining":750,"source":"plan:pro"}`, check.body)
	require.EqualValues(t, 500, e.balance(id), "the default meter is untouched")

	before := storetest.Tables(t, e.st)
	notMetered := e.debitMeter("u1", "seats", "k2", 1)
	require.Equal(t, http.StatusBadRequest, notMetered.code, notMetered.body)
	unknown := e.debitMeter("u1", "credits", "k3", 1)
	require.Equal(t, http.StatusNotFound, unknown.code, unknown.body)
	require.Equal(t, []any{"ai_credits", "export", "seats", "sso"}, unknown.json(t)["features"])
	short := e.debitMeter("u1", "ai_credits", "k4", 751)
	require.Equal(t, http.StatusConflict, short.code, short.body)
	require.Equal(t, "ai_credits", short.json(t)["feature"])
	require.EqualValues(t, 750, short.json(t)["balance"])
	require.Equal(t, before, storetest.Tables(t, e.st))
}

// TestAppConcurrentDebitsPerMeter is TestAppConcurrentDebits on two
// meters at once: debits of the default meter (500) and of ai_credits
// (1000) race; neither meter is ever overdrawn, each grants exactly what
// it held, and neither touches the other.
func TestAppConcurrentDebitsPerMeter(t *testing.T) {
	e := newFeatureAppEnv(t)
	id := e.account("stripe", "cus_1", "u1", "price_pro")
	const n, amount = 50, 30
	meters := map[string]int64{"": 500, "ai_credits": 1000}
	answers := map[string][]appAnswer{"": make([]appAnswer, n), "ai_credits": make([]appAnswer, n)}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for meter := range meters {
		for i := range n {
			wg.Go(func() {
				<-start
				answers[meter][i] = e.debitMeter("u1", meter, fmt.Sprintf("req-%d", i), amount)
			})
		}
	}
	close(start)
	wg.Wait()

	rows := storetest.Meters(t, e.st, id)
	for meter, held := range meters {
		ok := 0
		balances := map[float64]bool{}
		for _, a := range answers[meter] {
			switch a.code {
			case http.StatusOK:
				ok++
				b := a.json(t)["balance"].(float64)
				require.False(t, balances[b], "meter %q: two debits answered balance %v", meter, b)
				balances[b] = true
			case http.StatusConflict:
				require.Equal(t, float64(held%amount), a.json(t)["balance"], meter)
			default:
				t.Fatalf("meter %q: %d %s", meter, a.code, a.body)
			}
		}
		require.EqualValues(t, held/amount, ok, meter)
		require.Equal(t, storetest.MeterRows{Grants: 1, Usages: int(held / amount), Sum: held % amount}, rows[meter], meter)
	}
	require.Equal(t, int64(500%amount), e.balance(id))
}

// TestConsoleShowsFeatures: the account page lists the features with
// value and source, and each meter's figures for the period.
func TestConsoleShowsFeatures(t *testing.T) {
	e := newFeatureAppEnv(t)
	id := e.account("stripe", "cus_1", "u1", "price_pro")
	require.Equal(t, http.StatusOK, e.debitMeter("u1", "ai_credits", "k1", 250).code)
	b := (&adminEnv{t: t, url: e.url}).browser()
	b.signIn(adminToken)
	code, body := b.get(fmt.Sprintf("/admin/accounts/%d", id))
	require.Equal(t, http.StatusOK, code, body)
	for _, row := range []string{
		`<tr><td data-label="Feature"><code>seats</code></td><td data-label="Type">limit</td><td data-label="Value" class="num">5</td><td data-label="Source"><code>plan:pro</code></td></tr>`,
		`<tr><td data-label="Feature"><code>export</code></td><td data-label="Type">boolean</td><td data-label="Value" class="num">on</td><td data-label="Source"><code>plan:pro</code></td></tr>`,
		`<tr><td data-label="Feature"><code>ai_credits</code></td><td data-label="Type">metered</td><td data-label="Value" class="num">1000</td><td data-label="Source"><code>plan:pro</code></td></tr>`,
		`<tr><td data-label="Meter"><code>ai_credits</code></td><td data-label="Granted this period" class="num">1000</td><td data-label="Used" class="num">250</td><td data-label="Balance" class="num">750</td></tr>`,
	} {
		require.Contains(t, body, row)
	}
	require.Contains(t, body, `<dd id="balance">500`)
	require.Contains(t, body, `usage <code>ai_credits</code>`)
	require.NotContains(t, body, "sso", "a feature nothing grants is not listed as the account's")
}

// TestFeedTellsMeterDebits: a debit of a named meter through the app API
// is in the change feed (checked against the OpenAPI document): the
// meter's balance before → after, its move naming the meter, no default
// ledger move, the default balance unchanged.
func TestFeedTellsMeterDebits(t *testing.T) {
	e := newFeatureAppEnv(t)
	e.account("stripe", "cus_1", "u1", "price_pro")
	require.Equal(t, http.StatusOK, e.debitMeter("u1", "ai_credits", "k1", 50).code)

	var changes []map[string]any
	storetest.WaitFor(t, "two changes in the feed", func() bool {
		a := e.do("GET", "/api/changes", appToken, "")
		require.Equal(t, http.StatusOK, a.code, a.body)
		var page struct {
			Changes []map[string]any `json:"changes"`
		}
		require.NoError(t, json.Unmarshal([]byte(a.body), &page))
		changes = page.Changes
		return len(changes) >= 2
	})
	require.Len(t, changes, 2)
	debit := changes[1]
	require.Equal(t, []any{"meters"}, debit["changed"])
	before, after := debit["before"].(map[string]any), debit["after"].(map[string]any)
	require.Equal(t, map[string]any{"ai_credits": 1000.0}, before["meters"])
	require.Equal(t, map[string]any{"ai_credits": 950.0}, after["meters"])
	require.Equal(t, 500.0, before["balance"])
	require.Equal(t, 500.0, after["balance"])
	require.NotContains(t, debit, "ledger", "the default meter did not move")
	moves := debit["ledger_moves"].([]any)
	require.Len(t, moves, 1)
	require.Equal(t, "ai_credits", moves[0].(map[string]any)["meter"])
	require.Equal(t, -50.0, moves[0].(map[string]any)["delta"])
}
