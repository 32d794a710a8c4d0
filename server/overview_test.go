package server_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/server"
	"github.com/billsync/billsync/store"
	"github.com/billsync/billsync/store/storetest"
)

// TestConsoleOverview: the first page after sign-in shows the queue (a
// dead customer flagged), the newest sweep, the hour's deliveries and
// reconciles as inline SVG charts, this process's answers and its provider
// requests against the limit; it holds no script, and a search still
// answers on the same address.
func TestConsoleOverview(t *testing.T) {
	e := newAdminEnv(t, adminToken)
	id := e.customer("u1", "u1@example.com", "price_pro")
	storetest.SetQueueDead(t, e.st, "stripe", "cus_gone", 5, "timeout")
	_, err := e.st.StartSweep(context.Background(), "stripe", "", reconcile.RunSweep)
	require.NoError(t, err)
	require.NoError(t, e.st.RecordSamples(context.Background(), []reconcile.Sample{
		{Provider: "stripe", CustomerID: "cus_equal", AccountID: id},
		{Provider: "stripe", CustomerID: "cus_drifted", AccountID: id, Drifted: true, Class: reconcile.SampleClassMissing}})) // missing: not queued

	metrics := server.NewMetrics(nil, nil)
	for range 3 {
		metrics.ObserveProviderRequest("stripe", "200")
	}
	metrics.ObserveReceipt("stripe", "stored")
	metrics.ObserveReceipt("stripe", "401")
	dbNow := time.Now()
	metrics.ObserveSpend(reconcile.SpendView{Provider: "stripe", Reported: true, Total: 6000, Projected: 18000,
		Allocation: 10000, Covered: 10 * 24 * time.Hour,
		Spend: reconcile.Spend{Now: dbNow, Since: dbNow.Add(-10 * 24 * time.Hour), Transactions: 3, Replicas: 2,
			Reads: map[string]int64{"GET /v1/customers/{id}": 6000}},
		Connect: reconcile.ConnectSpend{Reads: map[string]int64{"GET /v1/events": 2000}, Total: 2000, Projected: 6000, Allocation: 11000, Transactions: 22}})
	srv := httptest.NewServer(server.New(server.Config{Inbox: e.st, Metrics: metrics,
		Admin: server.Admin{Token: adminToken, Store: e.st, ProviderLimits: map[string]float64{"stripe": 25}}}))
	t.Cleanup(srv.Close)
	e.url = srv.URL
	b := e.browser()
	resp := b.signIn(adminToken)
	require.Equal(t, "/admin/", resp.Header.Get("Location"), "sign-in opens the overview")

	code, body := b.get("/admin/")
	require.Equal(t, 200, code, body)
	require.Contains(t, body, "<h1>Overview</h1>")
	require.NotContains(t, body, "<script")
	section := func(id string) string {
		t.Helper()
		i := strings.Index(body, `id="`+id+`"`)
		require.GreaterOrEqual(t, i, 0, "no #%s", id)
		return body[i:min(len(body), i+1500)]
	}
	require.Regexp(t, `<div class="tile bad" id="queue">`, body, "a dead customer flags the queue")
	require.Regexp(t, `<span class="big">0</span> pending, <strong>0</strong> due now`, section("queue"))
	require.Contains(t, section("queue"), "1 dead")
	require.Regexp(t, `stripe: <span class="status running">running</span> just now, 0 healed of 0 seen`, section("last-sweep"))
	require.Contains(t, section("unmapped"), "none")
	require.Regexp(t, `<div class="tile bad" id="drifted">`, body, "a drifted sample is flagged")
	require.Contains(t, section("drifted"), `<span class="status dead">missing</span> stripe <a href="/admin/accounts/`+itoa(id)+`"><code>cus_drifted</code></a>`)
	require.NotContains(t, section("drifted"), "cus_equal", "only drifted samples")
	deliveries := section("deliveries")
	require.Contains(t, deliveries, `<svg class="chart"`)
	require.Regexp(t, `new events: <strong>[1-9]\d*</strong>`, deliveries)
	require.Regexp(t, `401 <strong>1</strong>`, deliveries)
	reconciles := section("reconciles")
	require.Regexp(t, `<rect class="applied"[^>]*><title>\d\d:00: 1</title></rect>`, reconciles)
	require.Contains(t, reconciles, "applied: <strong>1</strong>")
	requests := section("requests-stripe")
	require.Contains(t, requests, `<line class="limit"`)
	require.Contains(t, requests, "of a limit of 25/s")
	require.Regexp(t, regexp.MustCompile(`stripe: <strong>0\.\d</strong> requests/s`), requests)
	require.Regexp(t, `<div class="tile bad" id="budget-stripe">`, body, "a pace past the allocation is flagged")
	require.Contains(t, section("budget-stripe"), `stripe: <span class="big">6000</span> reads over the last 10 days, on pace for <strong>18000</strong> over 30 days, of an allocation of <strong>10000</strong>: over it`)
	require.Contains(t, section("budget-stripe"), "3 transactions over 30 days; 2 replicas share the rates")
	require.Regexp(t, `<div class="tile" id="budget-stripe-connect">`, body, "the connected accounts' reads are within their own allocation")
	require.Contains(t, section("budget-stripe-connect"), `stripe on behalf of connected accounts: <span class="big">2000</span> reads, on pace for <strong>6000</strong> over 30 days, of their own allocation of <strong>11000</strong>`)
	require.Contains(t, section("budget-stripe-connect"), "22 connected accounts' transactions over 30 days")
	for series, want := range map[string]int{
		`billsync_provider_read_allocation{provider="stripe"}`:    10000,
		`billsync_provider_transactions_30d{provider="stripe"}`:   3,
		`billsync_connect_read_allocation{provider="stripe"}`:     11000,
		`billsync_connect_reads_projected_30d{provider="stripe"}`: 6000,
		`billsync_connect_transactions_30d{provider="stripe"}`:    22,
	} {
		require.Equal(t, want, metricValue(t, e.url, series), series)
	}
	text := scrapeText(t, e.url)
	require.Contains(t, text, `billsync_provider_reads_30d{operation="GET /v1/customers/{id}",provider="stripe"} 6000`, "the platform's own reads")
	require.NotContains(t, text, `billsync_provider_reads_30d{operation="GET /v1/events"`, "the connected accounts' reads are not the platform's")
	require.Contains(t, text, `billsync_connect_reads_30d{operation="GET /v1/events",provider="stripe"} 2000`)

	// The same address still searches.
	code, body = b.get("/admin/?q=u1%40example.com")
	require.Equal(t, 200, code)
	require.Contains(t, body, `id="results"`)
	require.Contains(t, body, `href="/admin/accounts/`+itoa(id)+`"`)
}

