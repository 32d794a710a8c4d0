package stripe_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/mocks/inproc"
	stripemock "github.com/billsync/billsync/mocks/stripe"
	"github.com/billsync/billsync/providers/stripe"
	"github.com/billsync/billsync/reconcile"
)

func TestOperation(t *testing.T) {
	t.Parallel()
	for path, want := range map[string]string{
		"/v1/customers/cus_1":                          "GET /v1/customers/{id}",
		"/v1/customers/cus_2":                          "GET /v1/customers/{id}",
		"/v1/customers":                                "GET /v1/customers",
		"/v1/subscriptions":                            "GET /v1/subscriptions",
		"/v1/subscriptions/sub_1":                      "GET /v1/subscriptions/{id}",
		"/v1/subscription_items":                       "GET /v1/subscription_items",
		"/v1/customers/cus_1/balance_transactions":     "GET /v1/customers/{id}/balance_transactions",
		"/v1/entitlements/active_entitlements":         "GET /v1/entitlements/active_entitlements",
		"/v1/entitlements/features/feat_1":             "GET /v1/entitlements/features/{id}",
		"/v1/webhook_endpoints/we_1":                   "GET /v1/webhook_endpoints/{id}",
		"/v2/core/events/evt_1":                        "GET /v2/core/events/{id}",
		"/v1/test_helpers/test_clocks/clock_1/advance": "GET /v1/test_helpers/test_clocks/{id}/advance",
	} {
		require.Equal(t, want, stripe.Operation(http.MethodGet, path), path)
	}
	require.Equal(t, "POST /v1/customers/{id}", stripe.Operation(http.MethodPost, "/v1/customers/cus_1"))
}

func TestDefaultRateFollowsTheKey(t *testing.T) {
	t.Parallel()
	require.Equal(t, 100.0, stripe.DefaultRate("sk_live_abc"))
	require.Equal(t, 100.0, stripe.DefaultRate("rk_live_abc"))
	require.Equal(t, 25.0, stripe.DefaultRate("sk_test_abc"))
	require.Equal(t, 25.0, stripe.DefaultRate("rk_test_abc"))
}

func TestReadAllocation(t *testing.T) {
	t.Parallel()
	require.Equal(t, 10_000.0, stripe.ReadAllocation(0, 0), "the floor")
	require.Equal(t, 10_000.0, stripe.ReadAllocation(0, 20), "500 × 20 is below the floor")
	require.Equal(t, 500_000.0, stripe.ReadAllocation(0, 1000))
	require.Equal(t, 42_000.0, stripe.ReadAllocation(42_000, 1000), "configured wins")

	// The connected accounts' allocation is apart: the platform's setting
	// does not change it; its own does.
	c, err := stripe.NewClient(stripe.Config{APIKey: "sk_test_x", ReadAllocation: 42_000})
	require.NoError(t, err)
	require.Equal(t, 42_000.0, c.Allocation(0))
	require.Equal(t, 500_000.0, c.ConnectAllocation(1000))
	c, err = stripe.NewClient(stripe.Config{APIKey: "sk_test_x", ConnectReadAllocation: 7e6})
	require.NoError(t, err)
	require.Equal(t, 10_000.0, c.Allocation(0))
	require.Equal(t, 7e6, c.ConnectAllocation(1000))
	_, err = stripe.NewClient(stripe.Config{APIKey: "sk_test_x", ConnectReadAllocation: -1})
	require.Error(t, err)
}

// limitedStripe answers every retrieve of a customer, the first with a
// 429 carrying reason (none when empty), and counts the attempts.
func limitedStripe(reason string) (http.Handler, *atomic.Int64) {
	var n atomic.Int64
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if n.Add(1) == 1 {
			if reason != "" {
				w.Header().Set("Stripe-Rate-Limited-Reason", reason)
			}
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = w.Write([]byte(`{"error":{"code":"rate_limit","message":"Request rate limit exceeded.","type":"invalid_request_error"}}`))
			return
		}
		id := strings.TrimPrefix(r.URL.Path, "/v1/customers/")
		_, _ = w.Write([]byte(`{"id":"` + id + `","object":"customer","metadata":{},"subscriptions":{"object":"list","data":[],"has_more":false}}`))
	}), &n
}

