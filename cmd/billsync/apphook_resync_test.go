package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/store/storetest"
)

// TestAppWebhookGetsAResyncWithoutEndpoint (issue 26): `billsync resync`
// run with no app endpoint configured writes a change, and serve, which
// has the endpoint, delivers it, signed: deliveries are created by the
// deliverer from the change feed, not by whichever process wrote the
// change.
func TestAppWebhookGetsAResyncWithoutEndpoint(t *testing.T) {
	e := newSupportEnv(t)
	var mu sync.Mutex
	var got []map[string]any
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		wh, err := standardwebhooks.NewWebhook(testAppSecret)
		require.NoError(t, err)
		body, err := io.ReadAll(r.Body)
		require.NoError(t, err)
		if err := wh.Verify(body, r.Header); err != nil {
			t.Errorf("a delivery failed verification: %v", err)
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		var c map[string]any
		require.NoError(t, json.Unmarshal(body, &c))
		mu.Lock()
		got = append(got, c)
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	defer app.Close()

	addr := freeAddr(t)
	startBillsync(t, "", addr, "DATABASE_URL="+os.Getenv("DATABASE_URL"), "BILLSYNC_APP_WEBHOOK_URL="+app.URL,
		"BILLSYNC_APP_WEBHOOK_SECRET="+testAppSecret, "BILLSYNC_TEST_ARGS=serve -workers 0 -addr "+addr)

	cus := e.customer("u_rs", "rs@example.com", "price_pro")
	t.Setenv("BILLSYNC_APP_WEBHOOK_URL", "") // the resync knows no endpoint
	out, err := e.billsync("resync", "--customer", cus)
	require.NoError(t, err, out)
	require.Contains(t, out, "outcome: applied")

	storetest.WaitFor(t, "the resync's change delivered", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) > 0
	})
	storetest.WaitFor(t, "the delivery recorded", func() bool { // serve records it after the 2xx
		s, err := e.st.AppDeliveryStats(e.ctx)
		require.NoError(t, err)
		return s.Delivered == 1
	})
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, got, 1, "one change, delivered once")
	require.Equal(t, "u_rs", got[0]["user_ref"])
	require.EqualValues(t, 1, got[0]["seq"])
	require.Equal(t, "resync", got[0]["why"].(map[string]any)["trigger"])
}
