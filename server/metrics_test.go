package server_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/providers/stripe"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/server"
	"github.com/billsync/billsync/store/storetest"
)

func TestMetrics(t *testing.T) {
	ctx := context.Background()
	st := storetest.NewStore(t)
	metrics := server.NewMetrics(func(ctx context.Context) (int, int, int, error) {
		q, err := st.QueueDepth(ctx)
		return q.Pending, q.Due, q.Dead, err
	}, nil)
	v, err := stripe.NewVerifier([]string{secretA}, 0)
	require.NoError(t, err)
	srv := httptest.NewServer(server.New(server.Config{Inbox: st, Verifiers: []server.Verifier{v}, Metrics: metrics}))
	defer srv.Close()

	body := eventBody("evt_m", "invoice.paid", "cus_m", "2025-08-27.basil")
	deliver(t, srv.URL, body, sign(body, secretA, time.Now()))
	deliver(t, srv.URL, body, sign(body, secretA, time.Now()))
	deliver(t, srv.URL, body, sign(body, "whsec_wrong", time.Now()))
	other := eventBody("evt_dead", "invoice.paid", "cus_dead", "2025-08-27.basil")
	deliver(t, srv.URL, other, sign(other, secretA, time.Now()))
	_, err = st.Pool().Exec(ctx, `UPDATE reconcile_queue SET status = 'dead' WHERE customer_id = 'cus_dead'`)
	require.NoError(t, err)
	metrics.ObserveReconcile(reconcile.Job{Provider: "stripe"}, reconcile.Outcome{Result: reconcile.ResultDead})

	resp, err := http.Get(srv.URL + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	text, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	for _, line := range []string{
		`billsync_webhook_deliveries_total{answer="stored",provider="stripe"} 2`,
		`billsync_webhook_deliveries_total{answer="duplicate",provider="stripe"} 1`,
		`billsync_webhook_deliveries_total{answer="401",provider="stripe"} 1`,
		`billsync_reconciles_total{provider="stripe",result="dead"} 1`,
		`billsync_queue_customers{state="pending"} 1`,
		`billsync_queue_customers{state="due"} 1`,
		`billsync_queue_customers{state="dead"} 1`,
	} {
		require.Contains(t, string(text), line)
	}
}
