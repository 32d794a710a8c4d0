package stripe_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v82"

	stripemock "github.com/billsync/billsync/mocks/stripe"
	"github.com/billsync/billsync/mocks/stripe/openapi"
)

// TestResponsesMatchStripesOpenAPISpec checks what the fake answers against
// the component schemas of the OpenAPI spec stripe-mock ships: every field
// the fake emits exists in the spec with the right JSON type (and enum
// value), every required field is present, null only where nullable. It is
// not a full JSON Schema validation (no formats, lengths or patterns). The
// objects come from every state the fake can reach: trialing, paused,
// past_due, canceled, mixed intervals, a deleted customer, open, paid and
// void invoices, and an event of every type the fake emits.
func TestResponsesMatchStripesOpenAPISpec(t *testing.T) {
	t.Parallel()
	spec, err := openapi.LoadSpec()
	if err != nil {
		t.Skipf("stripe-mock's spec is not available (offline?): %v", err)
	}
	toBasil(t, spec)
	f := stoppedFake(t, stripemock.Options{Dunning: stripemock.Dunning{Retries: []time.Duration{time.Hour}, Final: "unpaid"}})
	ctx := context.Background()
	yearly := f.yearlyPrice(t, 9000)

	cust := f.customer(t)
	_, err = f.sc.V1Customers.Update(ctx, cust.ID, &stripe.CustomerUpdateParams{Name: stripe.String("Ada")})
	require.NoError(t, err)
	mixed, err := f.sc.V1Subscriptions.Create(ctx, &stripe.SubscriptionCreateParams{Customer: stripe.String(cust.ID),
		Items: []*stripe.SubscriptionCreateItemParams{{Price: stripe.String("price_pro"), Quantity: stripe.Int64(3)}, {Price: stripe.String(yearly)}}})
	require.NoError(t, err)
	trial, err := f.sc.V1Subscriptions.Create(ctx, &stripe.SubscriptionCreateParams{Customer: stripe.String(cust.ID),
		TrialPeriodDays: stripe.Int64(60), Items: []*stripe.SubscriptionCreateItemParams{{Price: stripe.String("price_team")}}})
	require.NoError(t, err)
	paused := f.subscribe(t, cust.ID, "price_team")
	_, err = f.sc.V1Subscriptions.Update(ctx, paused.ID, &stripe.SubscriptionUpdateParams{
		PauseCollection: &stripe.SubscriptionUpdatePauseCollectionParams{Behavior: stripe.String("void")},
		CancelAt:        stripe.Int64(t0.Add(90 * 24 * time.Hour).Unix())})
	require.NoError(t, err)
	failing := f.customer(t)
	pastDue := f.subscribe(t, failing.ID, "price_pro")
	require.NoError(t, f.SetCardFails(failing.ID, true))
	f.Clock().Advance(32 * 24 * time.Hour) // renewals: pro paid, void while paused, past_due
	gone := f.customer(t)
	canceled := f.subscribe(t, gone.ID, "price_free")
	_, err = f.sc.V1Customers.Delete(ctx, gone.ID, nil)
	require.NoError(t, err)
	incomplete := f.subscribe(t, failing.ID, "price_pro")

	check := func(schema, what string, v any) {
		t.Helper()
		assert.Empty(t, spec.Check(schema, v), "%s (%s) differs from the spec", what, schema)
	}
	get := func(p string, q url.Values) map[string]any {
		t.Helper()
		resp, body := f.do(t, http.MethodGet, p, q, nil)
		require.Equal(t, http.StatusOK, resp.StatusCode, p)
		return body
	}
	check("customer", "customer", get("/v1/customers/"+cust.ID, nil))
	check("deleted_customer", "deleted customer", get("/v1/customers/"+gone.ID, nil))
	resp, body := f.do(t, http.MethodDelete, "/v1/customers/"+f.customer(t).ID, nil, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	check("deleted_customer", "DELETE answer", body)

	for _, id := range []string{mixed.ID, trial.ID, paused.ID, pastDue.ID, canceled.ID, incomplete.ID} {
		sub := get("/v1/subscriptions/"+id, nil)
		check("subscription", "subscription "+sub["status"].(string), sub)
		ex := get("/v1/subscriptions/"+id, url.Values{"expand[]": {"customer", "latest_invoice"}})
		check("subscription", "expanded subscription", ex)
		inv := get("/v1/invoices/"+sub["latest_invoice"].(string), nil)
		check("invoice", "invoice "+inv["status"].(string), inv)
	}
	for _, p := range get("/v1/prices", url.Values{"limit": {"100"}})["data"].([]any) {
		check("price", "price", p)
	}

	feat, err := f.sc.V1EntitlementsFeatures.Create(ctx, &stripe.EntitlementsFeatureCreateParams{
		Name: stripe.String("Export"), LookupKey: stripe.String("export")})
	require.NoError(t, err)
	_, err = f.sc.V1ProductFeatures.Create(ctx, &stripe.ProductFeatureCreateParams{
		Product: stripe.String("prod_price_pro"), EntitlementFeature: stripe.String(feat.ID)})
	require.NoError(t, err)
	check("entitlements.feature", "feature", get("/v1/entitlements/features/"+feat.ID, nil))
	for _, p := range get("/v1/products/prod_price_pro/features", nil)["data"].([]any) {
		check("product_feature", "product feature", p)
	}
	check("product", "product", get("/v1/products/prod_price_team", nil))
	f.SetProductMetadata("prod_price_pro", map[string]string{"billsync_plan": "pro"})
	marked := get("/v1/products/prod_price_pro", nil)
	check("product", "product with metadata", marked)
	require.Equal(t, map[string]any{"billsync_plan": "pro"}, marked["metadata"])
	for _, p := range get("/v1/prices", url.Values{"limit": {"100"}, "expand[]": {"data.product"}})["data"].([]any) {
		check("price", "price with its product expanded", p)
		require.IsType(t, map[string]any{}, p.(map[string]any)["product"], "expanded")
	}
	resp, _ = f.do(t, http.MethodGet, "/v1/products/prod_nobody", nil, nil)
	require.Equal(t, http.StatusNotFound, resp.StatusCode, "a product no price names and none set")
	active := get("/v1/entitlements/active_entitlements", url.Values{"customer": {cust.ID}})["data"].([]any)
	require.NotEmpty(t, active)
	for _, a := range active {
		check("entitlements.active_entitlement", "active entitlement", a)
	}

	seen := map[string]bool{}
	for e, err := range f.sc.V1Events.List(ctx, &stripe.EventListParams{ListParams: stripe.ListParams{Limit: stripe.Int64(100)}}) {
		require.NoError(t, err)
		if seen[string(e.Type)] {
			continue
		}
		seen[string(e.Type)] = true
		ev := get("/v1/events/"+e.ID, nil)
		check("event", "event "+string(e.Type), ev)
		object := path(ev, "data", "object").(map[string]any)
		if object["object"] == "entitlements.active_entitlement_summary" {
			// The spec has no component for the summary: its list's
			// entries are checked.
			for _, a := range path(object, "entitlements", "data").([]any) {
				check("entitlements.active_entitlement", "entry of "+string(e.Type), a)
			}
			continue
		}
		check(object["object"].(string), "data.object of "+string(e.Type), object)
	}
	var types []string
	for typ := range seen {
		types = append(types, typ)
	}
	for _, want := range []string{"customer.created", "customer.updated", "customer.deleted", "customer.subscription.created",
		"customer.subscription.updated", "customer.subscription.deleted", "invoice.paid", "invoice.payment_failed",
		"entitlements.active_entitlement_summary.updated"} {
		require.True(t, seen[want], "an event of type %s was checked (seen: %s)", want, strings.Join(types, ", "))
	}
}

// TestSpecCheckFindsDifferences: the check is not vacuous.
func TestSpecCheckFindsDifferences(t *testing.T) {
	t.Parallel()
	spec, err := openapi.LoadSpec()
	if err != nil {
		t.Skipf("stripe-mock's spec is not available (offline?): %v", err)
	}
	f := newFake(t, stripemock.Options{})
	_, cust := f.do(t, http.MethodGet, "/v1/customers/"+f.customer(t).ID, nil, nil)
	require.Empty(t, spec.Check("customer", cust))

	cust["colour"] = "red"
	cust["balance"] = "0"
	cust["email"] = 7.0
	cust["object"] = nil
	delete(cust, "livemode")
	require.Equal(t, []string{
		"customer.balance: value must be an integer",
		"customer.email: value must be a string",
		`customer.livemode: property "livemode" is missing`,
		`customer.object: value is not one of the allowed values ["customer"]`,
		`customer: property "colour" is unsupported`,
	}, spec.Check("customer", cust))
	require.Contains(t, spec.Check("subscription", map[string]any{"status": "sleeping"}), `subscription.status: value is not one of the allowed values ["active","canceled","incomplete","incomplete_expired","past_due","paused","trialing","unpaid"]`)
}

// toBasil makes the spec describe the API version the fake speaks
// (2025-08-27.basil, stripe-go v82's) where it differs from the newer one
// stripe-mock's spec describes (2026-08-26.dahlia): fields basil still has
// (stripe-go v82 reads them) and fields dahlia added.
func toBasil(t *testing.T, spec *openapi.Spec) {
	t.Helper()
	require.NoError(t, spec.Allow("subscription_item", "plan"))             // basil still has the legacy plan
	require.NoError(t, spec.Allow("recurring", "trial_period_days"))        // prices: dropped after basil
	require.NoError(t, spec.Unrequire("subscription", "billing_schedules")) // added after basil
	require.NoError(t, spec.Unrequire("invoice", "amount_paid_off_stripe")) // added after basil
	require.NoError(t, spec.Unrequire("line_item", "subtotal"))             // invoice line items: added after basil
}

// TestConnectResponsesMatchStripesOpenAPISpec: the Connect answers (an
// account created, retrieved and listed; a Connect endpoint; a connected
// account's events, with account and context, and the application of its
// authorisation) match the spec too.
func TestConnectResponsesMatchStripesOpenAPISpec(t *testing.T) {
	t.Parallel()
	spec, err := openapi.LoadSpec()
	if err != nil {
		t.Skipf("stripe-mock's spec is not available (offline?): %v", err)
	}
	toBasil(t, spec)
	f := newFake(t, stripemock.Options{})
	check := func(schema, what string, v any) {
		t.Helper()
		assert.Empty(t, spec.Check(schema, v), "%s (%s) differs from the spec", what, schema)
	}
	resp, ep := f.do(t, http.MethodPost, "/v1/webhook_endpoints", url.Values{"url": {"https://example.com/connect"}, "connect": {"true"}}, driverKey)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	check("webhook_endpoint", "Connect endpoint", ep)

	for _, typ := range []string{"standard", "express", "custom"} {
		resp, acct := f.do(t, http.MethodPost, "/v1/accounts", url.Values{"type": {typ}, "email": {"owner@example.com"}}, driverKey)
		require.Equal(t, http.StatusOK, resp.StatusCode, acct)
		check("account", "created "+typ+" account", acct)
		_, got := f.do(t, http.MethodGet, "/v1/accounts/"+acct["id"].(string), nil, driverKey)
		check("account", "retrieved account", got)
	}
	_, list := f.do(t, http.MethodGet, "/v1/accounts", nil, driverKey)
	require.Len(t, list["data"], 3)
	for _, a := range list["data"].([]any) {
		check("account", "listed account", a)
	}

	account := path(list, "data", 0, "id").(string)
	f.create(t, "/v1/customers", nil) // a platform event beside the account's
	resp, _ = f.do(t, http.MethodPost, "/v1/customers", url.Values{"email": {"c@example.com"}}, in(account))
	require.Equal(t, http.StatusOK, resp.StatusCode)
	_, events := f.do(t, http.MethodGet, "/v1/events", nil, in(account))
	seen := map[string]bool{}
	for _, e := range events["data"].([]any) {
		ev := e.(map[string]any)
		require.Equal(t, account, ev["account"])
		require.Equal(t, account, ev["context"])
		check("event", "event "+ev["type"].(string)+" of a connected account", ev)
		object := path(ev, "data", "object").(map[string]any)
		check(object["object"].(string), "data.object of "+ev["type"].(string), object)
		seen[ev["type"].(string)] = true
	}
	require.Equal(t, map[string]bool{"customer.created": true, stripemock.EventAccountAuthorized: true}, seen)
}
