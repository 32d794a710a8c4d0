package main

import (
	"bytes"
	"context"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	stripemock "github.com/billsync/billsync/mocks/stripe"
	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/providers/stripe"
)

// TestStripeSetupAndCheck: setup creates the endpoint with the feed's
// types and billsync's API version and prints its secret once; run again,
// it updates (and re-enables) the same endpoint; check passes what is
// right and names each problem: a disabled endpoint, a missing type, a key
// that may not read events, an unmapped price.
func TestStripeSetupAndCheck(t *testing.T) {
	var forbidEvents atomic.Bool
	h := testenv.ForTest(t, testenv.Stripe, testenv.Options{Wrap: func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if forbidEvents.Load() && r.URL.Path == "/v1/events" {
				w.WriteHeader(http.StatusForbidden)
				_, _ = w.Write([]byte(`{"error":{"type":"invalid_request_error","message":"The provided key 'rk_test_***' does not have the required permissions for this endpoint."}}`))
				return
			}
			next.ServeHTTP(w, r)
		})
	}})
	t.Setenv("STRIPE_API_KEY", stripemock.DefaultAPIKey)
	t.Setenv("STRIPE_API_KEY_FILE", "")
	t.Setenv("STRIPE_API_URL", h.URL)
	t.Setenv("STRIPE_WEBHOOK_ENDPOINT_ID", "")
	billsync := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := run(context.Background(), args, &out, &out)
		return out.String(), err
	}
	const url = "https://billing.example.com/webhooks/stripe"

	out, err := billsync("stripe", "setup", "--url", url)
	require.NoError(t, err, out)
	secret := regexp.MustCompile(`signing secret \(shown once; set STRIPE_WEBHOOK_SECRET to it\): (whsec_\w+)`).FindStringSubmatch(out)
	require.NotNil(t, secret, out)
	ids := h.Stripe.Fake.WebhookEndpointIDs()
	require.Len(t, ids, 1)
	ep, err := h.Stripe.API.V1WebhookEndpoints.Retrieve(context.Background(), ids[0], nil)
	require.NoError(t, err)
	require.Equal(t, url, ep.URL)
	require.Equal(t, stripe.FeedTypes, ep.EnabledEvents)
	require.Equal(t, stripe.APIVersion, ep.APIVersion)

	out, err = billsync("stripe", "check")
	require.ErrorIs(t, err, errStripeCheck, out)
	require.Equal(t, 1, strings.Count(out, "FAIL"), out)
	require.Contains(t, out, "FAIL every one of 4 active prices maps to a plan (unmapped: price_legacy)")
	require.Contains(t, out, "ok   endpoint "+ids[0]+" ("+url+") is enabled")
	require.Contains(t, out, "ok   the key can read events")

	require.True(t, h.Stripe.Fake.DisableWebhookEndpoint(ids[0]))
	forbidEvents.Store(true)
	out, err = billsync("stripe", "check", "--url", url)
	require.ErrorIs(t, err, errStripeCheck)
	require.Contains(t, out, "FAIL endpoint "+ids[0]+" ("+url+") is disabled")
	require.Contains(t, out, "FAIL read events: the API key lacks the permission to read events")
	forbidEvents.Store(false)

	out, err = billsync("stripe", "setup", "--url", url)
	require.NoError(t, err, out)
	require.Contains(t, out, "updated webhook endpoint "+ids[0])
	require.NotContains(t, out, "whsec_")
	require.Equal(t, ids, h.Stripe.Fake.WebhookEndpointIDs(), "the same endpoint, updated")
	out, _ = billsync("stripe", "check")
	require.Contains(t, out, "ok   endpoint "+ids[0]+" ("+url+") is enabled")

	t.Setenv("STRIPE_WEBHOOK_ENDPOINT_ID", "we_missing")
	out, _ = billsync("stripe", "check")
	require.Contains(t, out, "FAIL no webhook endpoint found (STRIPE_WEBHOOK_ENDPOINT_ID=we_missing)")

	_, err = billsync("stripe", "setup")
	require.ErrorIs(t, err, errUsage)
	_, err = billsync("stripe", "setup", "--url", "not a url")
	require.ErrorContains(t, err, "want an absolute http(s) URL")
}

// TestEndpointMissingTypes: wildcards cover their types; a narrower list
// names what it misses.
func TestEndpointMissingTypes(t *testing.T) {
	require.Empty(t, stripe.EndpointInfo{EnabledEvents: []string{"*"}}.MissingTypes())
	require.Empty(t, stripe.EndpointInfo{EnabledEvents: []string{"customer.*", "invoice.*", "checkout.session.completed", "entitlements.*"}}.MissingTypes())
	missing := stripe.EndpointInfo{EnabledEvents: []string{"customer.subscription.*"}}.MissingTypes()
	require.Contains(t, missing, "invoice.paid")
	require.Contains(t, missing, "customer.deleted")
	require.NotContains(t, missing, "customer.subscription.updated")
}
