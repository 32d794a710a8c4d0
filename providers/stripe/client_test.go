package stripe_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	stripeapi "github.com/stripe/stripe-go/v82"

	"github.com/billsync/billsync/mocks/inproc"
	stripemock "github.com/billsync/billsync/mocks/stripe"
	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/providers/stripe"
	"github.com/billsync/billsync/reconcile"
)

// recorded is one API request as the client sent it, with the answer's
// status.
type recorded struct {
	method, path, query, version string
	status                       int
}

// recorder keeps the requests a server answered.
type recorder struct {
	mu       sync.Mutex
	requests []recorded
}

// wrap records each request next answers. rewrite, when set, may change
// the request before next sees it (the record keeps the client's original).
func (rc *recorder) wrap(next http.Handler, rewrite func(*http.Request)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := recorded{method: r.Method, path: r.URL.Path, query: r.URL.RawQuery, version: r.Header.Get("Stripe-Version")}
		if rewrite != nil {
			rewrite(r)
		}
		rec.status = testenv.AnswerStatus(next, w, r)
		rc.mu.Lock()
		rc.requests = append(rc.requests, rec)
		rc.mu.Unlock()
	})
}

// seen returns the requests received so far and forgets them.
func (rc *recorder) seen() []recorded {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	r := rc.requests
	rc.requests = nil
	return r
}

// statuses returns the answers' status codes of reqs, in order.
func statuses(reqs []recorded) []int {
	out := make([]int, 0, len(reqs))
	for _, r := range reqs {
		out = append(out, r.status)
	}
	return out
}

func (rc *recorder) count() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return len(rc.requests)
}

// fakeStripe is the shared harness's fake Stripe behind a recorder of the
// API requests it received.
type fakeStripe struct {
	*stripemock.Server
	*recorder
	h   *testenv.Test
	URL string
}

// newFake starts the fake. rewrite, when set, may change each request before
// the fake sees it (the recorder sees the client's original).
func newFake(t *testing.T, opts stripemock.Options, rewrite func(*http.Request)) *fakeStripe {
	t.Helper()
	rec := &recorder{}
	h := testenv.ForTest(t, testenv.Stripe, testenv.Options{Wrap: func(next http.Handler) http.Handler { return rec.wrap(next, rewrite) }, Stripe: testenv.StripeOptions{Fake: opts}})
	return &fakeStripe{Server: h.Stripe.Fake, recorder: rec, h: h, URL: h.URL}
}

func (f *fakeStripe) customer(t *testing.T, metadata map[string]string) string {
	t.Helper()
	c, err := f.h.Stripe.API.V1Customers.Create(context.Background(), &stripeapi.CustomerCreateParams{
		Email: stripeapi.String("ada@example.com"), Metadata: metadata})
	require.NoError(t, err)
	return c.ID
}

func (f *fakeStripe) subscribe(t *testing.T, customerID, priceID string) *stripeapi.Subscription {
	t.Helper()
	sub, err := f.h.Stripe.Subscribe(context.Background(), customerID, priceID)
	require.NoError(t, err)
	return sub
}

func (f *fakeStripe) cancel(t *testing.T, subID string) {
	t.Helper()
	_, err := f.h.Stripe.API.V1Subscriptions.Cancel(context.Background(), subID, nil)
	require.NoError(t, err)
}

// newFakeHolding is a fake with one subscribed customer that holds every
// request until the client cancels it: an answer that never comes in
// time, whatever the machine's load.
func newFakeHolding(t *testing.T) (*fakeStripe, string, *stripeapi.Subscription) {
	t.Helper()
	var hold atomic.Bool
	f := newFake(t, stripemock.Options{}, func(r *http.Request) {
		if hold.Load() {
			<-r.Context().Done()
		}
	})
	cus := f.customer(t, map[string]string{"user_id": "u1"})
	sub := f.subscribe(t, cus, "price_pro")
	f.seen()
	hold.Store(true)
	return f, cus, sub
}

// testConfig is a Config for url with short waits and no rate limit to speak of.
func testConfig(url string) stripe.Config {
	return testenv.FastStripe(stripe.Config{APIKey: stripemock.DefaultAPIKey, BaseURL: url})
}

func newTestClient(t *testing.T, cfg stripe.Config) *stripe.Client {
	t.Helper()
	c, err := stripe.NewClient(cfg)
	require.NoError(t, err)
	return c
}

// bubbleClient is a client of cfg whose requests reach the fake (through
// its recorder) in-process, for a test inside a testing/synctest bubble:
// there the client's rate limiters and backoffs wait on the bubble's fake
// clock, which moves only while every goroutine of the bubble waits, so
// the test can state how long the client waited, exactly, however busy
// the machine is. Call it inside the bubble.
func (f *fakeStripe) bubbleClient(t *testing.T, cfg stripe.Config) *stripe.Client {
	t.Helper()
	c, err := stripe.NewClientOver(cfg, inproc.Transport{Handler: f.wrap(f.Server, nil)})
	require.NoError(t, err)
	return c
}

// periodOfItem is the period the fake gave the subscription's first item
// (basil shape, which the typed stripe-go struct reads).
func periodOfItem(sub *stripeapi.Subscription) (time.Time, time.Time) {
	it := sub.Items.Data[0]
	return time.Unix(it.CurrentPeriodStart, 0).UTC(), time.Unix(it.CurrentPeriodEnd, 0).UTC()
}

