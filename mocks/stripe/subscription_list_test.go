package stripe_test

import (
	"context"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	stripemock "github.com/billsync/billsync/mocks/stripe"
)

// TestListSubscriptionsExpandsCustomer: GET /v1/subscriptions by customer,
// status=all, expand[]=data.customer answers as Stripe does: every status,
// newest first, each with the customer object (metadata included; a
// deleted customer's stub); a customer Stripe never knew is refused
// (400 resource_missing), not an empty list.
func TestListSubscriptionsExpandsCustomer(t *testing.T) {
	t.Parallel()
	f := newFake(t, stripemock.Options{})
	cust := f.customer(t)
	active := f.subscribe(t, cust.ID, "price_pro")
	canceled := f.subscribe(t, cust.ID, "price_team")
	_, err := f.sc.V1Subscriptions.Cancel(context.Background(), canceled.ID, nil)
	require.NoError(t, err)
	q := url.Values{"customer": {cust.ID}, "status": {"all"}, "expand[0]": {"data.customer"}, "limit": {"100"}}

	resp, list := f.do(t, http.MethodGet, "/v1/subscriptions", q, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, list)
	require.Len(t, path(list, "data"), 2, "status=all lists the canceled one too")
	require.Equal(t, canceled.ID, path(list, "data", 0, "id"))
	require.Equal(t, "canceled", path(list, "data", 0, "status"))
	require.Equal(t, active.ID, path(list, "data", 1, "id"))
	for i := range 2 {
		require.Equal(t, cust.ID, path(list, "data", i, "customer", "id"))
		require.Equal(t, "customer", path(list, "data", i, "customer", "object"))
		require.Equal(t, "ada@example.com", path(list, "data", i, "customer", "email"))
		require.Equal(t, "u1", path(list, "data", i, "customer", "metadata", "user_id"))
		require.False(t, has(path(list, "data", i, "customer"), "subscriptions"), "only data.customer was expanded")
	}

	resp, list = f.do(t, http.MethodGet, "/v1/subscriptions", url.Values{"customer": {cust.ID}}, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, list)
	require.Len(t, path(list, "data"), 1, "without status, canceled ones are left out")
	require.Equal(t, cust.ID, path(list, "data", 0, "customer"), "not expanded: the id")

	_, err = f.sc.V1Customers.Delete(context.Background(), cust.ID, nil)
	require.NoError(t, err)
	resp, list = f.do(t, http.MethodGet, "/v1/subscriptions", q, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, list)
	require.Len(t, path(list, "data"), 2, "a deleted customer's subscriptions, all canceled, are still listed")
	for i := range 2 {
		require.Equal(t, "canceled", path(list, "data", i, "status"))
		require.Equal(t, map[string]any{"id": cust.ID, "object": "customer", "deleted": true}, path(list, "data", i, "customer"))
	}

	resp, body := f.do(t, http.MethodGet, "/v1/subscriptions", url.Values{"customer": {"cus_nobody"}, "status": {"all"}}, nil)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Equal(t, "resource_missing", path(body, "error", "code"))
	require.Equal(t, "customer", path(body, "error", "param"))
}

// TestSubscriptionBilledToCustomerAccount: the platform may bill a
// connected account as its customer (Accounts v2: customer_account in
// place of customer). The subscription and its invoices name the account
// in customer_account with customer null, GET /v1/subscriptions lists
// them by customer_account (and never by a customer), and what Stripe
// refuses is refused: both parameters, an account not connected, a
// connected account billing another.
func TestSubscriptionBilledToCustomerAccount(t *testing.T) {
	t.Parallel()
	f := newFake(t, stripemock.Options{})
	acct := addAccount(t, f, stripemock.AccountOptions{ID: "acct_billed"})
	cust := f.customer(t)
	f.subscribe(t, cust.ID, "price_team")

	id := f.create(t, "/v1/subscriptions", url.Values{"customer_account": {acct.ID()}, "items[0][price]": {"price_pro"}})
	_, sub := f.do(t, http.MethodGet, "/v1/subscriptions/"+id, nil, nil)
	require.Nil(t, sub["customer"])
	require.Equal(t, acct.ID(), sub["customer_account"])
	_, inv := f.do(t, http.MethodGet, "/v1/invoices/"+sub["latest_invoice"].(string), nil, nil)
	require.Nil(t, inv["customer"])
	require.Equal(t, acct.ID(), inv["customer_account"])
	require.Equal(t, "paid", inv["status"], "no card to decline: paid")

	resp, list := f.do(t, http.MethodGet, "/v1/subscriptions", url.Values{"customer_account": {acct.ID()}}, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, list)
	require.Len(t, path(list, "data"), 1)
	require.Equal(t, id, path(list, "data", 0, "id"))
	_, list = f.do(t, http.MethodGet, "/v1/subscriptions", url.Values{"customer": {cust.ID}}, nil)
	require.Len(t, path(list, "data"), 1)
	require.NotEqual(t, id, path(list, "data", 0, "id"))
	require.Nil(t, path(list, "data", 0, "customer_account"), "a customer's subscription names no account")

	refused := []struct {
		name   string
		values url.Values
		header map[string]string
		param  string
	}{
		{"Both", url.Values{"customer": {cust.ID}, "customer_account": {acct.ID()}}, nil, ""},
		{"NotConnected", url.Values{"customer_account": {"acct_stranger"}}, nil, "customer_account"},
		{"InAConnectedAccount", url.Values{"customer_account": {acct.ID()}}, in(addAccount(t, f, stripemock.AccountOptions{PlatformPrices: true}).ID()), "customer_account"},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			tt.values.Set("items[0][price]", "price_pro")
			resp, body := f.do(t, http.MethodPost, "/v1/subscriptions", tt.values, tt.header)
			require.Equal(t, http.StatusBadRequest, resp.StatusCode, body)
			param, _ := path(body, "error", "param").(string)
			require.Equal(t, tt.param, param)
		})
	}
	resp, body := f.do(t, http.MethodGet, "/v1/subscriptions", url.Values{"customer_account": {"acct_stranger"}}, nil)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Equal(t, "resource_missing", path(body, "error", "code"))
}
