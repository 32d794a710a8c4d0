package server_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/store"
	"github.com/billsync/billsync/store/pgembed"
	"github.com/billsync/billsync/store/storetest"
)

// TestIntakeDatabaseOutage stops PostgreSQL under a running intake: the
// delivery must get 503 (so Stripe retries) and nothing may claim it was
// stored; once the database is back the same delivery is stored.
func TestIntakeDatabaseOutage(t *testing.T) {
	ctx := context.Background()
	cluster, cfg := storetest.PrivateCluster(t)

	st := storetest.OpenStore(t, cluster.URL("billsync"), store.Options{})
	_, err := st.Migrate(ctx)
	require.NoError(t, err)
	srv := newIntake(t, st)

	body := eventBody("evt_outage", "customer.subscription.updated", "cus_outage", "2025-08-27.basil")
	require.NoError(t, cluster.Stop(ctx))

	a := deliver(t, srv.URL, body, sign(body, secretA, time.Now()))
	require.Equal(t, http.StatusServiceUnavailable, a.code)
	require.NotContains(t, a.body, "status")
	resp, err := http.Get(srv.URL + "/readyz")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)

	restarted, err := pgembed.Start(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = restarted.Stop(context.Background()) })

	// The same delivery, retried as Stripe would: stored now, and as new.
	a = deliver(t, srv.URL, body, sign(body, secretA, time.Now()))
	require.Equal(t, http.StatusOK, a.code)
	require.Equal(t, "stored", a.body["status"])
	counts := rowCounts(t, st.Pool())
	require.Equal(t, 1, counts["inbox_events"])
	require.Equal(t, 1, counts["receipts"])
	require.Equal(t, 1, counts["reconcile_queue"])
}
