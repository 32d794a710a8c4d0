package stripe_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v82/webhook"

	stripemock "github.com/billsync/billsync/mocks/stripe"
	"github.com/billsync/billsync/providers/stripe"
	"github.com/billsync/billsync/reconcile"
)

// thinBody is a thin event (v2.core.event) of typ naming objType objID.
func thinBody(id, typ, objType, objID, context string) []byte {
	return fmt.Appendf(nil, `{"id":%q,"object":"v2.core.event","type":%q,"livemode":false,`+
		`"created":"2025-12-01T10:15:30Z","context":%s,"related_object":{"id":%q,"type":%q,"url":"/v1/x/%s"}}`,
		id, typ, context, objID, objType, objID)
}

func signed(body []byte, secret string) http.Header {
	p := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: secret, Timestamp: time.Now()})
	return http.Header{"Stripe-Signature": {p.Header}}
}

// TestThinEventsAtTheIntake: the verifier reads a thin event without
// asking Stripe (it has no client to ask): a customer is named as is, a
// subscription or an invoice is stored under the object's key for the
// worker to resolve.
func TestThinEventsAtTheIntake(t *testing.T) {
	t.Parallel()
	const secret = "whsec_thin"
	var connects atomic.Int32
	v, err := stripe.NewVerifier([]string{secret}, 0)
	require.NoError(t, err)
	v.SetOnConnect(func() { connects.Add(1) })

	t.Run("EachRelatedType", func(t *testing.T) {
		for _, tt := range []struct{ typ, objType, objID, customer string }{
			{"v1.customer.updated", "customer", "cus_1", "cus_1"},
			{"v1.customer.subscription.updated", "subscription", "sub_1", "related:subscription:sub_1"},
			{"v1.invoice.payment_failed", "invoice", "in_1", "related:invoice:in_1"},
		} {
			body := thinBody("evt_"+tt.objType, tt.typ, tt.objType, tt.objID, "null")
			d, err := v.Verify(context.Background(), signed(body, secret), body)
			require.NoError(t, err, tt.objType)
			require.Equal(t, tt.customer, d.Event.CustomerID, tt.objType)
			require.Empty(t, d.Event.IgnoreReason, tt.objType)
			require.Equal(t, tt.typ, d.Event.Type)
			require.Equal(t, "evt_"+tt.objType, d.Event.DedupeKey)
			require.Equal(t, time.Date(2025, 12, 1, 10, 15, 30, 0, time.UTC), d.Event.Time)
		}
	})

	t.Run("ErrBadSignature", func(t *testing.T) {
		body := thinBody("evt_forged", "v1.customer.subscription.updated", "subscription", "sub_1", "null")
		_, err := v.Verify(context.Background(), signed(body, "whsec_other"), body)
		require.ErrorIs(t, err, reconcile.ErrBadSignature)
	})

	t.Run("ConnectOffIgnoredAndCounted", func(t *testing.T) {
		thin := thinBody("evt_acct_thin", "v1.customer.subscription.updated", "subscription", "sub_1", `"acct_1Rconnected"`)
		v1 := []byte(`{"id":"evt_acct_v1","object":"event","account":"acct_1Rconnected","api_version":"2025-08-27.basil",` +
			`"created":1764584400,"type":"invoice.paid","data":{"object":{"id":"in_1","object":"invoice","customer":"cus_1"}}}`)
		for _, body := range [][]byte{thin, v1} {
			d, err := v.Verify(context.Background(), signed(body, secret), body)
			require.NoError(t, err)
			require.Equal(t, reconcile.ReasonConnectOff, d.Event.IgnoreReason)
			account, _ := reconcile.SplitConnected(d.Event.CustomerID)
			require.Equal(t, "acct_1Rconnected", account, "stored under its account")
		}
		require.Equal(t, int32(2), connects.Load())
	})
}

