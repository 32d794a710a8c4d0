package server_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/server"
	"github.com/billsync/billsync/store"
	"github.com/billsync/billsync/store/storetest"
)

// TestConsoleShowsWhatTheAppWasTold: the account page lists the account's
// changes; a delivery given up shows on the failures page and the
// Deliveries page with its attempts, and Retry now queues it again.
func TestConsoleShowsWhatTheAppWasTold(t *testing.T) {
	ctx := context.Background()
	const endpoint = "http://app.test/hook"
	st := storetest.OpenStoreWithEndpoints(t, storetest.URL(t), store.Options{}, endpoint)
	srv := httptest.NewServer(server.New(server.Config{Inbox: st,
		Admin: server.Admin{Token: adminToken, Store: st, Changes: st}}))
	t.Cleanup(srv.Close)
	app := &appEnv{t: t, st: st, plans: testenv.Plans()}
	id := app.account("stripe", "cus_1", "u1", "price_pro")
	e := &adminEnv{t: t, st: st, url: srv.URL}
	b := e.browser()
	require.Equal(t, http.StatusSeeOther, b.signIn(adminToken).StatusCode)

	code, body := b.get("/admin/accounts/" + itoa(id))
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "What the app was told")
	require.Regexp(t, `<td data-label="Seq" class="num">1</td>\s*<td data-label="When">[^<]+</td>\s*<td data-label="Changed">created</td>\s*<td data-label="Plan">pro</td>\s*<td data-label="Balance" class="num">500</td>`, body)

	storetest.FanOut(t, st, endpoint)
	ds, err := st.ClaimDeliveries(ctx, "test", []string{endpoint}, 10, 10, time.Minute)
	require.NoError(t, err)
	require.Len(t, ds, 1)
	require.NoError(t, st.RecordDelivery(ctx, "test", ds[0], reconcile.AppDeliveryAttempt{StatusCode: 500, Took: 12 * time.Millisecond,
		Error: "answered 500 Internal Server Error"}, reconcile.DeliveryDead, 0))

	_, body = b.get("/admin/events")
	require.Contains(t, body, "Changes the app has not received")
	require.Contains(t, body, "1 given up")

	_, body = b.get("/admin/deliveries")
	require.Contains(t, body, "HTTP 500, 12ms, answered 500 Internal Server Error")
	require.Contains(t, body, `id="retry-`+itoa(ds[0].ChangeID)+`"`)
	resp, _ := b.do("POST", "/admin/deliveries/"+itoa(ds[0].ChangeID)+"/retry",
		url.Values{"csrf": {b.csrf("/admin/deliveries")}, "endpoint": {endpoint}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	stats, err := st.AppDeliveryStats(ctx)
	require.NoError(t, err)
	require.Equal(t, reconcile.AppDeliveryStats{LastChangeID: ds[0].ChangeID, Pending: 1, OldestUndelivered: stats.OldestUndelivered}, stats)
	_, body = b.get(resp.Header.Get("Location"))
	require.Contains(t, body, "is queued again")
	require.NotContains(t, body, `id="retry-`, "a pending delivery has no Retry button")

	resp, _ = b.do("POST", "/admin/deliveries/"+itoa(ds[0].ChangeID)+"/retry",
		url.Values{"endpoint": {endpoint}})
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "no CSRF token, no retry")
}

// TestConsoleShowsMeterChanges: a named meter's debit is on the account
// page with the meter's balance before → after and its ledger key.
func TestConsoleShowsMeterChanges(t *testing.T) {
	st := storetest.NewStore(t)
	srv := httptest.NewServer(server.New(server.Config{Inbox: st,
		Admin: server.Admin{Token: adminToken, Store: st, Changes: st}}))
	t.Cleanup(srv.Close)
	app := &appEnv{t: t, st: st, plans: testenv.FeaturePlans()}
	id := app.account("stripe", "cus_1", "u1", "price_pro")
	_, err := st.Debit(context.Background(), reconcile.Debit{UserRef: "u1", Feature: "ai_credits", Key: "k", Amount: 50},
		reconcile.DecideDebit)
	require.NoError(t, err)
	e := &adminEnv{t: t, st: st, url: srv.URL}
	b := e.browser()
	require.Equal(t, http.StatusSeeOther, b.signIn(adminToken).StatusCode)

	_, body := b.get("/admin/accounts/" + itoa(id))
	require.Regexp(t, `<td data-label="Changed">meters</td>\s*<td data-label="Plan">pro → pro</td>\s*<td data-label="Balance" class="num">500 → 500<br><code class="small">ai_credits</code> 1000 → 950</td>`+
		`\s*<td data-label="Why">usage \(app\) <code class="small">usage.ai_credits:`+itoa(id)+`:k</code></td>`, body)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
