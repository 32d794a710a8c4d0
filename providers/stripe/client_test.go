package stripe_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	stripeapi "github.com/stripe/stripe-go/v82"

	stripemock "github.com/billsync/billsync/mocks/stripe"
	"github.com/billsync/billsync/mocks/stripe/stripetest"
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
		rec.status = stripetest.AnswerStatus(next, w, r)
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
	h   *stripetest.Harness
	URL string
}

// newFake starts the fake. rewrite, when set, may change each request before
// the fake sees it (the recorder sees the client's original).
func newFake(t *testing.T, opts stripemock.Options, rewrite func(*http.Request)) *fakeStripe {
	t.Helper()
	rec := &recorder{}
	h := stripetest.ForTest(t, stripetest.Options{Fake: opts, Wrap: func(next http.Handler) http.Handler { return rec.wrap(next, rewrite) }})
	return &fakeStripe{Server: h.Fake, recorder: rec, h: h, URL: h.URL}
}

func (f *fakeStripe) customer(t *testing.T, metadata map[string]string) string {
	t.Helper()
	c, err := f.h.API.V1Customers.Create(context.Background(), &stripeapi.CustomerCreateParams{
		Email: stripeapi.String("ada@example.com"), Metadata: metadata})
	require.NoError(t, err)
	return c.ID
}

func (f *fakeStripe) subscribe(t *testing.T, customerID, priceID string) *stripeapi.Subscription {
	t.Helper()
	sub, err := f.h.Subscribe(context.Background(), customerID, priceID)
	require.NoError(t, err)
	return sub
}

func (f *fakeStripe) cancel(t *testing.T, subID string) {
	t.Helper()
	_, err := f.h.API.V1Subscriptions.Cancel(context.Background(), subID, nil)
	require.NoError(t, err)
}

// testConfig is a Config for url with short waits and no rate limit to speak of.
func testConfig(url string) stripe.Config {
	return stripetest.Fast(stripe.Config{APIKey: stripemock.DefaultAPIKey, BaseURL: url})
}

