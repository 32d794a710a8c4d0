package stripe_test

import (
	"context"
	"fmt"
	"net/http"
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

func TestThinEvents(t *testing.T) {
	t.Parallel()
	const secret = "whsec_thin"
	f := newFake(t, stripemock.Options{}, nil)
	cus := f.customer(t, nil)
	sub := f.subscribe(t, cus, "price_pro")
	require.NotNil(t, sub.LatestInvoice)
	invoiceID := sub.LatestInvoice.ID

	setup := func(t *testing.T) (*stripe.Verifier, *atomic.Int32, *atomic.Int32) {
		var attempts, connects atomic.Int32
		cfg := testConfig(f.URL)
		cfg.RetryMax = 2
		cfg.OnAttempt = func(string) { attempts.Add(1) }
		v, err := stripe.NewVerifier([]string{secret}, 0)
		require.NoError(t, err)
		v.SetResolver(newTestClient(t, cfg))
		v.SetOnConnect(func() { connects.Add(1) })
		return v, &attempts, &connects
	}

	t.Run("ResolvesEachRelatedType", func(t *testing.T) {
		v, attempts, _ := setup(t)
		for _, tt := range []struct {
			typ, objType, objID string
			requests            int32
		}{
			{"v1.customer.updated", "customer", cus, 0},
			{"v1.customer.subscription.updated", "subscription", sub.ID, 1},
			{"v1.invoice.payment_failed", "invoice", invoiceID, 1},
		} {
			attempts.Store(0)
			body := thinBody("evt_"+tt.objType, tt.typ, tt.objType, tt.objID, "null")
			d, err := v.VerifyContext(context.Background(), signed(body, secret), body)
			require.NoError(t, err, tt.objType)
			require.Equal(t, cus, d.Event.CustomerID, tt.objType)
			require.Empty(t, d.Event.IgnoreReason, tt.objType)
			require.Equal(t, tt.typ, d.Event.Type)
			require.Equal(t, "evt_"+tt.objType, d.Event.DedupeKey)
			require.Equal(t, time.Date(2025, 12, 1, 10, 15, 30, 0, time.UTC), d.Event.Time)
			require.Equal(t, tt.requests, attempts.Load(), "at most one retrieve: %s", tt.objType)
		}
	})

	t.Run("UnknownObjectIgnored", func(t *testing.T) {
		v, attempts, _ := setup(t)
		body := thinBody("evt_gone", "v1.customer.subscription.deleted", "subscription", "sub_nonexistent", "null")
		d, err := v.VerifyContext(context.Background(), signed(body, secret), body)
		require.NoError(t, err)
		require.Empty(t, d.Event.CustomerID)
		require.Contains(t, d.Event.IgnoreReason, "thin event's related subscription sub_nonexistent:")
		require.Contains(t, d.Event.IgnoreReason, "No such subscription")
		require.Equal(t, int32(1), attempts.Load(), "a 404 is not retried")
	})

	t.Run("StripeDownIsUnavailable", func(t *testing.T) {
		v, attempts, _ := setup(t)
		down := newFake(t, stripemock.Options{}, nil)
		cfg := testConfig(down.URL)
		cfg.RetryMax = 2
		cfg.OnAttempt = func(string) { attempts.Add(1) }
		v.SetResolver(newTestClient(t, cfg))
		down.SetFaults(stripemock.Faults{Error5xxRate: 1})
		body := thinBody("evt_down", "v1.invoice.paid", "invoice", invoiceID, "null")
		_, err := v.VerifyContext(context.Background(), signed(body, secret), body)
		require.Error(t, err)
		require.NotErrorIs(t, err, reconcile.ErrBadSignature)
		var u interface{ Unavailable() bool }
		require.ErrorAs(t, err, &u)
		require.True(t, u.Unavailable())
		require.Equal(t, int32(3), attempts.Load(), "retried within the client's policy")

		// The intake's deadline bounds the retries: the fake would answer
		// (200) after a second, so only the deadline makes this an error.
		down.SetFaults(stripemock.Faults{Latency: time.Second})
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		_, err = v.VerifyContext(ctx, signed(body, secret), body)
		require.ErrorAs(t, err, &u)
		require.ErrorIs(t, err, context.DeadlineExceeded)
	})

	t.Run("ErrBadSignatureAsksNothing", func(t *testing.T) {
		v, attempts, _ := setup(t)
		body := thinBody("evt_forged", "v1.customer.subscription.updated", "subscription", sub.ID, "null")
		_, err := v.VerifyContext(context.Background(), signed(body, "whsec_other"), body)
		require.ErrorIs(t, err, reconcile.ErrBadSignature)
		require.Zero(t, attempts.Load())
	})

	t.Run("ConnectIgnoredAndCounted", func(t *testing.T) {
		v, attempts, connects := setup(t)
		thin := thinBody("evt_acct_thin", "v1.customer.subscription.updated", "subscription", sub.ID, `"acct_1Rconnected"`)
		v1 := fmt.Appendf(nil, `{"id":"evt_acct_v1","object":"event","account":"acct_1Rconnected","api_version":"2025-08-27.basil",`+
			`"created":1764584400,"type":"invoice.paid","data":{"object":{"id":"in_1","object":"invoice","customer":%q}}}`, cus)
		for _, body := range [][]byte{thin, v1} {
			d, err := v.VerifyContext(context.Background(), signed(body, secret), body)
			require.NoError(t, err)
			require.Equal(t, stripe.ReasonConnect, d.Event.IgnoreReason)
			require.Empty(t, d.Event.CustomerID)
		}
		require.Equal(t, int32(2), connects.Load())
		require.Zero(t, attempts.Load(), "a connected account's objects are never read")
	})

	t.Run("VerifyWithoutContextNeverCalls", func(t *testing.T) {
		v, attempts, _ := setup(t)
		body := thinBody("evt_plain", "v1.customer.subscription.updated", "subscription", sub.ID, "null")
		d, err := v.Verify(signed(body, secret), body)
		require.NoError(t, err)
		require.Contains(t, d.Event.IgnoreReason, "no Stripe client is configured")
		require.Zero(t, attempts.Load())
	})
}
