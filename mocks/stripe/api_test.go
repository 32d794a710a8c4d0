package stripe_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v82"

	stripemock "github.com/billsync/billsync/mocks/stripe"
)

func TestSubscriptionLifecycleThroughStripeGo(t *testing.T) {
	t.Parallel()
	f := newFake(t, stripemock.Options{})
	ctx := context.Background()

	cust := f.customer(t)
	require.Regexp(t, `^cus_\w{14}$`, cust.ID)
	require.Equal(t, "ada@example.com", cust.Email)
	require.Equal(t, map[string]string{"user_id": "u1"}, cust.Metadata)

	got, err := f.sc.V1Customers.Retrieve(ctx, cust.ID, nil)
	require.NoError(t, err)
	require.Equal(t, "u1", got.Metadata["user_id"])

	sub, err := f.sc.V1Subscriptions.Create(ctx, &stripe.SubscriptionCreateParams{
		Customer: stripe.String(cust.ID),
		Items:    []*stripe.SubscriptionCreateItemParams{{Price: stripe.String("price_free")}},
		Metadata: map[string]string{"account": "a1"},
	})
	require.NoError(t, err)
	require.Regexp(t, `^sub_`, sub.ID)
	require.Equal(t, stripe.SubscriptionStatusActive, sub.Status)
	require.Equal(t, cust.ID, sub.Customer.ID)
	require.Equal(t, "a1", sub.Metadata["account"])
	require.Regexp(t, `^in_`, sub.LatestInvoice.ID)
	require.Len(t, sub.Items.Data, 1)
	item := sub.Items.Data[0]
	require.Regexp(t, `^si_`, item.ID)
	require.Equal(t, "price_free", item.Price.ID)
	require.Equal(t, "free", item.Price.LookupKey)
	require.Equal(t, int64(1), item.Quantity)
	start, end := time.Unix(item.CurrentPeriodStart, 0), time.Unix(item.CurrentPeriodEnd, 0)
	require.Equal(t, sub.StartDate, item.CurrentPeriodStart)
	require.GreaterOrEqual(t, end.Sub(start), 28*24*time.Hour, "a monthly period")
	require.LessOrEqual(t, end.Sub(start), 31*24*time.Hour, "a monthly period")

	// Change the item's price: the item keeps its id, the period stays.
	sub, err = f.sc.V1Subscriptions.Update(ctx, sub.ID, &stripe.SubscriptionUpdateParams{
		Items: []*stripe.SubscriptionUpdateItemParams{{ID: stripe.String(item.ID), Price: stripe.String("price_pro")}},
	})
	require.NoError(t, err)
	require.Len(t, sub.Items.Data, 1)
	require.Equal(t, item.ID, sub.Items.Data[0].ID)
	require.Equal(t, "price_pro", sub.Items.Data[0].Price.ID)
	require.Equal(t, int64(2000), sub.Items.Data[0].Price.UnitAmount)
	require.Equal(t, item.CurrentPeriodEnd, sub.Items.Data[0].CurrentPeriodEnd)

	// A price without an item id adds an item, as on Stripe; the old one is
	// removed only when named with deleted=true.
	sub, err = f.sc.V1Subscriptions.Update(ctx, sub.ID, &stripe.SubscriptionUpdateParams{
		Items: []*stripe.SubscriptionUpdateItemParams{{Price: stripe.String("price_team")}},
	})
	require.NoError(t, err)
	require.Len(t, sub.Items.Data, 2)
	require.Equal(t, item.ID, sub.Items.Data[0].ID)
	require.NotEqual(t, item.ID, sub.Items.Data[1].ID)
	require.Equal(t, "team", sub.Items.Data[1].Price.LookupKey)
	require.Equal(t, item.CurrentPeriodEnd, sub.Items.Data[1].CurrentPeriodEnd, "same interval: the new item shares the period")
	sub, err = f.sc.V1Subscriptions.Update(ctx, sub.ID, &stripe.SubscriptionUpdateParams{
		Items: []*stripe.SubscriptionUpdateItemParams{{ID: stripe.String(item.ID), Deleted: stripe.Bool(true)}},
	})
	require.NoError(t, err)
	require.Len(t, sub.Items.Data, 1)
	require.Equal(t, "team", sub.Items.Data[0].Price.LookupKey)

	sub, err = f.sc.V1Subscriptions.Update(ctx, sub.ID, &stripe.SubscriptionUpdateParams{CancelAtPeriodEnd: stripe.Bool(true)})
	require.NoError(t, err)
	require.True(t, sub.CancelAtPeriodEnd)
	require.Equal(t, item.CurrentPeriodEnd, sub.CancelAt)
	require.NotZero(t, sub.CanceledAt)
	require.Equal(t, stripe.SubscriptionStatusActive, sub.Status)

	sub, err = f.sc.V1Subscriptions.Update(ctx, sub.ID, &stripe.SubscriptionUpdateParams{CancelAtPeriodEnd: stripe.Bool(false)})
	require.NoError(t, err)
	require.False(t, sub.CancelAtPeriodEnd)
	require.Zero(t, sub.CancelAt)

	canceled, err := f.sc.V1Subscriptions.Cancel(ctx, sub.ID, nil)
	require.NoError(t, err)
	require.Equal(t, stripe.SubscriptionStatusCanceled, canceled.Status)
	require.NotZero(t, canceled.CanceledAt)
	require.NotZero(t, canceled.EndedAt)

	again, err := f.sc.V1Subscriptions.Retrieve(ctx, sub.ID, nil)
	require.NoError(t, err)
	require.Equal(t, stripe.SubscriptionStatusCanceled, again.Status)
	require.Equal(t, "price_team", again.Items.Data[0].Price.ID)

	_, err = f.sc.V1Subscriptions.Update(ctx, sub.ID, &stripe.SubscriptionUpdateParams{
		Items: []*stripe.SubscriptionUpdateItemParams{{Price: stripe.String("price_pro")}}})
	var se *stripe.Error
	require.ErrorAs(t, err, &se)
	require.Equal(t, http.StatusBadRequest, se.HTTPStatusCode, "a canceled subscription cannot change items")
}

