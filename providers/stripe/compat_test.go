package stripe_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/mocks/stripe/openapi"
	"github.com/billsync/billsync/providers/stripe"
	"github.com/billsync/billsync/reconcile"
)

// stripeMock runs Stripe's OpenAPI mock (stripe-mock) behind a recorder, so
// a test can check that every request the client sends is one Stripe's
// published API accepts (stripe-mock validates parameters against the spec
// and answers 400 otherwise). It keeps no state: any id returns a fixture.
type stripeMock struct {
	*recorder
	URL   string
	mu    sync.Mutex
	patch func(path string, body map[string]any) // see patchWith
}

func startStripeMock(t *testing.T) *stripeMock {
	t.Helper()
	target, err := url.Parse(openapi.Start(t))
	require.NoError(t, err)
	proxy := httputil.NewSingleHostReverseProxy(target)
	m := &stripeMock{recorder: &recorder{}}
	proxy.ModifyResponse = m.patchResponse
	hs := httptest.NewServer(m.wrap(proxy, nil))
	t.Cleanup(hs.Close)
	m.URL = hs.URL
	return m
}

// patchWith makes the proxy rewrite stripe-mock's 200 answers for the rest of
// the test: patch gets the request path and the decoded body to change in
// place. The request has already passed stripe-mock's validation; only the
// fixture answer is changed.
func (m *stripeMock) patchWith(t *testing.T, patch func(path string, body map[string]any)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.patch = patch
	t.Cleanup(func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.patch = nil
	})
}

func (m *stripeMock) patchResponse(resp *http.Response) error {
	m.mu.Lock()
	patch := m.patch
	m.mu.Unlock()
	if patch == nil || resp.StatusCode != http.StatusOK {
		return nil
	}
	var body map[string]any
	dec := json.NewDecoder(resp.Body)
	dec.UseNumber() // keep Unix timestamps and amounts as written
	if err := dec.Decode(&body); err != nil {
		return err
	}
	resp.Body.Close()
	patch(resp.Request.URL.Path, body)
	out, err := json.Marshal(body)
	if err != nil {
		return err
	}
	resp.Body = io.NopCloser(bytes.NewReader(out))
	resp.ContentLength = int64(len(out))
	resp.Header.Set("Content-Length", strconv.Itoa(len(out)))
	return nil
}

// stripeMockClient returns a started stripe-mock and a client of it that
// does not retry (a rejected request must show).
func stripeMockClient(t *testing.T) (*stripeMock, *stripe.Client) {
	t.Helper()
	m := startStripeMock(t)
	cfg := testConfig(m.URL)
	cfg.APIKey = "sk_test_123" // stripe-mock takes any test key
	cfg.RetryMax = -1
	return m, newTestClient(t, cfg)
}