func newTestClient(t *testing.T, cfg stripe.Config) *stripe.Client {
	t.Helper()
	c, err := stripe.NewClient(cfg)
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

func TestFetch(t *testing.T) {
	t.Parallel()

	t.Run("OneActive", func(t *testing.T) {
		t.Parallel()
		f := newFake(t, stripemock.Options{}, nil)
		cus := f.customer(t, map[string]string{"user_id": "u_ada"})
		sub := f.subscribe(t, cus, "price_pro")
		start, end := periodOfItem(sub)
		f.seen()

		snap, err := newTestClient(t, testConfig(f.URL)).Fetch(context.Background(), cus)
		require.NoError(t, err)
		require.Equal(t, reconcile.Snapshot{
			Provider: "stripe", CustomerID: cus, UserRef: "u_ada", Email: "ada@example.com", SubscriptionID: sub.ID, Status: "active",
			PriceRefs: []string{"pro", "price_pro"}, PeriodStart: start, PeriodEnd: end,
		}, snap)
		require.True(t, end.After(start))

		reqs := f.seen()
		require.Len(t, reqs, 2)
		require.Equal(t, "/v1/customers/"+cus, reqs[0].path)
		require.Equal(t, "/v1/subscriptions", reqs[1].path)
		require.Contains(t, reqs[1].query, "status=all")
		require.Contains(t, reqs[1].query, "limit=100")
		for _, r := range reqs {
			require.Equal(t, stripe.APIVersion, r.version, "every request pins the API version")
		}
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

	t.Run("LiveOlderBeatsCanceledNewer", func(t *testing.T) {
		t.Parallel()
		f := newFake(t, stripemock.Options{}, nil)
		cus := f.customer(t, nil)
		older := f.subscribe(t, cus, "price_pro")
		f.Clock().Advance(time.Minute)
		newer := f.subscribe(t, cus, "price_team")
		f.cancel(t, newer.ID)

		snap, err := newTestClient(t, testConfig(f.URL)).Fetch(context.Background(), cus)
		require.NoError(t, err)
		require.Equal(t, older.ID, snap.SubscriptionID)
		require.Equal(t, "active", snap.Status)
		require.Equal(t, []string{"pro", "price_pro"}, snap.PriceRefs)
	})

	t.Run("OnlyCanceled_NewestOfThem", func(t *testing.T) {
		t.Parallel()
		f := newFake(t, stripemock.Options{}, nil)
		cus := f.customer(t, nil)
		older := f.subscribe(t, cus, "price_pro")
		f.cancel(t, older.ID)
		f.Clock().Advance(time.Minute)
		newer := f.subscribe(t, cus, "price_team")
		f.cancel(t, newer.ID)

		snap, err := newTestClient(t, testConfig(f.URL)).Fetch(context.Background(), cus)
		require.NoError(t, err)
		require.Equal(t, newer.ID, snap.SubscriptionID)
		require.Equal(t, "canceled", snap.Status)
		require.False(t, snap.Live())
	})

	t.Run("NoSubscriptions", func(t *testing.T) {
		t.Parallel()
		f := newFake(t, stripemock.Options{}, nil)
		cus := f.customer(t, map[string]string{"user_id": "u_new"})
		snap, err := newTestClient(t, testConfig(f.URL)).Fetch(context.Background(), cus)
		require.NoError(t, err)
		require.Equal(t, reconcile.Snapshot{Provider: "stripe", CustomerID: cus, UserRef: "u_new", Email: "ada@example.com"}, snap)
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

	t.Run("ErrCustomerDeleted", func(t *testing.T) {
		t.Parallel()
		hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			if r.URL.Path != "/v1/customers/cus_gone" {
				w.WriteHeader(http.StatusTeapot)
				return
			}
			fmt.Fprint(w, `{"id":"cus_gone","object":"customer","deleted":true}`)
		}))
		t.Cleanup(hs.Close)
		_, err := newTestClient(t, testConfig(hs.URL)).Fetch(context.Background(), "cus_gone")
		require.ErrorIs(t, err, reconcile.ErrCustomerUnknown)
		require.ErrorContains(t, err, "deleted")
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
		require.Equal(t, sub.ID, snap.SubscriptionID)
		require.False(t, snap.PeriodStart.IsZero())
		require.True(t, snap.PeriodEnd.After(snap.PeriodStart))
		require.True(t, snap.PeriodStart.Equal(time.Unix(sub.StartDate, 0)), "period starts when the subscription did")
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
		require.Equal(t, sub.ID, snap.SubscriptionID)
		require.Equal(t, "u1", snap.UserRef)

		reqs := f.seen()
		failed := 0
		for _, r := range reqs {
			if r.status == http.StatusInternalServerError {
				failed++
			}
		}
		require.Greater(t, len(reqs), 2, "two calls, some answered 500 and retried")
		require.Equal(t, len(reqs)-2, failed)
	})

	t.Run("429RetryAfterHonoured", func(t *testing.T) {
		t.Parallel()
		f, cus, sub := setup(t)
		// One request per second: the customer call takes the token, the list
		// call gets 429 with Retry-After: 1. RetryWaitMax is 10ms, so only
		// honouring Retry-After lets the retry through.
		// Stripe's 429s carry no Retry-After; the fake adds one when asked.
		f.SetFaults(stripemock.Faults{RequestsPerSecond: 1, RetryAfter: time.Second})
		begin := time.Now()
		snap, err := newTestClient(t, testConfig(f.URL)).Fetch(context.Background(), cus)
		elapsed := time.Since(begin)
		require.NoError(t, err)
		require.Equal(t, sub.ID, snap.SubscriptionID)
		reqs := f.seen()
		require.Equal(t, http.StatusTooManyRequests, reqs[1].status)
		require.Equal(t, http.StatusOK, reqs[len(reqs)-1].status)
		require.GreaterOrEqual(t, elapsed, 950*time.Millisecond)
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
		f, cus, _ := setup(t)
		f.SetFaults(stripemock.Faults{Latency: 2 * time.Second})
		cfg := testConfig(f.URL)
		cfg.Timeout = 50 * time.Millisecond
		cfg.RetryMax = 1
		_, err := newTestClient(t, cfg).Fetch(context.Background(), cus)
		require.Error(t, err)
		require.False(t, reconcile.IsPermanent(err))
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Eventually(t, func() bool {
			return f.count() == cfg.RetryMax+1
		}, 5*time.Second, 10*time.Millisecond, "each attempt times out and is retried")
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
	f.seen()
	cfg := testConfig(f.URL)
	cfg.RateLimit, cfg.Burst = 20, 2
	c := newTestClient(t, cfg)

	// 15 Fetches (2 requests each) from 5 goroutines share one limiter.
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
	require.Equal(t, 2*fetches, n)
	// Lower bound only: the limiter lets Burst through at once, then 20/s.
	minimum := time.Duration(float64(n-cfg.Burst) / cfg.RateLimit * float64(time.Second))
	require.GreaterOrEqual(t, elapsed, minimum-10*time.Millisecond)
}

func TestList(t *testing.T) {
	t.Parallel()

	t.Run("OneSnapshotPerCustomer", func(t *testing.T) {
		t.Parallel()
		f := newFake(t, stripemock.Options{}, nil)
		ada := f.customer(t, map[string]string{"user_id": "u_ada"})
		adaSub := f.subscribe(t, ada, "price_pro")
		gone := f.customer(t, map[string]string{"user_id": "u_gone"})
		f.cancel(t, f.subscribe(t, gone, "price_pro").ID)
		mixed := f.customer(t, map[string]string{"user_id": "u_mixed"})
		mixedOld := f.subscribe(t, mixed, "price_team")
		f.Clock().Advance(time.Minute)
		f.cancel(t, f.subscribe(t, mixed, "price_pro").ID)
		f.customer(t, nil) // no subscriptions
		f.seen()

		var calls []string
		got := map[string]reconcile.Snapshot{}
		err := newTestClient(t, testConfig(f.URL)).List(context.Background(), "", func(snaps []reconcile.Snapshot, next string) error {
			calls = append(calls, next)
			for _, s := range snaps {
				require.NotContains(t, got, s.CustomerID, "one snapshot per customer")
				got[s.CustomerID] = s
			}
			return nil
		})
		require.NoError(t, err)
		require.Len(t, calls, 2, "one page, then the customers resolved at the end")
		require.True(t, strings.HasPrefix(calls[0], "sub_"))
		require.Empty(t, calls[1])
		require.Len(t, got, 3, "a customer without any subscription is left to a per-customer fetch")
		require.Equal(t, "canceled", got[gone].Status)
		require.Equal(t, adaSub.ID, got[ada].SubscriptionID)
		require.Equal(t, "u_ada", got[ada].UserRef)
		require.Equal(t, []string{"pro", "price_pro"}, got[ada].PriceRefs)
		require.False(t, got[ada].PeriodStart.IsZero())
		require.Equal(t, mixedOld.ID, got[mixed].SubscriptionID)
		require.Equal(t, "u_mixed", got[mixed].UserRef)

		reqs := f.seen()
		require.Len(t, reqs, 1)
		require.Contains(t, reqs[0].query, "status=all")
		require.Contains(t, reqs[0].query, "limit=100")
	})

	t.Run("PagesAndResume", func(t *testing.T) {
		t.Parallel()
		f := newFake(t, stripemock.Options{}, nil)
		const total = 103
		for i := range total {
			f.subscribe(t, f.customer(t, map[string]string{"user_id": fmt.Sprint("u", i)}), "price_pro")
		}
		c := newTestClient(t, testConfig(f.URL))

		type call struct {
			n    int
			next string
		}
		var calls []call
		err := c.List(context.Background(), "", func(snaps []reconcile.Snapshot, next string) error {
			calls = append(calls, call{len(snaps), next})
			return nil
		})
		require.NoError(t, err)
		require.Len(t, calls, 3)
		require.Equal(t, 100, calls[0].n)
		require.True(t, strings.HasPrefix(calls[0].next, "sub_"))
		require.Equal(t, total-100, calls[1].n)
		require.True(t, strings.HasPrefix(calls[1].next, "sub_"))
		require.Equal(t, call{0, ""}, calls[2])

		// A sweep that stopped after the first page resumes from its cursor.
		var resumed int
		err = c.List(context.Background(), calls[0].next, func(snaps []reconcile.Snapshot, next string) error {
			resumed += len(snaps)
			return nil
		})
		require.NoError(t, err)
		require.Equal(t, total-100, resumed)
	})

	t.Run("CustomerAcrossPagesResolvesAsFetch", func(t *testing.T) {
		t.Parallel()
		f := newFake(t, stripemock.Options{}, nil)
		// Oldest first, so that the listing (newest first) shows each of
		// these customers' newer subscription on page one and the older one
		// on page two.
		liveOld := f.customer(t, map[string]string{"user_id": "u_live_old"})
		f.subscribe(t, liveOld, "price_team")
		endedBoth := f.customer(t, map[string]string{"user_id": "u_ended"})
		f.cancel(t, f.subscribe(t, endedBoth, "price_team").ID)
		liveNew := f.customer(t, map[string]string{"user_id": "u_live_new"})
		f.cancel(t, f.subscribe(t, liveNew, "price_team").ID)
		f.Clock().Advance(time.Minute)
		for i := range 100 {
			f.subscribe(t, f.customer(t, map[string]string{"user_id": fmt.Sprint("u", i)}), "price_pro")
		}
		f.Clock().Advance(time.Minute)
		f.cancel(t, f.subscribe(t, liveOld, "price_pro").ID)
		f.cancel(t, f.subscribe(t, endedBoth, "price_pro").ID)
		f.subscribe(t, liveNew, "price_pro")
		c := newTestClient(t, testConfig(f.URL))

		got := map[string]reconcile.Snapshot{}
		pages := 0
		err := c.List(context.Background(), "", func(snaps []reconcile.Snapshot, next string) error {
			pages++
			for _, s := range snaps {
				require.NotContains(t, got, s.CustomerID, "one snapshot per customer")
				got[s.CustomerID] = s
			}
			return nil
		})
		require.NoError(t, err)
		require.Equal(t, 3, pages, "two pages, then the customers resolved at the end")
		require.Len(t, got, 103)
		plans, err := reconcile.ParsePlans(reconcile.ExamplePlans)
		require.NoError(t, err)
		now := time.Now()
		for _, cus := range []string{liveOld, endedBoth, liveNew} {
			want, err := c.Fetch(context.Background(), cus)
			require.NoError(t, err)
			if want.Live() {
				require.Equal(t, want, got[cus], cus)
			}
			// Either way the account they make is the same (a customer
			// without a live subscription is not kept with its period and
			// prices, which decide nothing for it).
			require.Equal(t, reconcile.Decide(reconcile.Account{}, want, plans, now),
				reconcile.Decide(reconcile.Account{}, got[cus], plans, now), cus)
		}
		require.Equal(t, "active", got[liveOld].Status, "an older live subscription beats a newer ended one")
		require.Equal(t, "canceled", got[endedBoth].Status)
	})

	t.Run("PageErrorStops", func(t *testing.T) {
		t.Parallel()
		f := newFake(t, stripemock.Options{}, nil)
		f.subscribe(t, f.customer(t, nil), "price_pro")
		stop := errors.New("store down")
		err := newTestClient(t, testConfig(f.URL)).List(context.Background(), "", func([]reconcile.Snapshot, string) error { return stop })
		require.ErrorIs(t, err, stop)
	})
}
