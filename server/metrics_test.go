package server_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/server"
	"github.com/billsync/billsync/store/storetest"
)

// TestMetrics scrapes the real GET /metrics after real deliveries through
// the intake: each answer moves its own series (a client hanging up is not
// a 500), a reconcile outcome handed to ObserveReconcile (the worker's
// OnOutcome in serve) shows under billsync_reconciles_total, and the queue
// gauge reads the database at scrape time.
func TestMetrics(t *testing.T) {
	st := storetest.NewStore(t)
	metrics := server.NewMetrics(func(ctx context.Context) (int, int, int, error) {
		q, err := st.QueueDepth(ctx)
		return q.Pending, q.Due, q.Dead, err
	}, nil)
	cfg := intakeConfig(t, st)
	cfg.Metrics = metrics
	srv, _ := startIntake(t, cfg)
	series := func(answer string) string {
		return `billsync_webhook_receipts_total{answer="` + answer + `",provider="stripe"}`
	}
	require.Zero(t, metricValue(t, srv.URL, "billsync_webhook_receipts_total"))

	body := eventBody("evt_m", "invoice.paid", "cus_m", "2025-08-27.basil")
	require.Equal(t, http.StatusOK, deliver(t, srv.URL, body, sign(body, secretA, time.Now())).code)
	require.Equal(t, 1, metricValue(t, srv.URL, series("stored")))
	require.Equal(t, http.StatusOK, deliver(t, srv.URL, body, sign(body, secretA, time.Now())).code)
	require.Equal(t, 1, metricValue(t, srv.URL, series("duplicate")))
	require.Equal(t, http.StatusUnauthorized, deliver(t, srv.URL, body, sign(body, "whsec_wrong", time.Now())).code)
	require.Equal(t, 1, metricValue(t, srv.URL, series("401")))
	product := eventBody("evt_p", "product.created", "", "2025-08-27.basil")
	require.Equal(t, http.StatusOK, deliver(t, srv.URL, product, sign(product, secretA, time.Now())).code)
	require.Equal(t, 1, metricValue(t, srv.URL, series("ignored")))

	// A client that sends half its body and hangs up.
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	require.NoError(t, err)
	_, err = c.Write([]byte("POST /webhooks/stripe HTTP/1.1\r\nHost: billsync\r\nContent-Length: 100\r\n\r\n{\"id\":"))
	require.NoError(t, err)
	require.NoError(t, c.Close())
	storetest.WaitFor(t, "the client error is counted", func() bool { return metricValue(t, srv.URL, series("client_error")) == 1 })
	require.Equal(t, 5, metricValue(t, srv.URL, "billsync_webhook_receipts_total"), "one answer per delivery")

	other := eventBody("evt_dead", "invoice.paid", "cus_dead", "2025-08-27.basil")
	deliver(t, srv.URL, other, sign(other, secretA, time.Now()))
	storetest.SetQueueDead(t, st, "stripe", "cus_dead", 0, "")
	metrics.ObserveReconcile(reconcile.Job{Provider: "stripe"}, reconcile.Outcome{Result: reconcile.ResultDead})
	metrics.ObserveReconcile(reconcile.Job{Provider: "stripe"}, reconcile.Outcome{Result: reconcile.ResultApplied})
	metrics.ObserveReconcile(reconcile.Job{Provider: "stripe"}, reconcile.Outcome{Result: reconcile.ResultIgnored, Unmapped: []string{"price_new"}})
	require.Equal(t, 1, metricValue(t, srv.URL, `billsync_unmapped_prices_total{price="price_new",provider="stripe"}`))
	metrics.ObserveReconcile(reconcile.Job{Provider: "stripe"}, reconcile.Outcome{Result: reconcile.ResultUnchanged, Recheck: reconcile.RecheckAgreed})
	require.Equal(t, 1, metricValue(t, srv.URL, `billsync_stale_read_rechecks_total{provider="stripe",second_read="agreed"}`))
	metrics.ObserveSample(reconcile.Sample{Provider: "stripe"})
	metrics.ObserveSample(reconcile.Sample{Provider: "stripe", Drifted: true, Class: reconcile.SampleClassPlan})
	require.Equal(t, 2, metricValue(t, srv.URL, `billsync_sample_accounts_total{provider="stripe"}`))
	require.Equal(t, 1, metricValue(t, srv.URL, `billsync_sample_drifted_total{class="plan",provider="stripe"}`))
	require.Equal(t, 1, metricValue(t, srv.URL, `billsync_sample_drifted_total`), "the equal account is not drifted")

	// Freshness: each answered event once, by its source, at the commit's
	// time; an outcome with no commit time observes nothing.
	at := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	metrics.ObserveReconcile(reconcile.Job{Provider: "stripe"}, reconcile.Outcome{Result: reconcile.ResultStale, AnsweredAt: at,
		Answered: []reconcile.Answered{{Source: "webhook", ReceivedAt: at.Add(-45 * time.Second)}, {Source: "feed", ReceivedAt: at.Add(-90 * time.Second)}}})
	metrics.ObserveReconcile(reconcile.Job{Provider: "stripe"}, reconcile.Outcome{Result: reconcile.ResultStale,
		Answered: []reconcile.Answered{{Source: "webhook", ReceivedAt: at}}})
	fresh := `billsync_trigger_freshness_seconds_bucket{provider="stripe",source=`
	require.Equal(t, 1, metricValue(t, srv.URL, `billsync_trigger_freshness_seconds_count{provider="stripe",source="webhook"}`))
	require.Equal(t, 0, metricValue(t, srv.URL, fresh+`"webhook",le="30"}`))
	require.Equal(t, 1, metricValue(t, srv.URL, fresh+`"webhook",le="60"}`))
	require.Equal(t, 0, metricValue(t, srv.URL, fresh+`"feed",le="60"}`))
	require.Equal(t, 1, metricValue(t, srv.URL, fresh+`"feed",le="120"}`))

	require.Equal(t, 1, metricValue(t, srv.URL, `billsync_reconciles_total{provider="stripe",result="dead"}`))
	require.Equal(t, 1, metricValue(t, srv.URL, `billsync_reconciles_total{provider="stripe",result="applied"}`))
	require.Equal(t, 1, metricValue(t, srv.URL, `billsync_queue_customers{state="pending"}`))
	require.Equal(t, 1, metricValue(t, srv.URL, `billsync_queue_customers{state="due"}`))
	require.Equal(t, 1, metricValue(t, srv.URL, `billsync_queue_customers{state="dead"}`))
}

