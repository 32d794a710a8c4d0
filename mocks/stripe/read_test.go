package stripe_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	stripemock "github.com/billsync/billsync/mocks/stripe"
	"github.com/billsync/billsync/mocks/stripe/openapi"
)

// TestCustomerSubscriptionsExpanded: customer.subscriptions, when expanded,
// is Stripe's embedded list of the customer's current subscriptions: not
// canceled, newest first, at most 10, has_more when there are more.
func TestCustomerSubscriptionsExpanded(t *testing.T) {
	t.Parallel()
	f := newFake(t, stripemock.Options{})
	cus := f.customer(t).ID
	var ids []string // newest first
	for range 12 {
		ids = append([]string{f.subscribe(t, cus, "price_pro").ID}, ids...)
		f.Clock().Advance(time.Second)
	}
	_, err := f.sc.V1Subscriptions.Cancel(t.Context(), ids[0], nil)
	require.NoError(t, err)
	current := ids[1:] // 11

	embedded := func(list any) []string {
		var got []string
		for _, s := range path(list, "data").([]any) {
			got = append(got, path(s, "id").(string))
			require.Equal(t, "active", path(s, "status"))
		}
		return got
	}
	resp, body := f.do(t, http.MethodGet, "/v1/customers/"+cus, url.Values{"expand[]": {"subscriptions"}}, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	list := path(body, "subscriptions")
	require.Equal(t, "list", path(list, "object"))
	require.Equal(t, true, path(list, "has_more"))
	require.Equal(t, "/v1/customers/"+cus+"/subscriptions", path(list, "url"))
	require.Equal(t, current[:10], embedded(list))

	_, body = f.do(t, http.MethodGet, "/v1/customers/"+cus, nil, nil)
	require.False(t, has(body, "subscriptions"), "not returned unless expanded")

	// The subscription list without status: the same set, all of it.
	_, body = f.do(t, http.MethodGet, "/v1/subscriptions", url.Values{"customer": {cus}, "limit": {"100"}}, nil)
	require.Equal(t, current, embedded(body))

	// The customer list expands each customer's with data.subscriptions.
	other := f.customer(t).ID
	_, body = f.do(t, http.MethodGet, "/v1/customers", url.Values{"expand[]": {"data.subscriptions"}, "limit": {"1"}}, nil)
	require.Equal(t, true, path(body, "has_more"))
	require.Equal(t, other, path(body, "data", 0, "id"))
	require.Equal(t, false, path(body, "data", 0, "subscriptions", "has_more"))
	require.Empty(t, path(body, "data", 0, "subscriptions", "data"))
	_, body = f.do(t, http.MethodGet, "/v1/customers", url.Values{"expand[]": {"data.subscriptions"}, "starting_after": {other}}, nil)
	require.Equal(t, cus, path(body, "data", 0, "id"))
	require.Equal(t, current[:10], embedded(path(body, "data", 0, "subscriptions")))
}

// TestExpandedCustomerShapeMatchesStripeMock: every key the fake puts on
// an expanded customer and on its embedded list is one Stripe's OpenAPI
// mock also answers.
func TestExpandedCustomerShapeMatchesStripeMock(t *testing.T) {
	// Not parallel: every stripe-mock binds the fixed HTTPS port 12112.
	ref := openapi.Start(t)
	f := newFake(t, stripemock.Options{})
	cus := f.customer(t).ID
	f.subscribe(t, cus, "price_pro")

	get := func(base string) map[string]any {
		req, err := http.NewRequest(http.MethodGet, base+"/v1/customers/"+cus+"?expand[]=subscriptions", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+stripemock.DefaultAPIKey)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		var body map[string]any
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
		return body
	}
	want, got := get(ref), get(f.URL)
	keys := func(m any) []string {
		var out []string
		for k := range m.(map[string]any) {
			out = append(out, k)
		}
		slices.Sort(out)
		return out
	}
	for _, k := range keys(got) {
		require.Contains(t, keys(want), k, "customer key %q is not in Stripe's spec", k)
	}
	require.Equal(t, keys(want["subscriptions"]), keys(got["subscriptions"]), "embedded list keys")
}

// TestCustomerListPages: the customer list pages newest first through
// starting_after and ending_before, leaves deleted customers out (a page
// is filled past them, and has_more says false when only deleted ones
// remain), and an unknown cursor is an error.
func TestCustomerListPages(t *testing.T) {
	t.Parallel()
	f := newFake(t, stripemock.Options{})
	var ids []string // newest first
	for range 6 {
		ids = append([]string{f.customer(t).ID}, ids...)
	}
	for _, gone := range []string{ids[1], ids[5]} {
		resp, _ := f.do(t, http.MethodDelete, "/v1/customers/"+gone, nil, nil)
		require.Equal(t, http.StatusOK, resp.StatusCode)
	}
	page := func(values url.Values) ([]string, bool) {
		resp, body := f.do(t, http.MethodGet, "/v1/customers", values, nil)
		require.Equal(t, http.StatusOK, resp.StatusCode, body)
		var got []string
		for _, c := range path(body, "data").([]any) {
			got = append(got, path(c, "id").(string))
		}
		return got, path(body, "has_more").(bool)
	}
	got, more := page(url.Values{"limit": {"2"}})
	require.Equal(t, []string{ids[0], ids[2]}, got, "the deleted customer between them is skipped")
	require.True(t, more)
	got, more = page(url.Values{"limit": {"2"}, "starting_after": {ids[2]}})
	require.Equal(t, []string{ids[3], ids[4]}, got)
	require.False(t, more, "only a deleted customer is left")
	got, more = page(url.Values{"starting_after": {ids[1]}})
	require.Equal(t, []string{ids[2], ids[3], ids[4]}, got, "a deleted customer is still a cursor")
	require.False(t, more)
	got, more = page(url.Values{"limit": {"1"}, "ending_before": {ids[3]}})
	require.Equal(t, []string{ids[2]}, got)
	require.True(t, more)
	resp, _ := f.do(t, http.MethodGet, "/v1/customers", url.Values{"starting_after": {"cus_nope"}}, nil)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	resp, _ = f.do(t, http.MethodGet, "/v1/customers", url.Values{"limit": {"101"}}, nil)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
}

// TestAnswersAreIndentedLikeStripe: every answer is the canonical indented
// JSON of its content (keys sorted, two spaces, encoding/json's escaping),
// byte for byte, as json.MarshalIndent renders it.
func TestAnswersAreIndentedLikeStripe(t *testing.T) {
	t.Parallel()
	f := newFake(t, stripemock.Options{})
	cus := f.customer(t).ID
	sub := f.subscribe(t, cus, "price_pro")
	for _, target := range []string{
		"/v1/customers?limit=100&expand[0]=data.subscriptions", "/v1/customers/" + cus + "?expand[]=subscriptions",
		"/v1/subscriptions/" + sub.ID, "/v1/subscriptions?customer=" + cus, "/v1/invoices", "/v1/events", "/v1/prices",
	} {
		req, err := http.NewRequest(http.MethodGet, f.URL+target, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+stripemock.DefaultAPIKey)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		raw, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, target)
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		var content any
		require.NoError(t, dec.Decode(&content))
		want, err := json.MarshalIndent(content, "", "  ")
		require.NoError(t, err)
		require.Equal(t, string(want), string(raw), target)
	}
}