func TestNewClientValidates(t *testing.T) {
	t.Parallel()
	_, err := stripe.NewClient(stripe.Config{})
	require.ErrorContains(t, err, "API key is required")
	_, err = stripe.NewClient(stripe.Config{APIKey: "sk_test_x", BaseURL: "localhost:12111"})
	require.ErrorContains(t, err, "not an http(s) URL")
	_, err = stripe.NewClient(stripe.Config{APIKey: "sk_test_x", RetryWaitMin: time.Second, RetryWaitMax: time.Millisecond})
	require.ErrorContains(t, err, "maximum wait")
	c, err := stripe.NewClient(stripe.Config{APIKey: "sk_test_x"})
	require.NoError(t, err)
	require.Equal(t, "stripe", c.Name())
	require.Equal(t, "2025-08-27.basil", stripe.APIVersion)
}

// subscribeN gives customer n subscriptions of price, one clock second
// apart, and returns their ids, oldest first.
func (f *fakeStripe) subscribeN(t *testing.T, customerID, priceID string, n int) []string {
	t.Helper()
	ids := make([]string, 0, n)
	for range n {
		ids = append(ids, f.subscribe(t, customerID, priceID).ID)
		f.Clock().Advance(time.Second)
	}
	return ids
}

// subIDs returns the snapshot's subscription ids in its order.
func subIDs(snap reconcile.Snapshot) []string {
	ids := make([]string, 0, len(snap.Subscriptions))
	for _, s := range snap.Subscriptions {
		ids = append(ids, s.ID)
	}
	return ids
}

// newestFirst reverses ids (oldest first) into Stripe's order.
func newestFirst(ids ...string) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[len(ids)-1-i] = id
	}
	return out
}