func TestListSubscriptionsPagesAndFilters(t *testing.T) {
	t.Parallel()
	f := newFake(t, stripemock.Options{})
	ctx := context.Background()
	cust := f.customer(t)
	other := f.customer(t)
	var created []string
	for range 7 {
		created = append(created, f.subscribe(t, cust.ID, "price_pro").ID)
	}
	f.subscribe(t, other.ID, "price_pro")
	for _, id := range created[:2] {
		_, err := f.sc.V1Subscriptions.Cancel(ctx, id, nil)
		require.NoError(t, err)
	}

	list := func(status string) []string {
		var ids []string
		for sub, err := range f.sc.V1Subscriptions.List(ctx, &stripe.SubscriptionListParams{
			Customer: stripe.String(cust.ID), Status: stripe.String(status),
			ListParams: stripe.ListParams{Limit: stripe.Int64(3)},
		}) {
			require.NoError(t, err)
			ids = append(ids, sub.ID)
		}
		return ids
	}
	newestFirst := []string{created[6], created[5], created[4], created[3], created[2], created[1], created[0]}
	require.Equal(t, newestFirst, list("all"), "stripe-go pages through starting_after, newest first")
	require.Equal(t, newestFirst[5:], list("canceled"))
	require.Equal(t, newestFirst[:5], list("active"))

	// Without a status, canceled subscriptions are left out.
	resp, page := f.do(t, http.MethodGet, "/v1/subscriptions", url.Values{"customer": {cust.ID}, "limit": {"3"}}, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "list", page["object"])
	require.Equal(t, "/v1/subscriptions", page["url"])
	require.Equal(t, true, page["has_more"])
	require.Len(t, page["data"], 3)
	require.Equal(t, created[6], path(page, "data", 0, "id"))

	_, page = f.do(t, http.MethodGet, "/v1/subscriptions", url.Values{"customer": {cust.ID}, "limit": {"3"},
		"starting_after": {created[4]}}, nil)
	require.Equal(t, false, page["has_more"])
	require.Len(t, page["data"], 2)
	require.Equal(t, created[3], path(page, "data", 0, "id"))
	require.Equal(t, created[2], path(page, "data", 1, "id"))

	_, page = f.do(t, http.MethodGet, "/v1/subscriptions", url.Values{"customer": {cust.ID}, "limit": {"2"},
		"ending_before": {created[3]}}, nil)
	require.Equal(t, []any{created[5], created[4]}, []any{path(page, "data", 0, "id"), path(page, "data", 1, "id")})
	require.Equal(t, true, page["has_more"])

	for _, bad := range []url.Values{{"limit": {"0"}}, {"limit": {"101"}}, {"status": {"bogus"}}, {"colour": {"red"}}} {
		resp, body := f.do(t, http.MethodGet, "/v1/subscriptions", bad, nil)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, "%v", bad)
		require.Equal(t, "invalid_request_error", path(body, "error", "type"))
	}

	_, page = f.do(t, http.MethodGet, "/v1/subscriptions", url.Values{"status": {"all"}, "limit": {"100"}}, nil)
	require.Len(t, page["data"], 8, "no customer filter: every customer's subscriptions")

	// The sweep's listing: every customer, customer expanded, paged.
	_, page = f.do(t, http.MethodGet, "/v1/subscriptions", url.Values{"status": {"all"}, "limit": {"5"},
		"expand[]": {"data.customer"}}, nil)
	require.Len(t, page["data"], 5)
	require.Equal(t, true, page["has_more"])
	require.Equal(t, other.ID, path(page, "data", 0, "customer", "id"))
	require.Equal(t, "u1", path(page, "data", 0, "customer", "metadata", "user_id"))
	_, page = f.do(t, http.MethodGet, "/v1/subscriptions", url.Values{"status": {"all"}, "limit": {"5"},
		"starting_after": {created[2]}}, nil)
	require.Equal(t, false, page["has_more"])
	require.Len(t, page["data"], 2, "the two canceled ones are older")
	require.Equal(t, cust.ID, path(page, "data", 0, "customer"), "not expanded unless asked")
}