// TestRenamedMetricsKeepTheirOldName scrapes GET /metrics once and finds
// every renamed metric under its old name too, series for series with the
// same value, its HELP saying what replaces it (docs/metrics.md, "Renamed").
func TestRenamedMetricsKeepTheirOldName(t *testing.T) {
	st := storetest.NewStore(t)
	metrics := server.NewMetrics(nil, nil)
	metrics.CollectAccountChanges(func(context.Context) (reconcile.AppDeliveryStats, error) {
		return reconcile.AppDeliveryStats{LastChangeID: 42, Pending: 1, OldestUndelivered: time.Now().Add(-time.Hour)}, nil
	}, slog.New(slog.DiscardHandler))
	cfg := intakeConfig(t, st)
	cfg.Metrics = metrics
	srv, _ := startIntake(t, cfg)
	body := eventBody("evt_r", "invoice.paid", "cus_r", "2025-08-27.basil")
	require.Equal(t, http.StatusOK, deliver(t, srv.URL, body, sign(body, secretA, time.Now())).code)
	require.Equal(t, http.StatusUnauthorized, deliver(t, srv.URL, body, sign(body, "whsec_wrong", time.Now())).code)

	resp, err := http.Get(srv.URL + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	text, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	help := map[string]string{}              // metric → HELP
	series := map[string]map[string]string{} // metric → labels → value
	for _, line := range strings.Split(string(text), "\n") {
		if rest, ok := strings.CutPrefix(line, "# HELP "); ok {
			name, h, _ := strings.Cut(rest, " ")
			help[name] = h
			continue
		}
		key, value, ok := strings.Cut(line, " ")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		name, labels, _ := strings.Cut(key, "{")
		if series[name] == nil {
			series[name] = map[string]string{}
		}
		series[name][labels] = value
	}
	for old, renamed := range map[string]string{
		"billsync_webhook_deliveries_total":               "billsync_webhook_receipts_total",
		"billsync_app_changes_written_total":              "billsync_account_changes_written_total",
		"billsync_app_changes_oldest_undelivered_seconds": "billsync_account_changes_oldest_undelivered_seconds",
	} {
		require.NotEmpty(t, series[renamed], renamed)
		require.Equal(t, series[renamed], series[old], "%s carries what %s does", old, renamed)
		require.True(t, strings.HasPrefix(help[old], "Deprecated: use "+renamed+"; removed in the next release."), "%s: %s", old, help[old])
		require.False(t, strings.HasPrefix(help[renamed], "Deprecated"), renamed)
	}
	require.Len(t, series["billsync_webhook_receipts_total"], 2, "stored and 401")
}