// TestA429SlowsWhatItNames: a 429 for the operation's rate halves that
// operation's rate only; one for the global rate halves the global rate
// only; one without a reason (a lock timeout) slows nothing. Each is
// counted with its operation and reason, and both attempts are reads.
func TestA429SlowsWhatItNames(t *testing.T) {
	t.Parallel()
	const retrieve = "GET /v1/customers/{id}"
	for _, tc := range []struct {
		reason             string
		wantGlobal, wantOp float64
		counted            string
	}{
		{reason: "endpoint-rate", wantGlobal: 40, wantOp: 10, counted: "endpoint-rate"},
		{reason: "endpoint-concurrency", wantGlobal: 40, wantOp: 10, counted: "endpoint-concurrency"},
		{reason: "global-rate", wantGlobal: 20, wantOp: 20, counted: "global-rate"},
		{reason: "global-concurrency", wantGlobal: 20, wantOp: 20, counted: "global-concurrency"},
		{reason: "resource-specific", wantGlobal: 40, wantOp: 20, counted: "resource-specific"},
		{reason: "", wantGlobal: 40, wantOp: 20, counted: "none"},
	} {
		t.Run(tc.counted, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				h, attempts := limitedStripe(tc.reason)
				var mu sync.Mutex
				var limited []string
				cfg := testConfig("http://stripe.test")
				cfg.RateLimit, cfg.OperationRateLimit = 40, 20
				cfg.OnRateLimited = func(op, reason string) {
					mu.Lock()
					defer mu.Unlock()
					limited = append(limited, op+" "+reason)
				}
				c, err := stripe.NewClientOver(cfg, inproc.Transport{Handler: h})
				require.NoError(t, err)
				_, err = c.Fetch(context.Background(), "cus_1")
				require.NoError(t, err)
				require.EqualValues(t, 2, attempts.Load(), "the 429, then the retry")

				global, ops := c.Rates()
				// The retry came a few milliseconds later (RetryWaitMin): the
				// rates have climbed back by a twentieth of their share a
				// second since, a hair.
				require.InDelta(t, tc.wantGlobal, global, 0.1, "global")
				require.InDelta(t, tc.wantOp, ops[retrieve], 0.1, "the retrieve's operation")
				require.Equal(t, []string{retrieve + " " + tc.counted}, limited)
				require.Equal(t, map[string]int64{retrieve: 2}, c.TakeReads(), "both attempts are reads")
				require.Empty(t, c.TakeReads(), "taken once")
			})
		})
	}
}

// TestSlowedRateRecovers: after a 429 the operation's rate climbs back to
// its share while answers come.
func TestSlowedRateRecovers(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h, _ := limitedStripe("endpoint-rate")
		cfg := testConfig("http://stripe.test")
		cfg.RateLimit, cfg.OperationRateLimit = 40, 20
		c, err := stripe.NewClientOver(cfg, inproc.Transport{Handler: h})
		require.NoError(t, err)
		_, err = c.Fetch(context.Background(), "cus_1")
		require.NoError(t, err)
		_, ops := c.Rates()
		require.Less(t, ops["GET /v1/customers/{id}"], 11.0)
		for range 30 { // a fetch a second for 30 s: half back in 10 s
			time.Sleep(time.Second)
			_, err = c.Fetch(context.Background(), "cus_1")
			require.NoError(t, err)
		}
		_, ops = c.Rates()
		require.Equal(t, 20.0, ops["GET /v1/customers/{id}"])
	})
}