func TestUnknownIDIsStripeShaped404(t *testing.T) {
	t.Parallel()
	f := newFake(t, stripemock.Options{})

	_, err := f.sc.V1Customers.Retrieve(context.Background(), "cus_nope", nil)
	var se *stripe.Error
	require.ErrorAs(t, err, &se)
	require.Equal(t, http.StatusNotFound, se.HTTPStatusCode)
	require.Equal(t, stripe.ErrorTypeInvalidRequest, se.Type)
	require.Equal(t, stripe.ErrorCodeResourceMissing, se.Code)
	require.Equal(t, "No such customer: 'cus_nope'", se.Msg)
	require.Equal(t, "id", se.Param)
	require.Regexp(t, `^req_`, se.RequestID)

	resp, body := f.do(t, http.MethodGet, "/v1/subscriptions/sub_nope", nil, nil)
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	require.Equal(t, "resource_missing", path(body, "error", "code"))
	require.Equal(t, "No such subscription: 'sub_nope'", path(body, "error", "message"))

	// An unknown id given as a parameter is a 400 naming the parameter.
	_, err = f.sc.V1Subscriptions.Create(context.Background(), &stripe.SubscriptionCreateParams{
		Customer: stripe.String("cus_nope"),
		Items:    []*stripe.SubscriptionCreateItemParams{{Price: stripe.String("price_pro")}}})
	require.ErrorAs(t, err, &se)
	require.Equal(t, http.StatusBadRequest, se.HTTPStatusCode)
	require.Equal(t, "customer", se.Param)

	resp, body = f.do(t, http.MethodPost, "/v1/nothing_here", nil, nil)
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	require.Equal(t, "invalid_request_error", path(body, "error", "type"))
}

func TestAuthRequiresTheKey(t *testing.T) {
	t.Parallel()
	f := newFake(t, stripemock.Options{APIKey: "sk_test_right"})

	resp, body := f.do(t, http.MethodGet, "/v1/customers", nil, map[string]string{"Authorization": ""})
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	require.Equal(t, "invalid_request_error", path(body, "error", "type"))
	require.Contains(t, path(body, "error", "message"), "did not provide an API key")
	require.Regexp(t, `^req_`, resp.Header.Get("Request-Id"))

	resp, body = f.do(t, http.MethodGet, "/v1/customers", nil, map[string]string{"Authorization": "Bearer sk_test_wrong"})
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	require.Regexp(t, `^Invalid API Key provided: \*+rong$`, path(body, "error", "message"), "the key is masked")

	// stripe-go with the default key (wrong for this fake) gets a typed 401.
	wrong := stripe.NewClient(stripemock.DefaultAPIKey, stripe.WithBackends(stripe.NewBackendsWithConfig(&stripe.BackendConfig{
		URL: stripe.String(f.URL), MaxNetworkRetries: stripe.Int64(0), LeveledLogger: &stripe.LeveledLogger{Level: stripe.LevelNull},
	})))
	_, err := wrong.V1Customers.Create(context.Background(), &stripe.CustomerCreateParams{})
	var se *stripe.Error
	require.ErrorAs(t, err, &se)
	require.Equal(t, http.StatusUnauthorized, se.HTTPStatusCode)

	// The right key works with stripe-go, as bearer and as curl's basic-auth user.
	_, err = f.sc.V1Customers.Create(context.Background(), &stripe.CustomerCreateParams{})
	require.NoError(t, err)
	resp, _ = f.do(t, http.MethodGet, "/v1/customers", nil, map[string]string{"Authorization": "Bearer sk_test_right"})
	require.Equal(t, http.StatusOK, resp.StatusCode)
	req, err := http.NewRequest(http.MethodGet, f.URL+"/v1/customers", nil)
	require.NoError(t, err)
	req.SetBasicAuth("sk_test_right", "")
	basic, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	basic.Body.Close()
	require.Equal(t, http.StatusOK, basic.StatusCode)
}

