package server_test

import (
	"context"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/server"
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
	_, err := e.st.StartSweep(context.Background(), "stripe")
	require.NoError(t, err)
	metrics := server.NewMetrics(nil, nil)
	for range 3 {
		metrics.ObserveProviderRequest("stripe", "200")
	}
	metrics.ObserveDelivery("stripe", "stored")
	metrics.ObserveDelivery("stripe", "401")
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

	// The same address still searches.
	code, body = b.get("/admin/?q=u1%40example.com")
	require.Equal(t, 200, code)
	require.Contains(t, body, `id="results"`)
	require.Contains(t, body, `href="/admin/accounts/`+itoa(id)+`"`)
}