// TestReplicasShareTheRates: with n replicas running workers each takes
// 1/n of the global rate and of each operation's, except the operations
// of duties one replica holds at a time (the sweep's customer list, the
// events feed), which keep their whole rate.
func TestReplicasShareTheRates(t *testing.T) {
	t.Parallel()
	h, _ := limitedStripe("")
	cfg := testConfig("http://stripe.test")
	cfg.RateLimit, cfg.OperationRateLimit = 100, 25
	c, err := stripe.NewClientOver(cfg, inproc.Transport{Handler: h})
	require.NoError(t, err)
	require.Equal(t, 50.0, c.Budget().Rate, "alone: the two read operations, 2 × 25, within the global 100")

	c.SetReplicas(4)
	global, ops := c.Rates()
	require.Equal(t, 25.0, global)
	require.Equal(t, 25.0/4, ops["GET /v1/customers/{id}"])
	require.Equal(t, 25.0/4, ops["GET /v1/subscriptions"])
	require.Equal(t, 25.0, ops["GET /v1/customers"], "the sweep's list: one replica at a time")
	require.Equal(t, 25.0, ops["GET /v1/events"], "the events feed: one replica at a time")
	require.Equal(t, 2*25.0/4, c.Budget().Rate, "the worker sizes its fetches by its share")

	c.SetReplicas(1)
	global, ops = c.Rates()
	require.Equal(t, 100.0, global)
	require.Equal(t, 25.0, ops["GET /v1/customers/{id}"])
}

// TestTransactionsAreTheEventsOfMoneyPaid: the events the derived read
// allocation counts are invoices paid with money and one-off checkouts
// paid, once each.
func TestTransactionsAreTheEventsOfMoneyPaid(t *testing.T) {
	t.Parallel()
	event := func(typ, object string) []byte {
		return []byte(`{"id":"evt_1","object":"event","type":"` + typ + `","created":1700000000,"data":{"object":` + object + `}}`)
	}
	for _, tc := range []struct {
		name string
		body []byte
		want bool
	}{
		{"invoice paid", event("invoice.paid", `{"id":"in_1","object":"invoice","customer":"cus_1","amount_paid":2000}`), true},
		{"invoice paid nothing", event("invoice.paid", `{"id":"in_1","object":"invoice","customer":"cus_1","amount_paid":0}`), false},
		{"invoice amount unreadable", event("invoice.paid", `{"id":"in_1","object":"invoice","customer":"cus_1","amount_paid":"x"}`), false},
		{"the same payment again", event("invoice.payment_succeeded", `{"id":"in_1","object":"invoice","customer":"cus_1","amount_paid":2000}`), false},
		{"checkout paid", event("checkout.session.completed", `{"id":"cs_1","object":"checkout.session","customer":"cus_1","mode":"payment","payment_status":"paid"}`), true},
		{"checkout of a subscription", event("checkout.session.completed", `{"id":"cs_1","object":"checkout.session","customer":"cus_1","mode":"subscription","payment_status":"paid"}`), false},
		{"checkout unpaid", event("checkout.session.completed", `{"id":"cs_1","object":"checkout.session","customer":"cus_1","mode":"payment","payment_status":"unpaid"}`), false},
		{"subscription change", event("customer.subscription.updated", `{"id":"sub_1","object":"subscription","customer":"cus_1","status":"active"}`), false},
	} {
		require.Equal(t, tc.want, stripe.ParseEvent(tc.body).Transaction, tc.name)
	}
}

// TestADeepQueueReadsByBothOperations: 60 customers read at once, each
// operation limited to 5/s within a global 100/s: the reads alternate
// between the retrieve and the subscriptions list, so they take about 6 s
// (60 at 2 × 5/s) rather than 12 s, and neither operation is sent faster
// than its limit.
func TestADeepQueueReadsByBothOperations(t *testing.T) {
	t.Parallel()
	f := newFake(t, stripemock.Options{}, nil)
	cus := f.customer(t, map[string]string{"user_id": "u1"})
	f.subscribe(t, cus, "price_pro")
	f.seen()
	synctest.Test(t, func(t *testing.T) {
		cfg := testConfig(f.URL)
		cfg.RateLimit, cfg.OperationRateLimit, cfg.Burst = 100, 5, 1
		c := f.bubbleClient(t, cfg)
		begin := time.Now()
		var wg sync.WaitGroup
		for range 60 {
			wg.Go(func() {
				snap, err := c.Fetch(context.Background(), cus)
				require.NoError(t, err)
				require.Len(t, snap.Subscriptions, 1)
			})
		}
		wg.Wait()
		took := time.Since(begin)
		reads := c.TakeReads()
		retrieve, list := reads["GET /v1/customers/{id}"], reads["GET /v1/subscriptions"]
		require.EqualValues(t, 60, retrieve+list, "one request a read: %v", reads)
		require.Greater(t, list, int64(20), "the list carried a share: %v", reads)
		require.Greater(t, retrieve, int64(20), "the retrieve carried a share: %v", reads)
		// Each operation within its limit: n requests at 5/s, burst 1,
		// need (n-1)/5 s.
		require.GreaterOrEqual(t, took, time.Duration(float64(max(retrieve, list)-1)/5*float64(time.Second)))
		require.Less(t, took, 8*time.Second, "both operations' rates used (one alone: 12 s)")
	})
}