// TestCustomerOf: the worker's read of a thin event's related object, one
// retrieve each; an object Stripe does not know is permanent (its events
// end ignored), Stripe down is transient (retried by the queue).
func TestCustomerOf(t *testing.T) {
	t.Parallel()
	f := newFake(t, stripemock.Options{}, nil)
	cus := f.customer(t, nil)
	sub := f.subscribe(t, cus, "price_pro")
	require.NotNil(t, sub.LatestInvoice)
	var attempts atomic.Int32
	cfg := testConfig(f.URL)
	cfg.RetryMax = 2
	cfg.OnAttempt = func(string) { attempts.Add(1) }
	c := newTestClient(t, cfg)
	ctx := context.Background()

	for _, obj := range []reconcile.Related{{Type: "subscription", ID: sub.ID}, {Type: "invoice", ID: sub.LatestInvoice.ID}} {
		attempts.Store(0)
		customer, err := c.CustomerOf(ctx, obj)
		require.NoError(t, err, obj)
		require.Equal(t, cus, customer, obj)
		require.Equal(t, int32(1), attempts.Load(), "one retrieve: %s", obj)
	}

	attempts.Store(0)
	_, err := c.CustomerOf(ctx, reconcile.Related{Type: "subscription", ID: "sub_nonexistent"})
	require.True(t, reconcile.IsPermanent(err), "%v", err)
	require.Contains(t, err.Error(), "No such subscription")
	require.Equal(t, int32(1), attempts.Load(), "a 404 is not retried")

	_, err = c.CustomerOf(ctx, reconcile.Related{Type: "payment_intent", ID: "pi_1"})
	require.True(t, reconcile.IsPermanent(err), "%v", err)

	attempts.Store(0)
	f.SetFaults(stripemock.Faults{Error5xxRate: 1})
	_, err = c.CustomerOf(ctx, reconcile.Related{Type: "invoice", ID: sub.LatestInvoice.ID})
	require.Error(t, err)
	require.False(t, reconcile.IsPermanent(err), "Stripe down is retried: %v", err)
	require.Equal(t, int32(3), attempts.Load(), "retried within the client's policy")
}

// TestHealthEventResolvedAtTheIntake: the health event that says Stripe
// failed to create an event names no object (its impact is in the data a
// retrieve gives): the intake stores it under the event itself, for the
// worker; one from a connected account is ignored as any Connect event.
func TestHealthEventResolvedAtTheIntake(t *testing.T) {
	t.Parallel()
	const secret = "whsec_health"
	v, err := stripe.NewVerifier([]string{secret}, 0)
	require.NoError(t, err)
	body := []byte(`{"id":"evt_health_1","object":"v2.core.event","type":"v2.core.health.event_generation_failure.resolved",` +
		`"livemode":false,"created":"2025-12-01T10:15:30Z","context":null}`)
	d, err := v.Verify(context.Background(), signed(body, secret), body)
	require.NoError(t, err)
	require.Empty(t, d.Event.IgnoreReason)
	require.Equal(t, "related:v2.core.event:evt_health_1", d.Event.CustomerID)

	connect := []byte(`{"id":"evt_health_2","object":"v2.core.event","type":"v2.core.health.event_generation_failure.resolved",` +
		`"livemode":false,"created":"2025-12-01T10:15:30Z","context":"acct_1Rconnected"}`)
	d, err = v.Verify(context.Background(), signed(connect, secret), connect)
	require.NoError(t, err)
	require.Equal(t, reconcile.ReasonConnectOff, d.Event.IgnoreReason)

	v.ServeConnect(stripe.Connect{Policy: reconcile.ConnectPolicy{Mode: reconcile.ConnectAll}})
	d, err = v.Verify(context.Background(), signed(connect, secret), connect)
	require.NoError(t, err)
	require.Empty(t, d.Event.IgnoreReason)
	require.Equal(t, "acct_1Rconnected/related:v2.core.event:evt_health_2", d.Event.CustomerID)
}

// TestCustomerOfALostEvent: the worker reads the lost event's object from
// the health event's impact; a connected account's, or an object that
// names no customer, is permanent.
func TestCustomerOfALostEvent(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, impact, customer, problem string
	}{
		{"Customer", `{"event_type":"customer.updated","related_object":{"id":"cus_9","type":"customer"}}`, "cus_9", ""},
		{"ConnectCustomer", `{"context":"acct_1R","event_type":"customer.updated","related_object":{"id":"cus_9","type":"customer"}}`, "acct_1R/cus_9", ""},
		{"NotAnAccount", `{"context":"org_1R","event_type":"customer.updated","related_object":{"id":"cus_9","type":"customer"}}`, "", "not a connected account"},
		{"Product", `{"event_type":"product.updated","related_object":{"id":"prod_9","type":"product"}}`, "", `"product"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				require.Equal(t, "/v2/core/events/evt_h", r.URL.Path)
				w.Header().Set("Content-Type", "application/json")
				fmt.Fprintf(w, `{"id":"evt_h","object":"v2.core.event","type":%q,"data":{"impact":%s}}`, stripe.HealthEventResolved, tt.impact)
			}))
			t.Cleanup(hs.Close)
			customer, err := newTestClient(t, testConfig(hs.URL)).CustomerOf(context.Background(),
				reconcile.Related{Type: "v2.core.event", ID: "evt_h"})
			if tt.problem == "" {
				require.NoError(t, err)
				require.Equal(t, tt.customer, customer)
				return
			}
			require.True(t, reconcile.IsPermanent(err), "%v", err)
			require.ErrorContains(t, err, tt.problem)
		})
	}
}