func TestResponseShapeFollowsStripeVersion(t *testing.T) {
	t.Parallel()
	f := newFake(t, stripemock.Options{})
	sub := f.subscribe(t, f.customer(t).ID, "price_pro")

	resp, old := f.do(t, http.MethodGet, "/v1/subscriptions/"+sub.ID, nil, map[string]string{"Stripe-Version": "2024-06-20"})
	require.Equal(t, "2024-06-20", resp.Header.Get("Stripe-Version"))
	require.EqualValues(t, sub.Items.Data[0].CurrentPeriodEnd, old["current_period_end"], "old shape: period on the subscription")
	require.EqualValues(t, sub.Items.Data[0].CurrentPeriodStart, old["current_period_start"])
	require.False(t, has(path(old, "items", "data", 0), "current_period_end"), "old shape: not on items")

	resp, basil := f.do(t, http.MethodGet, "/v1/subscriptions/"+sub.ID, nil, map[string]string{"Stripe-Version": "2025-08-27.basil"})
	require.Equal(t, "2025-08-27.basil", resp.Header.Get("Stripe-Version"))
	require.False(t, has(basil, "current_period_end"), "basil: not on the subscription")
	require.EqualValues(t, sub.Items.Data[0].CurrentPeriodEnd, path(basil, "items", "data", 0, "current_period_end"))
	require.EqualValues(t, sub.Items.Data[0].CurrentPeriodStart, path(basil, "items", "data", 0, "current_period_start"))

	// No header: the default version, basil.
	resp, none := f.do(t, http.MethodGet, "/v1/subscriptions/"+sub.ID, nil, map[string]string{"Stripe-Version": ""})
	require.Equal(t, stripemock.DefaultAPIVersion, resp.Header.Get("Stripe-Version"))
	require.False(t, has(none, "current_period_end"))

	// Lists follow the version too.
	_, list := f.do(t, http.MethodGet, "/v1/subscriptions", nil, map[string]string{"Stripe-Version": "2024-06-20"})
	require.True(t, has(path(list, "data", 0), "current_period_end"))

	// The invoice's subscription reference moved under parent in basil.
	_, inv := f.do(t, http.MethodGet, "/v1/invoices/"+sub.LatestInvoice.ID, nil, nil)
	require.Equal(t, sub.ID, path(inv, "parent", "subscription_details", "subscription"))
	require.False(t, has(inv, "subscription"))
	_, inv = f.do(t, http.MethodGet, "/v1/invoices/"+sub.LatestInvoice.ID, nil, map[string]string{"Stripe-Version": "2024-06-20"})
	require.Equal(t, sub.ID, inv["subscription"])

	resp, _ = f.do(t, http.MethodGet, "/v1/subscriptions/"+sub.ID, nil, map[string]string{"Stripe-Version": "yesterday"})
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
}

