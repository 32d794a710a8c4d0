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