// TestA429AfterAnAnswerSlowsAgain: 429s of one burst halve the rate once,
// but an answer between them does not hide a second 429 that comes after
// the burst's window: 429, answers, and a 429 120 ms after the first halve
// the operation's rate twice.
func TestA429AfterAnAnswerSlowsAgain(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var n atomic.Int64
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			if i := n.Add(1); i == 1 || i == 4 {
				w.Header().Set("Stripe-Rate-Limited-Reason", "endpoint-rate")
				w.WriteHeader(http.StatusTooManyRequests)
				_, _ = w.Write([]byte(`{"error":{"code":"rate_limit","message":"Request rate limit exceeded.","type":"invalid_request_error"}}`))
				return
			}
			_, _ = w.Write([]byte(`{"id":"cus_1","object":"customer","metadata":{},"subscriptions":{"object":"list","data":[],"has_more":false}}`))
		})
		cfg := testConfig("http://stripe.test")
		cfg.RateLimit, cfg.OperationRateLimit = 40, 20
		c, err := stripe.NewClientOver(cfg, inproc.Transport{Handler: h})
		require.NoError(t, err)
		for i := range 3 {
			if i > 0 {
				time.Sleep(60 * time.Millisecond)
			}
			_, err = c.Fetch(context.Background(), "cus_1")
			require.NoError(t, err)
		}
		require.EqualValues(t, 5, n.Load())
		_, ops := c.Rates()
		require.InDelta(t, 5, ops["GET /v1/customers/{id}"], 0.1, "halved twice")
	})
}

// TestReadsOnBehalfOfAccountsCountedApart: at the fake Stripe, the reads
// of a connected account's customer (sent with its Stripe-Account) are
// counted under their operations' Connect names, the platform's own
// customer's under the plain names: exactly the reads the fake answered
// on each account. Stripe allocates the two apart.
func TestReadsOnBehalfOfAccountsCountedApart(t *testing.T) {
	t.Parallel()
	f := newFake(t, stripemock.Options{}, nil)
	cus := f.customer(t, map[string]string{"user_id": "u1"})
	f.subscribe(t, cus, "price_pro")
	f.h.ConnectedAccount("acct_budget")
	key := f.h.ConnectedCustomer("acct_budget", "cus_c", "u2")
	f.h.ConnectedSubscribe("acct_budget", "cus_c", "price_pro")
	f.ResetUsage()
	cfg := testConfig(f.URL)
	cfg.Connect = reconcile.ConnectPolicy{Mode: reconcile.ConnectAll}
	c := newTestClient(t, cfg)

	_, err := c.Fetch(context.Background(), key)
	require.NoError(t, err)
	_, err = c.Fetch(context.Background(), key)
	require.NoError(t, err)
	_, err = c.Fetch(context.Background(), cus)
	require.NoError(t, err)

	const retrieve = "GET /v1/customers/{id}"
	reads := c.TakeReads()
	var platform, connect int64
	for op, n := range reads {
		if strings.HasPrefix(op, reconcile.ConnectOperation("")) {
			connect += n
			continue
		}
		platform += n
	}
	require.Equal(t, map[string]int64{reconcile.ConnectOperation(retrieve): 2, retrieve: 1}, reads)
	require.Equal(t, f.Account("acct_budget").Usage().Reads, connect, "the connected account's reads at the fake")
	require.Equal(t, f.Account("").Usage().Reads, platform, "the platform's own reads at the fake")
}