func TestFetch(t *testing.T) {
	t.Parallel()

	t.Run("OneActive_OneRequest", func(t *testing.T) {
		t.Parallel()
		f := newFake(t, stripemock.Options{}, nil)
		cus := f.customer(t, map[string]string{"user_id": "u_ada"})
		sub := f.subscribe(t, cus, "price_pro")
		start, end := periodOfItem(sub)
		f.seen()

		snap, err := newTestClient(t, testConfig(f.URL)).Fetch(context.Background(), cus)
		require.NoError(t, err)
		require.Equal(t, reconcile.Snapshot{
			Provider: "stripe", CustomerID: cus, UserRef: "u_ada", Email: "ada@example.com",
			Subscriptions: []reconcile.Subscription{{ID: sub.ID, Status: "active", Created: time.Unix(sub.Created, 0).UTC(),
				Items: []reconcile.Item{{PriceRefs: []string{"pro", "price_pro"}, Quantity: 1, PeriodStart: start, PeriodEnd: end}}}},
		}, snap)
		require.True(t, end.After(start))

		reqs := f.seen()
		require.Len(t, reqs, 1, "one request per reconcile")
		require.Equal(t, "/v1/customers/"+cus, reqs[0].path)
		q, err := url.ParseQuery(reqs[0].query)
		require.NoError(t, err)
		require.Equal(t, url.Values{"expand[0]": {"subscriptions"}}, q)
		require.Equal(t, stripe.APIVersion, reqs[0].version, "every request pins the API version")
	})

	t.Run("TenCurrent_OneRequest", func(t *testing.T) {
		t.Parallel()
		f := newFake(t, stripemock.Options{}, nil)
		cus := f.customer(t, nil)
		ids := f.subscribeN(t, cus, "price_pro", 10)
		f.cancel(t, f.subscribe(t, cus, "price_team").ID) // canceled: not current, not counted
		f.seen()
		var attempts atomic.Int32
		cfg := testConfig(f.URL)
		cfg.OnAttempt = func(string) { attempts.Add(1) }
		snap, err := newTestClient(t, cfg).Fetch(context.Background(), cus)
		require.NoError(t, err)
		require.Equal(t, newestFirst(ids...), subIDs(snap))
		require.Len(t, f.seen(), 1)
		require.Equal(t, int32(1), attempts.Load())
	})

	t.Run("ElevenCurrent_FallsBackToTheList", func(t *testing.T) {
		t.Parallel()
		f := newFake(t, stripemock.Options{}, nil)
		cus := f.customer(t, map[string]string{"user_id": "u_many"})
		ids := f.subscribeN(t, cus, "price_pro", 11)
		f.cancel(t, ids[3])
		ids = append(ids[:3:3], ids[4:]...)
		ids = append(ids, f.subscribeN(t, cus, "price_team", 1)...) // 11 current again
		f.seen()

		snap, err := newTestClient(t, testConfig(f.URL)).Fetch(context.Background(), cus)
		require.NoError(t, err)
		require.Equal(t, newestFirst(ids...), subIDs(snap), "every current subscription, newest first, none canceled")
		require.Equal(t, "u_many", snap.UserRef)
		require.Equal(t, []string{"team", "price_team"}, snap.Subscriptions[0].Items[0].PriceRefs)

		reqs := f.seen()
		require.Len(t, reqs, 2, "the embedded page, then one list page")
		require.Equal(t, "/v1/subscriptions", reqs[1].path)
		q, err := url.ParseQuery(reqs[1].query)
		require.NoError(t, err)
		require.Equal(t, url.Values{"customer": {cus}, "limit": {"100"}}, q, "default status: all but canceled")
	})

	t.Run("HundredAndOneCurrent_ListPages", func(t *testing.T) {
		t.Parallel()
		f := newFake(t, stripemock.Options{}, nil)
		cus := f.customer(t, nil)
		ids := f.subscribeN(t, cus, "price_pro", 101)
		f.seen()
		snap, err := newTestClient(t, testConfig(f.URL)).Fetch(context.Background(), cus)
		require.NoError(t, err)
		require.Equal(t, newestFirst(ids...), subIDs(snap))
		require.Len(t, f.seen(), 3, "the embedded page, then two list pages of 100")
	})

	t.Run("SeveralSubscriptionsWithQuantities", func(t *testing.T) {
		t.Parallel()
		f := newFake(t, stripemock.Options{}, nil)
		cus := f.customer(t, nil)
		older := f.subscribe(t, cus, "price_team")
		f.Clock().Advance(time.Minute)
		seats, err := f.h.Stripe.API.V1Subscriptions.Create(context.Background(), &stripeapi.SubscriptionCreateParams{
			Customer: stripeapi.String(cus),
			Items: []*stripeapi.SubscriptionCreateItemParams{
				{Price: stripeapi.String("price_pro"), Quantity: stripeapi.Int64(50)},
				{Price: stripeapi.String("price_free")},
			}})
		require.NoError(t, err)
		require.NoError(t, f.SetSubscriptionStatus(older.ID, "past_due"))

		snap, err := newTestClient(t, testConfig(f.URL)).Fetch(context.Background(), cus)
		require.NoError(t, err)
		require.Len(t, snap.Subscriptions, 2)
		got := snap.Subscriptions[0]
		require.Equal(t, seats.ID, got.ID)
		require.Len(t, got.Items, 2)
		require.Equal(t, int64(50), got.Items[0].Quantity)
		require.Equal(t, []string{"pro", "price_pro"}, got.Items[0].PriceRefs)
		require.Equal(t, int64(1), got.Items[1].Quantity)
		require.Equal(t, []string{"free", "price_free"}, got.Items[1].PriceRefs)
		require.Equal(t, older.ID, snap.Subscriptions[1].ID)
		require.Equal(t, "past_due", snap.Subscriptions[1].Status)
	})

	t.Run("UserRefKey", func(t *testing.T) {
		t.Parallel()
		f := newFake(t, stripemock.Options{}, nil)
		cus := f.customer(t, map[string]string{"user_id": "wrong", "app_ref": "acct_42"})
		cfg := testConfig(f.URL)
		cfg.UserRefKey = "app_ref"
		snap, err := newTestClient(t, cfg).Fetch(context.Background(), cus)
		require.NoError(t, err)
		require.Equal(t, "acct_42", snap.UserRef)
	})

	t.Run("OnlyCanceled_EmptyInOneRequest", func(t *testing.T) {
		t.Parallel()
		f := newFake(t, stripemock.Options{}, nil)
		cus := f.customer(t, map[string]string{"user_id": "u_gone"})
		f.cancel(t, f.subscribe(t, cus, "price_pro").ID)
		f.cancel(t, f.subscribe(t, cus, "price_team").ID)
		f.seen()

		snap, err := newTestClient(t, testConfig(f.URL)).Fetch(context.Background(), cus)
		require.NoError(t, err)
		require.Equal(t, reconcile.Snapshot{Provider: "stripe", CustomerID: cus, UserRef: "u_gone", Email: "ada@example.com",
			Subscriptions: []reconcile.Subscription{}}, snap)
		require.Len(t, f.seen(), 1)
	})

	t.Run("NoSubscriptions", func(t *testing.T) {
		t.Parallel()
		f := newFake(t, stripemock.Options{}, nil)
		cus := f.customer(t, map[string]string{"user_id": "u_new"})
		f.seen()
		snap, err := newTestClient(t, testConfig(f.URL)).Fetch(context.Background(), cus)
		require.NoError(t, err)
		require.Equal(t, reconcile.Snapshot{Provider: "stripe", CustomerID: cus, UserRef: "u_new", Email: "ada@example.com",
			Subscriptions: []reconcile.Subscription{}}, snap)
		require.Len(t, f.seen(), 1)
	})

	t.Run("ErrCustomerUnknown", func(t *testing.T) {
		t.Parallel()
		f := newFake(t, stripemock.Options{}, nil)
		_, err := newTestClient(t, testConfig(f.URL)).Fetch(context.Background(), "cus_nobody")
		require.ErrorIs(t, err, reconcile.ErrCustomerUnknown)
		require.True(t, reconcile.IsPermanent(err))
		require.ErrorContains(t, err, "No such customer")
		require.Len(t, f.seen(), 1, "a 404 is not retried")
	})

	t.Run("Deleted", func(t *testing.T) {
		t.Parallel()
		// Stripe's answer for a deleted customer, whatever was expanded.
		rec := &recorder{}
		hs := httptest.NewServer(rec.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			if r.URL.Path != "/v1/customers/cus_gone" {
				w.WriteHeader(http.StatusTeapot)
				return
			}
			fmt.Fprint(w, `{"id":"cus_gone","object":"customer","deleted":true}`)
		}), nil))
		t.Cleanup(hs.Close)
		snap, err := newTestClient(t, testConfig(hs.URL)).Fetch(context.Background(), "cus_gone")
		require.NoError(t, err)
		require.Equal(t, reconcile.Snapshot{Provider: "stripe", CustomerID: "cus_gone", Deleted: true}, snap)
		require.Len(t, rec.seen(), 1)
	})

	t.Run("MixedIntervalsTrialPause", func(t *testing.T) {
		t.Parallel()
		// A recorded-shape answer the fake cannot produce yet: mixed item
		// periods, trial seats, paused collection; read through stripe-go.
		body, err := os.ReadFile(filepath.Join("testdata", "customer_expanded_basil.json"))
		require.NoError(t, err)
		hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(body)
		}))
		t.Cleanup(hs.Close)
		snap, err := newTestClient(t, testConfig(hs.URL)).Fetch(context.Background(), "cus_TmixedMay0007")
		require.NoError(t, err)
		require.Equal(t, "u_may", snap.UserRef)
		require.Len(t, snap.Subscriptions, 3)
		trial, mixed, paused := snap.Subscriptions[0], snap.Subscriptions[1], snap.Subscriptions[2]
		require.Equal(t, "trialing", trial.Status)
		require.Equal(t, time.Date(2025, 12, 4, 0, 0, 0, 0, time.UTC), trial.TrialEnd)
		require.Equal(t, int64(50), trial.Items[0].Quantity)
		require.Equal(t, time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC), mixed.Items[0].PeriodEnd, "the yearly add-on's own period")
		require.Equal(t, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), mixed.Items[1].PeriodEnd, "the monthly plan's own period")
		require.True(t, mixed.CancelAtPeriodEnd, "cancel_at inside the monthly period")
		require.True(t, paused.CollectionPaused)
		require.False(t, mixed.CollectionPaused)
	})

	t.Run("ItemsCutShortAreListed", func(t *testing.T) {
		t.Parallel()
		// A subscription whose embedded items say has_more: the rest are
		// read, so the item that decides the plan cannot go missing.
		item := func(price string) string {
			return `{"id":"si_` + price + `","object":"subscription_item","quantity":1,"price":{"id":"` + price + `","lookup_key":null},` +
				`"current_period_start":1764547200,"current_period_end":1767225600}`
		}
		rec := &recorder{}
		hs := httptest.NewServer(rec.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			switch r.URL.Path {
			case "/v1/customers/cus_items":
				fmt.Fprint(w, `{"id":"cus_items","object":"customer","metadata":{},"subscriptions":{"object":"list","has_more":false,"data":[`+
					`{"id":"sub_items","object":"subscription","status":"active","created":1764547200,`+
					`"items":{"object":"list","has_more":true,"data":[`+item("price_addon")+`]}}]}}`)
			case "/v1/subscription_items":
				fmt.Fprint(w, `{"object":"list","has_more":false,"url":"/v1/subscription_items","data":[`+
					item("price_addon")+`,`+item("price_pro")+`]}`)
			default:
				w.WriteHeader(http.StatusTeapot)
			}
		}), nil))
		t.Cleanup(hs.Close)
		snap, err := newTestClient(t, testConfig(hs.URL)).Fetch(context.Background(), "cus_items")
		require.NoError(t, err)
		require.Len(t, snap.Subscriptions, 1)
		var refs [][]string
		for _, it := range snap.Subscriptions[0].Items {
			refs = append(refs, it.PriceRefs)
		}
		require.Equal(t, [][]string{{"price_addon"}, {"price_pro"}}, refs)
		reqs := rec.seen()
		require.Len(t, reqs, 2)
		q, err := url.ParseQuery(reqs[1].query)
		require.NoError(t, err)
		require.Equal(t, url.Values{"subscription": {"sub_items"}, "limit": {"100"}}, q)
	})

	t.Run("PreBasilResponseShape", func(t *testing.T) {
		t.Parallel()
		// A proxy (or an old recording) answering in the 2024-06-20 shape: the
		// period is on the subscription, which stripe-go's typed struct drops.
		f := newFake(t, stripemock.Options{}, func(r *http.Request) { r.Header.Set("Stripe-Version", "2024-06-20") })
		cus := f.customer(t, nil)
		sub := f.subscribe(t, cus, "price_team")
		require.Empty(t, sub.Items.Data[0].CurrentPeriodStart, "the fake must answer the old shape here")

		snap, err := newTestClient(t, testConfig(f.URL)).Fetch(context.Background(), cus)
		require.NoError(t, err)
		require.Len(t, snap.Subscriptions, 1)
		it := snap.Subscriptions[0].Items[0]
		require.Equal(t, sub.ID, snap.Subscriptions[0].ID)
		require.False(t, it.PeriodStart.IsZero())
		require.True(t, it.PeriodEnd.After(it.PeriodStart))
		require.True(t, it.PeriodStart.Equal(time.Unix(sub.StartDate, 0)), "period starts when the subscription did")
	})

	t.Run("ErrBadRequestIsPermanent", func(t *testing.T) {
		t.Parallel()
		hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Request-Id", "req_bad")
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, `{"error":{"type":"invalid_request_error","code":"parameter_invalid","message":"Invalid customer id"}}`)
		}))
		t.Cleanup(hs.Close)
		_, err := newTestClient(t, testConfig(hs.URL)).Fetch(context.Background(), "cus_x")
		var perm *reconcile.PermanentError
		require.ErrorAs(t, err, &perm)
		require.Contains(t, perm.Reason, "400 invalid_request_error parameter_invalid: Invalid customer id (request req_bad)")
	})

	t.Run("ErrAnswerCutShortIsTransient", func(t *testing.T) {
		t.Parallel()
		// A 200 whose body is not JSON (cut short, a proxy's page) is no
		// data Stripe holds: read it again later, never ignore the event.
		hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"id":"cus_cut","object":"customer","subscriptions":{"object":"list","data":[`)
		}))
		t.Cleanup(hs.Close)
		_, err := newTestClient(t, testConfig(hs.URL)).Fetch(context.Background(), "cus_cut")
		require.ErrorContains(t, err, "stripe retrieve customer cus_cut: unreadable answer")
		require.False(t, reconcile.IsPermanent(err))
	})

	t.Run("ErrProxyPageIsTransient", func(t *testing.T) {
		t.Parallel()
		// A refusal with no Stripe error in it is described by its status.
		hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(http.StatusBadGateway)
			fmt.Fprint(w, `<html><body>upstream gone</body></html>`)
		}))
		t.Cleanup(hs.Close)
		cfg := testConfig(hs.URL)
		cfg.RetryMax = -1
		_, err := newTestClient(t, cfg).Fetch(context.Background(), "cus_x")
		require.EqualError(t, err, "stripe retrieve customer cus_x: 502: Bad Gateway")
		require.False(t, reconcile.IsPermanent(err))
	})

	t.Run("ErrBadKeyIsTransient", func(t *testing.T) {
		t.Parallel()
		f := newFake(t, stripemock.Options{}, nil)
		cfg := testConfig(f.URL)
		cfg.APIKey = "sk_test_revoked"
		_, err := newTestClient(t, cfg).Fetch(context.Background(), "cus_x")
		require.Error(t, err)
		require.False(t, reconcile.IsPermanent(err), "a bad key must alert, not ignore events: %v", err)
		require.ErrorContains(t, err, "401")
		require.NotContains(t, err.Error(), "sk_test_revoked")
		require.Len(t, f.seen(), 1, "a 401 is not retried")
	})
}

func TestFetchFaults(t *testing.T) {
	t.Parallel()

	setup := func(t *testing.T) (*fakeStripe, string, *stripeapi.Subscription) {
		f := newFake(t, stripemock.Options{}, nil)
		cus := f.customer(t, map[string]string{"user_id": "u1"})
		sub := f.subscribe(t, cus, "price_pro")
		f.seen()
		return f, cus, sub
	}

	t.Run("5xxRetried", func(t *testing.T) {
		t.Parallel()
		f, cus, sub := setup(t)
		f.SetFaults(stripemock.Faults{Error5xxRate: 0.5, Seed: 7})
		cfg := testConfig(f.URL)
		cfg.RetryMax = 10
		snap, err := newTestClient(t, cfg).Fetch(context.Background(), cus)
		require.NoError(t, err)
		require.Equal(t, []string{sub.ID}, subIDs(snap))
		require.Equal(t, "u1", snap.UserRef)

		reqs := f.seen()
		failed := 0
		for _, r := range reqs {
			if r.status == http.StatusInternalServerError {
				failed++
			}
		}
		require.Greater(t, len(reqs), 1, "one call, answered 500 and retried")
		require.Equal(t, len(reqs)-1, failed)
	})

	t.Run("429RetryAfterHonoured", func(t *testing.T) {
		t.Parallel()
		f, cus, sub := setup(t)
		// One request per second: the first Fetch takes the token, the
		// second gets 429 with Retry-After: 1. RetryWaitMax is 10ms, so only
		// honouring Retry-After lets the retry through.
		// Stripe's 429s carry no Retry-After; the fake adds one when asked.
		// In a synctest bubble the client waits on the fake clock: the time
		// that passes is the wait the client chose, exactly.
		f.SetFaults(stripemock.Faults{RequestsPerSecond: 1, RetryAfter: time.Second})
		synctest.Test(t, func(t *testing.T) {
			c := f.bubbleClient(t, testConfig(f.URL))
			_, err := c.Fetch(context.Background(), cus)
			require.NoError(t, err)
			begin := time.Now()
			snap, err := c.Fetch(context.Background(), cus)
			waited := time.Since(begin)
			require.NoError(t, err)
			require.Equal(t, []string{sub.ID}, subIDs(snap))
			require.Equal(t, []int{http.StatusOK, http.StatusTooManyRequests, http.StatusOK}, statuses(f.seen()))
			require.Equal(t, time.Second, waited, "the retry waited Retry-After, not the 1-10 ms backoff")
		})
	})

	t.Run("Always500_TransientAfterRetryMax", func(t *testing.T) {
		t.Parallel()
		f, cus, _ := setup(t)
		f.SetFaults(stripemock.Faults{Error5xxRate: 1})
		cfg := testConfig(f.URL)
		cfg.RetryMax = 2
		var mu sync.Mutex
		var attempts []string
		cfg.OnAttempt = func(status string) { mu.Lock(); attempts = append(attempts, status); mu.Unlock() }
		_, err := newTestClient(t, cfg).Fetch(context.Background(), cus)
		require.Error(t, err)
		require.False(t, reconcile.IsPermanent(err))
		require.ErrorContains(t, err, "500 api_error")
		require.Len(t, f.seen(), cfg.RetryMax+1)
		require.Equal(t, []string{"500", "500", "500"}, attempts, "every attempt is reported, retries included")
	})

	t.Run("StripeShouldRetryHeaderObeyed", func(t *testing.T) {
		t.Parallel()
		// A 409 marked retryable is retried (the default policy would not);
		// a 500 marked not retryable is not (the default policy would).
		var attempts atomic.Int32
		hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			if attempts.Add(1) == 1 {
				w.Header().Set("Stripe-Should-Retry", "true")
				w.WriteHeader(http.StatusConflict)
				fmt.Fprint(w, `{"error":{"type":"invalid_request_error","code":"lock_timeout","message":"locked"}}`)
				return
			}
			w.Header().Set("Stripe-Should-Retry", "false")
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprint(w, `{"error":{"type":"api_error","message":"do not retry this one"}}`)
		}))
		t.Cleanup(hs.Close)
		_, err := newTestClient(t, testConfig(hs.URL)).Fetch(context.Background(), "cus_x")
		require.ErrorContains(t, err, "500 api_error: do not retry this one")
		require.False(t, reconcile.IsPermanent(err))
		require.Equal(t, int32(2), attempts.Load())
	})

	t.Run("AttemptTimeout", func(t *testing.T) {
		t.Parallel()
		// The fake never answers: each request it gets waits until the
		// client gives the attempt up, so no attempt can succeed however
		// slow the machine. The attempts are counted where they are made
		// (OnAttempt, called as each ends), not at the fake: on a busy
		// machine an attempt can expire before its request arrives.
		f, cus, _ := newFakeHolding(t)
		cfg := testConfig(f.URL)
		cfg.Timeout = 50 * time.Millisecond
		cfg.RetryMax = 1
		var mu sync.Mutex
		var attempts []string
		cfg.OnAttempt = func(status string) { mu.Lock(); attempts = append(attempts, status); mu.Unlock() }
		_, err := newTestClient(t, cfg).Fetch(context.Background(), cus)
		require.Error(t, err)
		require.False(t, reconcile.IsPermanent(err))
		require.ErrorIs(t, err, context.DeadlineExceeded, "the attempt's deadline, not the caller's: it has none")
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, []string{"error", "error"}, attempts, "each attempt times out and is retried")
		require.LessOrEqual(t, f.count(), cfg.RetryMax+1, "no request the client did not count")
	})

	t.Run("CallerDeadline", func(t *testing.T) {
		t.Parallel()
		f, cus, _ := setup(t)
		f.SetFaults(stripemock.Faults{Error5xxRate: 1})
		cfg := testConfig(f.URL)
		cfg.RetryWaitMin, cfg.RetryWaitMax, cfg.RetryMax = time.Second, time.Second, 100
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		_, err := newTestClient(t, cfg).Fetch(ctx, cus)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.False(t, reconcile.IsPermanent(err))
	})
}

func TestRateLimitShared(t *testing.T) {
	t.Parallel()
	f := newFake(t, stripemock.Options{}, nil)
	cus := f.customer(t, nil)
	f.subscribe(t, cus, "price_pro") // either read operation takes one request
	f.seen()
	synctest.Test(t, func(t *testing.T) {
		cfg := testConfig(f.URL)
		cfg.RateLimit, cfg.Burst = 20, 2
		c := f.bubbleClient(t, cfg)

		// 15 Fetches (1 request each) from 5 goroutines share one limiter.
		const fetches, workers = 15, 5
		jobs := make(chan struct{}, fetches)
		for range fetches {
			jobs <- struct{}{}
		}
		close(jobs)
		begin := time.Now()
		var wg sync.WaitGroup
		errs := make(chan error, fetches)
		for range workers {
			wg.Go(func() {
				for range jobs {
					_, err := c.Fetch(context.Background(), cus)
					errs <- err
				}
			})
		}
		wg.Wait()
		elapsed := time.Since(begin)
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		n := len(f.seen())
		require.Equal(t, fetches, n)
		// On the bubble's clock only the limiter takes time: Burst at once,
		// then 20/s for the five goroutines together (a limiter each would
		// take a twentieth of a second).
		want := time.Duration(float64(n-cfg.Burst) / cfg.RateLimit * float64(time.Second))
		require.InDelta(t, want, elapsed, float64(time.Millisecond), "one limiter's schedule")
	})
}

func TestOperationRateLimit(t *testing.T) {
	t.Parallel()
	f := newFake(t, stripemock.Options{}, nil)
	cus := f.customer(t, nil)
	f.seen()

	// Six customer retrieves at 5/s take a second of the bubble's clock; a
	// prices list meanwhile waits for its own operation's budget only.
	synctest.Test(t, func(t *testing.T) {
		cfg := testConfig(f.URL)
		cfg.OperationRateLimit, cfg.Burst = 5, 1
		c := f.bubbleClient(t, cfg)
		done := make(chan time.Duration)
		begin := time.Now()
		go func() {
			for range 6 {
				_, err := c.Fetch(context.Background(), cus)
				assert.NoError(t, err)
			}
			done <- time.Since(begin)
		}()
		synctest.Wait() // the first retrieve is answered; the second waits for the operation's budget
		require.Equal(t, 1, f.count())
		pricesBegin := time.Now()
		prices, err := c.ActivePrices(context.Background(), false)
		pricesTook := time.Since(pricesBegin)
		require.NoError(t, err)
		require.NotEmpty(t, prices)
		customersTook := <-done
		require.InDelta(t, time.Second, customersTook, float64(time.Millisecond), "retrieve customer: 5/s")
		// The prices list waits for the global limit's next token (1/10000 s
		// at Burst 1), never for the retrieve's (1/5 s).
		require.Less(t, pricesTook, 200*time.Millisecond, "prices do not queue behind customers")
	})

	t.Run("DefaultIsStripes25", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			cfg := testConfig(f.URL)
			cfg.OperationRateLimit, cfg.Burst = 0, 1
			c := f.bubbleClient(t, cfg)
			begin := time.Now()
			for range 6 {
				_, err := c.Fetch(context.Background(), cus)
				require.NoError(t, err)
			}
			require.InDelta(t, 5*time.Second/25, time.Since(begin), float64(time.Millisecond), "25/s: five waits of 1/25 s")
		})
	})
}

// afterOf returns the customer a list cursor resumes after.
func afterOf(cursor string) string {
	if v, err := url.ParseQuery(cursor); err == nil && v.Has("after") {
		return v.Get("after")
	}
	return cursor
}

func TestList(t *testing.T) {
	t.Parallel()

	// collect lists from cursor to the end and returns its pages and
	// snapshots.
	type call struct {
		n     int
		after string // the customer the cursor after the page resumes after
		more  bool
	}
	// collectCursors is collect with the cursor after each page.
	collectCursors := func(t *testing.T, c *stripe.Client, cursor string) ([]call, map[string]reconcile.Snapshot, []string) {
		t.Helper()
		var calls []call
		var cursors []string
		got := map[string]reconcile.Snapshot{}
		for more := true; more; {
			var snaps []reconcile.Snapshot
			var err error
			snaps, cursor, more, err = c.ListPage(context.Background(), cursor)
			require.NoError(t, err)
			calls = append(calls, call{len(snaps), afterOf(cursor), more})
			cursors = append(cursors, cursor)
			for _, s := range snaps {
				require.NotContains(t, got, s.CustomerID, "one snapshot per customer")
				got[s.CustomerID] = s
			}
		}
		return calls, got, cursors
	}
	collect := func(t *testing.T, c *stripe.Client, cursor string) ([]call, map[string]reconcile.Snapshot) {
		t.Helper()
		calls, got, _ := collectCursors(t, c, cursor)
		return calls, got
	}

	t.Run("EqualsFetch", func(t *testing.T) {
		t.Parallel()
		f := newFake(t, stripemock.Options{}, nil)
		// 250 customers: the oldest has 12 current subscriptions (more than
		// the embedded page); customer 100 (the last of page one) has 11;
		// others have none, canceled only, or several of mixed status.
		var customers []string
		for i := range 250 {
			cus := f.customer(t, map[string]string{"user_id": fmt.Sprint("u", i)})
			customers = append(customers, cus)
			switch {
			case i == 0:
				f.subscribeN(t, cus, "price_pro", 12)
			case i == 150: // newest first: the 100th customer listed
				f.subscribeN(t, cus, "price_team", 11)
			case i%5 == 1:
				f.cancel(t, f.subscribe(t, cus, "price_pro").ID)
			case i%5 == 2:
				f.subscribe(t, cus, "price_team")
				past := f.subscribe(t, cus, "price_pro")
				require.NoError(t, f.SetSubscriptionStatus(past.ID, "past_due"))
			case i%5 == 3:
				f.subscribe(t, cus, "price_pro")
			}
		}
		f.seen()
		c := newTestClient(t, testConfig(f.URL))

		calls, got := collect(t, c, "")
		require.Equal(t, []call{{100, customers[150], true}, {100, customers[50], true}, {50, customers[0], false}}, calls)
		listReqs := f.seen()
		lists, fallbacks := 0, 0
		for _, r := range listReqs {
			switch r.path {
			case "/v1/customers":
				lists++
				q, err := url.ParseQuery(r.query)
				require.NoError(t, err)
				require.Equal(t, "100", q.Get("limit"))
				require.Equal(t, "data.subscriptions", q.Get("expand[0]"))
			case "/v1/subscriptions":
				fallbacks++
			}
		}
		require.Equal(t, 3, lists, "ceil(250/100) list calls")
		require.Equal(t, 2, fallbacks, "one subscription list for each customer with more than 10")
		require.Len(t, listReqs, lists+fallbacks)

		require.Len(t, got, len(customers))
		for _, cus := range customers {
			want, err := c.Fetch(context.Background(), cus)
			require.NoError(t, err)
			require.Equal(t, want, got[cus], cus)
		}
		require.Len(t, got[customers[0]].Subscriptions, 12)
		require.Len(t, got[customers[150]].Subscriptions, 11)
	})

	t.Run("ExactPageNoExtraRequest", func(t *testing.T) {
		t.Parallel()
		f := newFake(t, stripemock.Options{}, nil)
		for range 100 {
			f.customer(t, nil)
		}
		f.seen()
		calls, got := collect(t, newTestClient(t, testConfig(f.URL)), "")
		require.Len(t, got, 100)
		require.Len(t, calls, 1)
		require.False(t, calls[0].more)
		require.Len(t, f.seen(), 1, "has_more false on a full page: no second request")
	})

	t.Run("Resume", func(t *testing.T) {
		t.Parallel()
		f := newFake(t, stripemock.Options{}, nil)
		for range 103 {
			f.subscribe(t, f.customer(t, nil), "price_pro")
		}
		c := newTestClient(t, testConfig(f.URL))
		calls, _, cursors := collectCursors(t, c, "")
		require.Len(t, calls, 2)
		require.True(t, strings.HasPrefix(calls[0].after, "cus_"))
		first, last := cursors[0], cursors[1]

		// A sweep that stopped after the first page resumes from its cursor.
		again, got, cursors := collectCursors(t, c, first)
		require.Equal(t, []call{{3, calls[1].after, false}}, again)
		require.Len(t, got, 3)
		require.Equal(t, []string{last}, cursors)

		// One that stopped after the last lists nothing more.
		again, _ = collect(t, c, last)
		require.Equal(t, []call{{0, calls[1].after, false}}, again)
	})

	t.Run("EmptyAccount", func(t *testing.T) {
		t.Parallel()
		f := newFake(t, stripemock.Options{}, nil)
		calls, _ := collect(t, newTestClient(t, testConfig(f.URL)), "")
		require.Equal(t, []call{{0, "", false}}, calls)
	})

	t.Run("OwnRateLimit", func(t *testing.T) {
		t.Parallel()
		f := newFake(t, stripemock.Options{}, nil)
		for range 201 {
			f.customer(t, nil)
		}
		synctest.Test(t, func(t *testing.T) {
			cfg := testConfig(f.URL)
			cfg.ListRateLimit = 5 // three list calls: the second and third wait 1/5 s each
			begin := time.Now()
			calls, _ := collect(t, f.bubbleClient(t, cfg), "")
			require.Len(t, calls, 3)
			require.InDelta(t, 400*time.Millisecond, time.Since(begin), float64(time.Millisecond), "on the bubble's clock")
		})
	})

	t.Run("UnreadableCustomerLeftOut", func(t *testing.T) {
		t.Parallel()
		// One page of two customers; the second's subscription has no
		// status. It is left out (the sweep queues its account, and the
		// worker's Fetch records the reason); the other is handed over.
		hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			if r.URL.Path != "/v1/customers" {
				w.WriteHeader(http.StatusTeapot)
				return
			}
			fmt.Fprint(w, `{"object":"list","url":"/v1/customers","has_more":false,"data":[`+
				`{"id":"cus_ok","object":"customer","metadata":{},"subscriptions":{"object":"list","has_more":false,"data":[]}},`+
				`{"id":"cus_bad","object":"customer","metadata":{},"subscriptions":{"object":"list","has_more":false,"data":[{"id":"sub_x","object":"subscription"}]}}]}`)
		}))
		t.Cleanup(hs.Close)
		calls, got := collect(t, newTestClient(t, testConfig(hs.URL)), "")
		require.Equal(t, []call{{1, "cus_bad", false}}, calls)
		require.Contains(t, got, "cus_ok")
		require.NotContains(t, got, "cus_bad")
	})

	t.Run("FallbackFailureStops", func(t *testing.T) {
		t.Parallel()
		f := newFake(t, stripemock.Options{}, func(r *http.Request) {
			if r.Method == http.MethodGet && r.URL.Path == "/v1/subscriptions" {
				r.URL.Path = "/v1/nowhere" // the fake answers 404 for an unknown route
			}
		})
		f.subscribeN(t, f.customer(t, nil), "price_pro", 11)
		_, _, _, err := newTestClient(t, testConfig(f.URL)).ListPage(context.Background(), "")
		require.Error(t, err, "a customer whose subscriptions cannot be read is not handed over half read")
	})
}

// TestListInParts lists an account split into parts by creation time, at
// random points, and checks the parts list each customer exactly once.
func TestListInParts(t *testing.T) {
	t.Parallel()
	clock := stripemock.NewStoppedClock(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))
	f := newFake(t, stripemock.Options{Clock: clock}, nil)
	var customers []string
	for i := range 1250 {
		customers = append(customers, f.customer(t, nil))
		// Some customers share a second (a burst of sign-ups), most are
		// minutes apart, and a few are months older than the rest.
		switch {
		case i < 10:
			clock.Advance(90 * 24 * time.Hour)
		case i%7 != 0:
			clock.Advance(time.Duration(1+i%13) * time.Minute)
		}
	}
	c := newTestClient(t, testConfig(f.URL))
	ctx := context.Background()

	for seed := range uint64(6) {
		rng := rand.New(rand.NewPCG(seed, 1))
		listed := map[string]int{}
		f.seen()
		parts, splits := []string{""}, 0
		for len(parts) > 0 {
			cursor := parts[0]
			parts = parts[1:]
			for more := true; more; {
				var snaps []reconcile.Snapshot
				var err error
				snaps, cursor, more, err = c.ListPage(ctx, cursor)
				require.NoError(t, err)
				for _, s := range snaps {
					listed[s.CustomerID]++
				}
				if !more || rng.IntN(2) > 0 {
					continue
				}
				kept, given, err := c.Split(ctx, cursor)
				require.NoError(t, err)
				require.NotEmpty(t, kept)
				cursor = kept
				if given != "" {
					parts = append(parts, given)
					splits++
				}
			}
		}
		require.Len(t, listed, len(customers), "seed %d: every customer listed", seed)
		for cus, n := range listed {
			require.Equal(t, 1, n, "seed %d: %s listed once", seed, cus)
		}
		require.Positive(t, splits, "seed %d", seed)
		reqs := f.seen()
		pages := (len(customers) + 99) / 100
		t.Logf("seed %d: %d splits, %d requests for %d pages", seed, splits, len(reqs), pages)
		require.LessOrEqual(t, len(reqs), pages+2*splits+24, "a split costs a partial page and, once, a few rounds of one-customer requests")
	}

	t.Run("NotWithinOneSecond", func(t *testing.T) {
		t.Parallel()
		f := newFake(t, stripemock.Options{Clock: stripemock.NewStoppedClock(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))}, nil)
		for range 450 {
			f.customer(t, nil)
		}
		c := newTestClient(t, testConfig(f.URL))
		next := ""
		for range 3 {
			_, cursor, more, err := c.ListPage(ctx, next)
			require.NoError(t, err)
			require.True(t, more)
			next = cursor
		}
		kept, given, err := c.Split(ctx, next)
		require.NoError(t, err)
		require.Empty(t, given, "every customer was created in one second: nothing to split by")
		snaps, _, more, err := c.ListPage(ctx, kept)
		require.NoError(t, err)
		require.True(t, more)
		require.Len(t, snaps, 100, "the part goes on where it was")
		_, given, err = c.Split(ctx, "cus_legacy")
		require.NoError(t, err)
		require.Empty(t, given, "a cursor of an older version is not split")
	})

	t.Run("UnreadableCursor", func(t *testing.T) {
		t.Parallel()
		for _, bad := range []string{"after=cus_1&at=x", "after=cus_1&top=-5", "after=cus_1&colour=red", "after=%zz"} {
			_, _, _, err := c.ListPage(ctx, bad)
			require.ErrorContains(t, err, "unreadable cursor", bad)
		}
	})
}

// BenchmarkFetch is what one webhook-triggered reconcile costs the client:
// a customer retrieved with its subscriptions expanded (one request,
// answered over loopback by a canned body, so the fake's own work is not
// measured), read into its snapshot.
func BenchmarkFetch(b *testing.B) {
	raw, err := os.ReadFile(filepath.Join("testdata", "customer_expanded_basil.json"))
	if err != nil {
		b.Fatal(err)
	}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(raw)
	}))
	b.Cleanup(hs.Close)
	cfg := testConfig(hs.URL)
	cfg.RateLimit, cfg.Burst = 1e9, 1000 // the limiter is not what is measured
	c, err := stripe.NewClient(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		snap, err := c.Fetch(context.Background(), "cus_TmixedMay0007")
		if err != nil {
			b.Fatal(err)
		}
		if len(snap.Subscriptions) == 0 {
			b.Fatal("no subscriptions read")
		}
	}
}