func TestCompatStripeMock(t *testing.T) {
	// The subtests run in order: they share one stripe-mock and one
	// recorder, and FetchLive patches the recorder's answers while it runs.
	m, c := stripeMockClient(t)

	t.Run("Fetch", func(t *testing.T) {
		_, err := c.Fetch(context.Background(), "cus_compat")
		requireFetchAccepted(t, m.seen())

		// stripe-mock v0.203.0 answers an active subscription whose generated
		// item period ends (976287773, 2000-12-08) before it starts
		// (1896570518, 2030-02-06): unreadable, a permanent error with the
		// reason, never a snapshot with that period.
		var perm *reconcile.PermanentError
		require.ErrorAs(t, err, &perm)
		require.Contains(t, perm.Reason, "(active): current period ends (2000-12-08T")
		require.Contains(t, perm.Reason, "before it starts (2030-02-06T")
	})

	// fixSubscriptions turns stripe-mock's subscription fixtures in a list
	// into readable ones: a valid period on each item and a lookup key.
	start := time.Date(2025, 9, 1, 0, 0, 0, 0, time.UTC)
	end := start.AddDate(0, 1, 0)
	fixSubscriptions := func(list map[string]any) {
		for _, sub := range list["data"].([]any) {
			sub := sub.(map[string]any)
			sub["status"] = "active"
			for _, item := range sub["items"].(map[string]any)["data"].([]any) {
				item := item.(map[string]any)
				item["current_period_start"] = start.Unix()
				item["current_period_end"] = end.Unix()
				item["price"].(map[string]any)["lookup_key"] = "pro"
			}
		}
	}
	want := reconcile.Snapshot{
		Provider:   stripe.Provider,
		CustomerID: "cus_compat",
		UserRef:    "user_compat",
		Subscriptions: []reconcile.Subscription{{
			ID:      "sub_1Pgc6rB7WZ01zgkWNy0Cn5nw", // the fixture's
			Status:  "active",
			Created: time.Unix(1234567890, 0).UTC(),
			Items: []reconcile.Item{{PriceRefs: []string{"pro", "price_1PgafmB7WZ01zgkW6dKueIc5"}, Quantity: 1,
				PeriodStart: start, PeriodEnd: end}},
			// The fixture's cancel_at_period_end is true, its trial_end is
			// its created time and its pause_collection an object.
			CancelAtPeriodEnd: true,
			TrialEnd:          time.Unix(1234567890, 0).UTC(),
			CollectionPaused:  true,
		}},
	}

	t.Run("FetchLive", func(t *testing.T) {
		// The proxy turns the fixture into a usable customer on the way
		// back. Without this patch Fetch fails as in "Fetch" above.
		m.patchWith(t, func(path string, body map[string]any) {
			if path == "/v1/customers/cus_compat" {
				body["id"] = "cus_compat"
				body["metadata"] = map[string]any{"user_id": "user_compat"}
				body["email"] = nil
				fixSubscriptions(body["subscriptions"].(map[string]any))
			}
		})
		snap, err := c.Fetch(context.Background(), "cus_compat")
		requireFetchAccepted(t, m.seen())
		require.NoError(t, err)
		require.Equal(t, want, snap)
	})

	t.Run("FetchFallback", func(t *testing.T) {
		// has_more on the embedded list: the subscription list is read,
		// with parameters stripe-mock accepts.
		m.patchWith(t, func(path string, body map[string]any) {
			switch path {
			case "/v1/customers/cus_compat":
				body["id"] = "cus_compat"
				body["metadata"] = map[string]any{"user_id": "user_compat"}
				body["email"] = nil
				body["subscriptions"].(map[string]any)["has_more"] = true
			case "/v1/subscriptions":
				fixSubscriptions(body)
			}
		})
		snap, err := c.Fetch(context.Background(), "cus_compat")
		require.NoError(t, err)
		require.Equal(t, want, snap)
		reqs := m.seen()
		require.Len(t, reqs, 2)
		for _, r := range reqs {
			require.Equal(t, http.StatusOK, r.status, "stripe-mock refused %s %s?%s", r.method, r.path, r.query)
		}
		require.Equal(t, "/v1/subscriptions", reqs[1].path)
		q, err := url.ParseQuery(reqs[1].query)
		require.NoError(t, err)
		require.Equal(t, url.Values{"customer": {"cus_compat"}, "limit": {"100"}}, q)
	})

	t.Run("ListPage", func(t *testing.T) {
		snaps, _, more, err := c.ListPage(context.Background(), "cus_cursor")
		require.NoError(t, err)
		// The fixture's one customer has the subscription with the
		// inverted period above, so it is left out for Fetch to report.
		require.Empty(t, snaps)
		require.False(t, more)
		reqs := m.seen()
		require.Len(t, reqs, 1)
		require.Equal(t, http.StatusOK, reqs[0].status, "stripe-mock refused %s?%s", reqs[0].path, reqs[0].query)
		require.Equal(t, "/v1/customers", reqs[0].path)
		q, err := url.ParseQuery(reqs[0].query)
		require.NoError(t, err)
		require.Equal(t, url.Values{"limit": {"100"}, "starting_after": {"cus_cursor"},
			"expand[0]": {"data.subscriptions"}}, q)

		// A part of the list, by creation time, as Split makes them.
		_, _, _, err = c.ListPage(context.Background(), "after=cus_cursor&at=1700000500&top=1700000900&from=1700000000&to=1700001000&pages=1")
		require.NoError(t, err)
		reqs = m.seen()
		require.Len(t, reqs, 1)
		require.Equal(t, http.StatusOK, reqs[0].status, "stripe-mock refused %s?%s", reqs[0].path, reqs[0].query)
		q, err = url.ParseQuery(reqs[0].query)
		require.NoError(t, err)
		require.Equal(t, url.Values{"limit": {"100"}, "starting_after": {"cus_cursor"}, "expand[0]": {"data.subscriptions"},
			"created[gte]": {"1700000000"}, "created[lt]": {"1700001000"}}, q)
	})

	t.Run("PricesAndThinEventLookups", func(t *testing.T) {
		prices, err := c.ActivePrices(context.Background(), false)
		require.NoError(t, err)
		require.NotEmpty(t, prices)
		for _, typ := range []string{"subscription", "invoice"} {
			customer, err := c.CustomerOf(context.Background(), reconcile.Related{Type: typ, ID: "obj_compat"})
			require.NoError(t, err, typ)
			require.True(t, strings.HasPrefix(customer, "cus_"), "%s names its customer: %q", typ, customer)
		}
		reqs := m.seen()
		require.Len(t, reqs, 3)
		for _, r := range reqs {
			require.Equal(t, http.StatusOK, r.status, "stripe-mock refused %s %s?%s", r.method, r.path, r.query)
		}
		require.Equal(t, "/v1/prices", reqs[0].path)
		q, err := url.ParseQuery(reqs[0].query)
		require.NoError(t, err)
		require.Equal(t, url.Values{"active": {"true"}, "limit": {"100"}}, q)
		require.Equal(t, "/v1/subscriptions/obj_compat", reqs[1].path)
		require.Equal(t, "/v1/invoices/obj_compat", reqs[2].path)
	})

	t.Run("EventsFeedAndEndpoints", func(t *testing.T) {
		// The feed's list (created[gte], types[], limit, starting_after), the
		// endpoint reads, setup's create or update, and check's reads are
		// all requests Stripe's spec accepts.
		ctx := context.Background()
		page, err := c.ListEvents(ctx, time.Unix(1764500000, 0), "")
		require.NoError(t, err)
		if page.Next != "" {
			_, err = c.ListEvents(ctx, time.Unix(1764500000, 0), page.Next)
			require.NoError(t, err)
		}
		eps, err := c.WebhookEndpoints(ctx)
		require.NoError(t, err)
		require.NotEmpty(t, eps)
		_, _, err = stripe.Endpoint{Client: c, ID: eps[0].ID}.WebhookEndpoint(ctx)
		require.NoError(t, err)
		_, _, err = c.SetupEndpoint(ctx, "https://billing.example.com/webhooks/stripe") // no such URL: a create
		require.NoError(t, err)
		_, _, err = c.SetupEndpoint(ctx, eps[0].URL) // the fixture's URL: an update
		require.NoError(t, err)
		require.Empty(t, c.CheckAccess(ctx))
		for _, r := range m.seen() {
			require.Equal(t, http.StatusOK, r.status, "stripe-mock refused %s %s?%s", r.method, r.path, r.query)
			require.Equal(t, stripe.APIVersion, r.version)
		}
	})

	t.Run("MockRejectsInvalidParameters", func(t *testing.T) {
		// The check above can fail: stripe-mock does refuse what Stripe would.
		req, err := http.NewRequest(http.MethodGet, m.URL+"/v1/subscriptions?status=bogus&limit=100", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer sk_test_123")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusBadRequest, resp.StatusCode)
		m.seen()
	})
}

// requireFetchAccepted checks that one Fetch of cus_compat sent exactly one
// request, the customer retrieve with its subscriptions expanded, at
// billsync's API version, and that stripe-mock accepted it.
func requireFetchAccepted(t *testing.T, reqs []recorded) {
	t.Helper()
	require.Len(t, reqs, 1)
	r := reqs[0]
	require.Equal(t, http.StatusOK, r.status, "stripe-mock refused %s %s?%s", r.method, r.path, r.query)
	require.Equal(t, stripe.APIVersion, r.version)
	require.Equal(t, "/v1/customers/cus_compat", r.path)
	q, err := url.ParseQuery(r.query)
	require.NoError(t, err)
	require.Equal(t, url.Values{"expand[0]": {"subscriptions"}}, q)
}