// TestConsoleOverviewSignals: the overview shows the events feed's lag and
// last poll and the webhook endpoint's status while this process runs the
// feed (a disabled endpoint, then a stopped feed, flagged bad), none of
// them when the feed is off, and the app deliveries' oldest undelivered
// change and dead count once a change was written.
func TestConsoleOverviewSignals(t *testing.T) {
	ctx := context.Background()
	const endpoint = "http://app.test/hook"
	st := storetest.OpenStoreWithEndpoints(t, storetest.URL(t), store.Options{}, endpoint)
	newest := time.Now().Add(-5 * time.Minute)
	require.NoError(t, st.SaveEventsFeedPoll(ctx, "stripe", reconcile.EventsFeedPoll{Cursor: newest, NewestEventAt: newest,
		EndpointChecked: true, EndpointID: "we_123", EndpointEnabled: false}))
	storetest.SetFeedCaught(t, st, "stripe", 4)
	overview := func(feeds ...string) string {
		t.Helper()
		srv := httptest.NewServer(server.New(server.Config{Inbox: st,
			Admin: server.Admin{Token: adminToken, Store: st, Changes: st, EventsFeeds: feeds}}))
		t.Cleanup(srv.Close)
		b := (&adminEnv{t: t, st: st, url: srv.URL}).browser()
		b.signIn(adminToken)
		code, body := b.get("/admin/")
		require.Equal(t, 200, code, body)
		return body
	}
	tile := func(bad bool, name, value string) *regexp.Regexp {
		class := "tile"
		if bad {
			class += " bad"
		}
		return regexp.MustCompile(`<div class="` + class + `">\s*<h2>` + regexp.QuoteMeta(name) + `</h2>\s*<p><span class="big">` + value + `</span></p>`)
	}

	body := overview("stripe")
	require.Regexp(t, tile(false, "stripe events feed", `lag 5m\d+s`), body)
	require.Contains(t, body, "4 caught (webhooks late or lost)")
	require.Regexp(t, tile(true, "stripe webhook endpoint", "disabled"), body)
	require.Contains(t, body, "we_123 disabled by the provider")
	require.NotContains(t, body, "oldest undelivered change", "no change written yet")

	storetest.AgeFeedPoll(t, st, "stripe", time.Hour)
	body = overview("stripe")
	require.Regexp(t, tile(true, "stripe events feed", `lag 5m\d+s`), body, "no poll for an hour")
	require.Contains(t, body, "last poll 1h0m")
	body = overview()
	require.NotContains(t, body, "events feed", "the feed is off: its last state is no signal")
	require.NotContains(t, body, "webhook endpoint")

	app := &appEnv{t: t, st: st, plans: testenv.Plans()}
	app.account("stripe", "cus_1", "u1", "price_pro")
	body = overview()
	require.Regexp(t, tile(false, "oldest undelivered change", `\d+s`), body)
	require.Regexp(t, tile(false, "dead app deliveries", "0"), body)
	storetest.FanOut(t, st, endpoint)
	ds, err := st.ClaimDeliveries(ctx, "test", []string{endpoint}, 10, 10, time.Minute)
	require.NoError(t, err)
	require.Len(t, ds, 1)
	require.NoError(t, st.RecordDelivery(ctx, "test", ds[0], reconcile.AppDeliveryAttempt{StatusCode: 410}, reconcile.DeliveryDead, 0))
	body = overview()
	require.Regexp(t, tile(true, "dead app deliveries", "1"), body)
	require.Regexp(t, tile(false, "oldest undelivered change", "none"), body)
}

// scrapeText returns GET /metrics's body.
func scrapeText(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}
