package stripe_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v82"

	stripemock "github.com/billsync/billsync/mocks/stripe"
)

// TestFakeEntitlements: features attached to a product entitle its live
// subscribers; the active entitlements list pages like any list (12 at
// limit 5: three pages, one per feature); each change of a customer's set
// sends one entitlements.active_entitlement_summary.updated whose
// embedded list stops at 10 with has_more; a canceled subscription's
// features are gone.
func TestFakeEntitlements(t *testing.T) {
	f := newFake(t, stripemock.Options{})
	rc := newReceiver(t)
	rc.register(f)
	ctx := context.Background()
	cust := f.customer(t)
	sub := f.subscribe(t, cust.ID, "price_pro")
	for i := range 12 {
		feat, err := f.sc.V1EntitlementsFeatures.Create(ctx, &stripe.EntitlementsFeatureCreateParams{
			Name: stripe.String("Flag"), LookupKey: stripe.String(fmt.Sprintf("flag-%02d", i))})
		require.NoError(t, err)
		_, err = f.sc.V1ProductFeatures.Create(ctx, &stripe.ProductFeatureCreateParams{
			Product: stripe.String("prod_price_pro"), EntitlementFeature: stripe.String(feat.ID)})
		require.NoError(t, err)
	}
	require.Len(t, f.Entitled(cust.ID), 12)

	var keys []string
	q := url.Values{"customer": {cust.ID}, "limit": {"5"}}
	pages := 0
	for {
		resp, page := f.do(t, http.MethodGet, "/v1/entitlements/active_entitlements", q, nil)
		require.Equal(t, http.StatusOK, resp.StatusCode, page)
		pages++
		data := page["data"].([]any)
		for _, e := range data {
			keys = append(keys, path(e, "lookup_key").(string))
			require.Equal(t, "entitlements.active_entitlement", path(e, "object"))
		}
		if page["has_more"] != true {
			break
		}
		q.Set("starting_after", path(data[len(data)-1], "id").(string))
	}
	require.Equal(t, 3, pages)
	require.Len(t, keys, 12)
	require.ElementsMatch(t, f.Entitled(cust.ID), keys)

	// stripe-go's own list reads them all too.
	n := 0
	for e, err := range f.sc.V1EntitlementsActiveEntitlements.List(ctx, &stripe.EntitlementsActiveEntitlementListParams{Customer: stripe.String(cust.ID)}) {
		require.NoError(t, err)
		require.NotEmpty(t, e.LookupKey)
		n++
	}
	require.Equal(t, 12, n)

	_, err := f.sc.V1Subscriptions.Cancel(ctx, sub.ID, nil)
	require.NoError(t, err)
	require.Empty(t, f.Entitled(cust.ID))
	f.waitIdle(t)
	summaries := rc.ofType("entitlements.active_entitlement_summary.updated")
	require.Len(t, summaries, 13, "one per change: twelve features granted, then all gone")
	// Webhooks arrive in any order: count the summaries by what they embed.
	cut, empty := 0, 0
	for _, sm := range summaries {
		var o map[string]any
		require.NoError(t, json.Unmarshal(sm.Data.Raw, &o))
		require.Equal(t, cust.ID, path(o, "customer"))
		data := path(o, "entitlements", "data").([]any)
		require.LessOrEqual(t, len(data), 10, "an event embeds 10 at most")
		if path(o, "entitlements", "has_more") == true {
			require.Len(t, data, 10, "a summary cut short embeds 10")
			cut++
		}
		if len(data) == 0 {
			empty++
		}
	}
	require.Equal(t, 2, cut, "eleven and twelve features: cut short at 10")
	require.Equal(t, 1, empty, "all gone")

	resp, body := f.do(t, http.MethodGet, "/v1/entitlements/active_entitlements", url.Values{"customer": {"cus_nope"}}, nil)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, body) // a customer= Stripe does not know
	require.Equal(t, "resource_missing", path(body, "error", "code"))
	resp, body = f.do(t, http.MethodGet, "/v1/entitlements/active_entitlements", nil, nil)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, body)
}