func TestFormEncodingAndExpand(t *testing.T) {
	t.Parallel()
	f := newFake(t, stripemock.Options{})
	// Curl-style bodies: bare [] arrays and nested hashes.
	resp, cust := f.do(t, http.MethodPost, "/v1/customers", url.Values{"email": {"b@example.com"},
		"metadata[user_id]": {"u2"}, "metadata[team]": {"t9"}}, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, map[string]any{"user_id": "u2", "team": "t9"}, cust["metadata"])

	resp, sub := f.do(t, http.MethodPost, "/v1/subscriptions", url.Values{"customer": {cust["id"].(string)},
		"items[0][price]": {"price_team"}, "items[0][quantity]": {"3"}, "expand[]": {"latest_invoice", "customer"}}, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "u2", path(sub, "customer", "metadata", "user_id"), "expanded customer")
	require.EqualValues(t, 15000, path(sub, "latest_invoice", "amount_paid"), "expanded invoice: 3 × 5000")
	require.Equal(t, "subscription_create", path(sub, "latest_invoice", "billing_reason"))

	resp, prices := f.do(t, http.MethodGet, "/v1/prices", url.Values{"lookup_keys[]": {"pro", "team"}}, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Len(t, prices["data"], 2)
	var keys []string
	for p, err := range f.sc.V1Prices.List(context.Background(), &stripe.PriceListParams{LookupKeys: []*string{stripe.String("pro")}}) {
		require.NoError(t, err)
		keys = append(keys, p.ID+"/"+p.LookupKey)
	}
	require.Equal(t, []string{"price_pro/pro"}, keys)

	resp, created := f.do(t, http.MethodPost, "/v1/prices", url.Values{"currency": {"usd"}, "unit_amount": {"900"},
		"recurring[interval]": {"year"}, "lookup_key": {"yearly"}, "product_data[name]": {"Yearly"}}, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "year", path(created, "recurring", "interval"))
	resp, got := f.do(t, http.MethodGet, "/v1/prices/"+created["id"].(string), nil, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "yearly", got["lookup_key"])
	resp, body := f.do(t, http.MethodPost, "/v1/prices", url.Values{"currency": {"usd"}, "unit_amount": {"1"},
		"product": {"prod_x"}, "lookup_key": {"yearly"}}, nil)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, "lookup keys are unique")
	require.Equal(t, "lookup_key", path(body, "error", "param"))

	resp, body = f.do(t, http.MethodPost, "/v1/customers", url.Values{"emali": {"typo@example.com"}}, nil)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Equal(t, "parameter_unknown", path(body, "error", "code"))
	require.Equal(t, "emali", path(body, "error", "param"))
}

func TestIdempotencyKeyReplaysTheFirstResponse(t *testing.T) {
	t.Parallel()
	f := newFake(t, stripemock.Options{})
	cust := f.customer(t)
	params := func() *stripe.SubscriptionCreateParams {
		p := &stripe.SubscriptionCreateParams{Customer: stripe.String(cust.ID),
			Items: []*stripe.SubscriptionCreateItemParams{{Price: stripe.String("price_pro")}}}
		p.SetIdempotencyKey("create-sub-1")
		return p
	}
	first, err := f.sc.V1Subscriptions.Create(context.Background(), params())
	require.NoError(t, err)
	second, err := f.sc.V1Subscriptions.Create(context.Background(), params())
	require.NoError(t, err)
	require.Equal(t, first.ID, second.ID)
	n := 0
	for _, err := range f.sc.V1Subscriptions.List(context.Background(), &stripe.SubscriptionListParams{Customer: stripe.String(cust.ID)}) {
		require.NoError(t, err)
		n++
	}
	require.Equal(t, 1, n)
}

func TestEventsListNewestFirst(t *testing.T) {
	t.Parallel()
	f := newFake(t, stripemock.Options{})
	sub := f.subscribe(t, f.customer(t).ID, "price_pro")
	_, err := f.sc.V1Subscriptions.Cancel(context.Background(), sub.ID, nil)
	require.NoError(t, err)

	var types []string
	for e, err := range f.sc.V1Events.List(context.Background(), &stripe.EventListParams{}) {
		require.NoError(t, err)
		types = append(types, string(e.Type))
		require.Equal(t, stripemock.DefaultAPIVersion, e.APIVersion)
	}
	require.Equal(t, []string{"customer.subscription.deleted", "invoice.paid", "customer.subscription.created", "customer.created"}, types)

	_, list := f.do(t, http.MethodGet, "/v1/events", url.Values{"type": {"customer.subscription.*"}}, nil)
	require.Len(t, list["data"], 2)
	require.Equal(t, sub.ID, path(list, "data", 0, "data", "object", "id"))
	require.NotNil(t, path(list, "data", 0, "request", "id"), "an API-made event names its request")

	_, err = f.sc.V1Events.Retrieve(context.Background(), "evt_nope", nil)
	require.True(t, isStatus(err, http.StatusNotFound))
}

func isStatus(err error, status int) bool {
	var se *stripe.Error
	return errors.As(err, &se) && se.HTTPStatusCode == status
}
