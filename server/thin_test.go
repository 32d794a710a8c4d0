package server_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	stripemock "github.com/billsync/billsync/mocks/stripe"
	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/providers/stripe"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/server"
	"github.com/billsync/billsync/store/storetest"
)

// TestIntakeThinAndConnectEvents: the intake wired as serve wires it (the
// Stripe verifier resolving thin events through billsync's client, connect
// events counted) against the fake Stripe and a real store.
func TestIntakeThinAndConnectEvents(t *testing.T) {
	ctx := context.Background()
	st := storetest.NewStore(t)
	h := testenv.ForTest(t, testenv.Stripe, testenv.Options{})
	cus, err := h.Stripe.Customer(ctx, "u_thin")
	require.NoError(t, err)
	sub, err := h.Stripe.Subscribe(ctx, cus, "price_pro")
	require.NoError(t, err)

	metrics := server.NewMetrics(nil, nil)
	v, err := stripe.NewVerifier([]string{secretA}, stripe.DefaultTolerance)
	require.NoError(t, err)
	v.SetResolver(h.Stripe.Client)
	v.SetOnConnect(func() { metrics.ObserveConnectEvent(stripe.Provider) })
	cfg := server.Config{Inbox: st, Verifiers: []server.Verifier{v}, Ready: st.Ping, Metrics: metrics, StoreTimeout: 2 * time.Second}
	srv, _ := startIntake(t, cfg)

	thin := func(id, objType, objID, context string) []byte {
		return fmt.Appendf(nil, `{"id":%q,"object":"v2.core.event","type":"v1.customer.subscription.updated",`+
			`"created":%q,"context":%s,"related_object":{"id":%q,"type":%q,"url":"/v1/subscriptions/%s"}}`,
			id, time.Now().UTC().Format(time.RFC3339), context, objID, objType, objID)
	}

	t.Run("StripeDown_503NothingStored", func(t *testing.T) {
		h.Stripe.Fake.SetFaults(stripemock.Faults{Error5xxRate: 1})
		defer h.Stripe.Fake.SetFaults(stripemock.Faults{})
		before := storetest.Counts(t, st)
		body := thin("evt_thin_down", "subscription", sub.ID, "null")
		a := deliver(t, srv.URL, body, sign(body, secretA, time.Now()))
		require.Equal(t, http.StatusServiceUnavailable, a.code)
		require.NotEmpty(t, a.header.Get("Retry-After"))
		require.Equal(t, before, storetest.Counts(t, st), "nothing stored: Stripe delivers again")
	})

	t.Run("BadSignature_401NothingStored", func(t *testing.T) {
		before := storetest.Counts(t, st)
		body := thin("evt_thin_forged", "subscription", sub.ID, "null")
		a := deliver(t, srv.URL, body, sign(body, "whsec_wrong", time.Now()))
		require.Equal(t, http.StatusUnauthorized, a.code)
		require.Equal(t, before, storetest.Counts(t, st))
	})

	t.Run("Resolved_StoredAndQueued", func(t *testing.T) {
		body := thin("evt_thin_ok", "subscription", sub.ID, "null")
		a := deliver(t, srv.URL, body, sign(body, secretA, time.Now()))
		require.Equal(t, http.StatusOK, a.code, a.body)
		require.Equal(t, "stored", a.body["status"])
		ev := storetest.EventByKey(t, st, stripe.Provider, "evt_thin_ok")
		require.Equal(t, cus, ev.CustomerID)
		require.Equal(t, reconcile.EventPending, ev.Status)
		queued := 0
		for _, q := range storetest.Queue(t, st) {
			if q.CustomerID == cus {
				queued++
			}
		}
		require.Equal(t, 1, queued)
	})

	t.Run("UnknownObject_Ignored", func(t *testing.T) {
		body := thin("evt_thin_unknown", "subscription", "sub_never", "null")
		a := deliver(t, srv.URL, body, sign(body, secretA, time.Now()))
		require.Equal(t, http.StatusOK, a.code)
		require.Equal(t, "ignored", a.body["status"])
		require.Contains(t, a.body["reason"], "No such subscription")
	})

	t.Run("Connect_IgnoredAndCounted", func(t *testing.T) {
		v1 := fmt.Appendf(nil, `{"id":"evt_connect_v1","object":"event","account":"acct_1","api_version":"2025-08-27.basil",`+
			`"created":%d,"type":"invoice.paid","data":{"object":{"id":"in_1","object":"invoice","customer":"cus_elsewhere"}}}`, time.Now().Unix())
		for _, body := range [][]byte{v1, thin("evt_connect_thin", "subscription", sub.ID, `"acct_1"`)} {
			a := deliver(t, srv.URL, body, sign(body, secretA, time.Now()))
			require.Equal(t, http.StatusOK, a.code)
			require.Equal(t, "ignored", a.body["status"])
			require.Equal(t, "connected accounts are not configured", a.body["reason"])
		}
		resp, err := http.Get(srv.URL + "/metrics")
		require.NoError(t, err)
		defer resp.Body.Close()
		text, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Contains(t, string(text), `billsync_webhook_connect_events_total{provider="stripe"} 2`)
	})
}
