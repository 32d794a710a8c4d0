package server_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/mocks/fault"
	stripemock "github.com/billsync/billsync/mocks/stripe"
	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/providers/stripe"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/server"
	"github.com/billsync/billsync/store/storetest"
)

// thinEvent is a signed-to-be thin event (v2.core.event) naming objType
// objID.
func thinEvent(id, objType, objID, context string) []byte {
	return fmt.Appendf(nil, `{"id":%q,"object":"v2.core.event","type":"v1.customer.subscription.updated",`+
		`"created":%q,"context":%s,"related_object":{"id":%q,"type":%q,"url":"/v1/subscriptions/%s"}}`,
		id, time.Now().UTC().Format(time.RFC3339), context, objID, objType, objID)
}

// TestThinEventStoredWithStripeDown: a Stripe thin event is only stored,
// under its related object, even while Stripe refuses every call billsync
// makes: the intake answers 200 and asks Stripe nothing (counted at the
// fake). The worker resolves the object and reconciles the customer once
// Stripe is back: the plan and its grant are applied, the event answered.
func TestThinEventStoredWithStripeDown(t *testing.T) {
	ctx := context.Background()
	st := storetest.NewStore(t)
	h := testenv.ForTest(t, testenv.Stripe, testenv.Options{})
	cus, err := h.Stripe.Customer(ctx, "u_thin")
	require.NoError(t, err)
	sub, err := h.Stripe.Subscribe(ctx, cus, "price_pro")
	require.NoError(t, err)

	v, err := stripe.NewVerifier([]string{secretA}, stripe.DefaultTolerance)
	require.NoError(t, err)
	srv, _ := startIntake(t, server.Config{Inbox: st, Verifiers: []server.Verifier{v}, Ready: st.Ping, StoreTimeout: 10 * time.Second})

	// Stripe down for billsync's key (the test's own driver key still works).
	h.SetFaults(fault.Faults{Error5xxRate: 1, TargetKey: stripemock.DefaultAPIKey})
	h.Stripe.Fake.ResetUsage()
	key := reconcile.Related{Type: "subscription", ID: sub.ID}.Key()
	body := thinEvent("evt_thin_down", "subscription", sub.ID, "null")
	for range 2 { // the event and a copy
		a := deliver(t, srv.URL, body, sign(body, secretA, time.Now()))
		require.Equal(t, http.StatusOK, a.code, a.body)
	}
	gone := thinEvent("evt_thin_gone", "subscription", "sub_never", "null")
	a := deliver(t, srv.URL, gone, sign(gone, secretA, time.Now()))
	require.Equal(t, http.StatusOK, a.code, a.body)
	require.Equal(t, "stored", a.body["status"], "stored for the worker to read: the intake does not ask")
	require.Zero(t, h.Stripe.Fake.KeyUsage(stripemock.DefaultAPIKey).Requests, "the intake asked Stripe")

	ev := storetest.EventByKey(t, st, stripe.Provider, "evt_thin_down")
	require.Equal(t, key, ev.CustomerID, "stored under its related object")
	require.Equal(t, reconcile.EventPending, ev.Status)
	require.Equal(t, 2, ev.SeenCount)
	queued := storetest.Queue(t, st)
	require.Len(t, queued, 2, "one row per object")
	require.Equal(t, key, storetest.QueueRowOf(t, st, stripe.Provider, key).CustomerID)

	// The worker while Stripe is down: the object's read fails and is
	// retried (a second later: one Drain tries each once), nothing is lost.
	backoff := slices.Repeat([]time.Duration{time.Second}, 10)
	w := h.Worker(reconcile.WorkerConfig{Store: st, Backoff: backoff})
	h.Drain(w)
	for _, out := range h.TakeOutcomes() {
		require.Equal(t, reconcile.ResultRetry, out.Result, out.Text)
	}
	require.Positive(t, h.Stripe.Fake.KeyUsage(stripemock.DefaultAPIKey).Requests, "the worker asks Stripe")
	require.Equal(t, reconcile.EventPending, storetest.EventByKey(t, st, stripe.Provider, "evt_thin_down").Status)
	require.Empty(t, storetest.Accounts(t, st))

	// Stripe back: the object is resolved and the customer reconciled.
	h.SetFaults(fault.Faults{})
	storetest.WaitFor(t, "the thin events answered", func() bool {
		h.Drain(w)
		return storetest.EventByKey(t, st, stripe.Provider, "evt_thin_down").Status == reconcile.EventApplied &&
			storetest.EventByKey(t, st, stripe.Provider, "evt_thin_gone").Status == reconcile.EventIgnored
	})
	accounts := storetest.Accounts(t, st)
	require.Len(t, accounts, 1)
	require.Equal(t, cus, accounts[0].CustomerID)
	require.Equal(t, "pro", accounts[0].Plan)
	grants, granted := storetest.LedgerTotal(t, st, accounts[0].ID, "grant")
	require.Equal(t, 1, grants)
	require.Positive(t, granted)
	require.Equal(t, cus, storetest.EventByKey(t, st, stripe.Provider, "evt_thin_down").CustomerID, "the event is its customer's now")
	ignored := storetest.EventByKey(t, st, stripe.Provider, "evt_thin_gone")
	require.Contains(t, ignored.Outcome, "No such subscription", "an object Stripe does not know ends ignored, with the reason")
	require.Empty(t, storetest.Queue(t, st))
}

// TestIntakeThinAndConnectEvents: the intake against a real store: a
// forged thin event is refused, a connected account's events are stored
// as ignored and counted.
func TestIntakeThinAndConnectEvents(t *testing.T) {
	st := storetest.NewStore(t)
	metrics := server.NewMetrics(nil, nil)
	v, err := stripe.NewVerifier([]string{secretA}, stripe.DefaultTolerance)
	require.NoError(t, err)
	v.SetOnConnect(func() { metrics.ObserveConnectEvent(stripe.Provider) })
	cfg := server.Config{Inbox: st, Verifiers: []server.Verifier{v}, Ready: st.Ping, Metrics: metrics, StoreTimeout: 2 * time.Second}
	srv, _ := startIntake(t, cfg)

	t.Run("BadSignature_401NothingStored", func(t *testing.T) {
		before := storetest.Counts(t, st)
		body := thinEvent("evt_thin_forged", "subscription", "sub_1", "null")
		a := deliver(t, srv.URL, body, sign(body, "whsec_wrong", time.Now()))
		require.Equal(t, http.StatusUnauthorized, a.code)
		require.Equal(t, before, storetest.Counts(t, st))
	})

	t.Run("Connect_IgnoredAndCounted", func(t *testing.T) {
		v1 := fmt.Appendf(nil, `{"id":"evt_connect_v1","object":"event","account":"acct_1","api_version":"2025-08-27.basil",`+
			`"created":%d,"type":"invoice.paid","data":{"object":{"id":"in_1","object":"invoice","customer":"cus_elsewhere"}}}`, time.Now().Unix())
		for _, body := range [][]byte{v1, thinEvent("evt_connect_thin", "subscription", "sub_1", `"acct_1"`)} {
			a := deliver(t, srv.URL, body, sign(body, secretA, time.Now()))
			require.Equal(t, http.StatusOK, a.code)
			require.Equal(t, "ignored", a.body["status"])
			require.Equal(t, reconcile.ReasonConnectOff, a.body["reason"])
		}
		resp, err := http.Get(srv.URL + "/metrics")
		require.NoError(t, err)
		defer resp.Body.Close()
		text, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Contains(t, string(text), `billsync_webhook_connect_events_total{provider="stripe"} 2`)
	})
}
