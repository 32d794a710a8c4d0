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
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store"
	"github.com/billsync/billsync/store/storetest"
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
	secret := regexp.MustCompile(`set STRIPE_WEBHOOK_SECRET=(whsec_\w+),(whsec_\w+) `).FindStringSubmatch(out)
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

// TestStripeCheckShowsTheReadBudget: with DATABASE_URL set, check reads
// what every replica recorded: a pace past the derived allocation (the
// 10,000 minimum) fails and says where the allocation comes from; the same
// reads within a configured allocation pass; and the check's own reads are
// recorded too; the reads on behalf of connected accounts are said apart,
// against their own allocation, and never counted as the platform's.
// Without DATABASE_URL the budget is skipped, saying why.
func TestStripeCheckShowsTheReadBudget(t *testing.T) {
	ctx := context.Background()
	h := testenv.ForTest(t, testenv.Stripe, testenv.Options{})
	t.Setenv("STRIPE_API_KEY", stripemock.DefaultAPIKey)
	t.Setenv("STRIPE_API_KEY_FILE", "")
	t.Setenv("STRIPE_API_URL", h.URL)
	t.Setenv("STRIPE_WEBHOOK_ENDPOINT_ID", "")
	t.Setenv("BILLSYNC_STRIPE_READ_ALLOCATION", "")
	url := storetest.URL(t)
	st := storetest.OpenStore(t, url, store.Options{})
	_, err := st.ReportSpend(ctx, stripe.Provider, "replica-a", map[string]int64{"GET /v1/customers/{id}": 4000,
		reconcile.ConnectOperation("GET /v1/events"): 3000}, true)
	require.NoError(t, err)
	reads := func() int64 {
		sp, err := st.ReportSpend(ctx, stripe.Provider, "reader", nil, false)
		require.NoError(t, err)
		var n int64
		for op, r := range sp.Reads {
			if op != reconcile.ConnectOperation("GET /v1/events") {
				n += r
			}
		}
		return n
	}
	billsync := func(args ...string) string {
		var out bytes.Buffer
		_ = run(ctx, args, &out, &out) // the endpoint and plan checks fail here; the budget line is what is checked
		return out.String()
	}

	t.Setenv("DATABASE_URL", url)
	out := billsync("stripe", "check")
	require.Regexp(t, `FAIL reads of the last [\d.]+ days: 4000, on pace for \d+ over 30 days, within the allocation of 10000 \(max\(10000, 500 per transaction × 0 transactions`, out)
	require.Regexp(t, `(ok  |FAIL) reads on behalf of connected accounts of the last [\d.]+ days: 3000, on pace for \d+ over 30 days, within their allocation of 10000 \(max\(10000, 500 per transaction × 0 connected accounts' transactions`, out,
		"the reads on behalf of connected accounts are their own budget's, not the platform's")
	require.Greater(t, reads(), int64(4000), "the check's own reads are recorded")

	out = billsync("stripe", "check", "-stripe-read-allocation", "1e9")
	require.Regexp(t, `ok   reads of the last [\d.]+ days: \d+, on pace for \d+ over 30 days, within the allocation of 1000000000 \(-stripe-read-allocation\)`, out)

	t.Setenv("DATABASE_URL", "")
	out = billsync("stripe", "check")
	require.Contains(t, out, "skip the read budget: DATABASE_URL is unset")
	require.NotContains(t, out, "reads of the last")
}
