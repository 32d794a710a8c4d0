package stripe_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	stripemock "github.com/billsync/billsync/mocks/stripe"
	"github.com/billsync/billsync/mocks/testenv"
)

// The limiters run on the fake's clock: a stopped one refills the buckets
// only when a test advances it, so how many requests of a burst pass is
// exact, however slowly a loaded machine sends them.
func newLimitedFake(t *testing.T, opts stripemock.Options) *fake {
	t.Helper()
	opts.Clock = stripemock.NewStoppedClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	return newFake(t, opts)
}

// answer is what a request got: its status and, for the limiters' 429s,
// the Stripe-Rate-Limited-Reason.
type answer struct {
	status int
	reason string
}

func (a answer) String() string { return strings.TrimSpace(http.StatusText(a.status) + " " + a.reason) }

var (
	ok200       = answer{status: http.StatusOK}
	notFound404 = answer{status: http.StatusNotFound}
)

func limited(reason string) answer { return answer{http.StatusTooManyRequests, reason} }

// burst sends every request at once (method and path, with key) over HTTP
// and counts the answers.
func (f *fake) burst(t *testing.T, key string, requests ...string) map[answer]int {
	t.Helper()
	answers := make([]answer, len(requests))
	errs := make([]error, len(requests))
	var wg sync.WaitGroup
	for i, mp := range requests {
		method, path, _ := strings.Cut(mp, " ")
		wg.Go(func() {
			req, err := http.NewRequest(method, f.URL+path, nil)
			if err != nil {
				errs[i] = err
				return
			}
			req.Header.Set("Authorization", "Bearer "+key)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				errs[i] = err
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			answers[i] = answer{resp.StatusCode, resp.Header.Get("Stripe-Rate-Limited-Reason")}
		})
	}
	wg.Wait()
	count := map[answer]int{}
	for i := range requests {
		require.NoError(t, errs[i])
		count[answers[i]]++
	}
	return count
}

func times(n int, request string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = request
	}
	return out
}

// TestLimitPerOperation: retrieving customers (any id) drains only the
// retrieve operation's bucket: its 429s say endpoint-rate, in Stripe's
// body, while listing customers and the unlimited driver key still answer.
func TestLimitPerOperation(t *testing.T) {
	t.Parallel()
	f := newLimitedFake(t, stripemock.Options{Limits: stripemock.Limits{PerOperation: 5, TargetKey: stripemock.DefaultAPIKey}})
	cust := f.customer(t) // the driver's key: not limited

	requests := slices.Concat(times(4, "GET /v1/customers/"+cust.ID), times(4, "GET /v1/customers/cus_missing"))
	got := f.burst(t, stripemock.DefaultAPIKey, requests...)
	require.Equal(t, 3, got[limited(stripemock.ReasonEndpointRate)], "8 retrievals, any id, on one bucket of 5: %v", got)
	require.Equal(t, 5, got[ok200]+got[notFound404], "%v", got)

	resp, body := f.do(t, http.MethodGet, "/v1/customers/"+cust.ID, nil, nil)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	require.Equal(t, stripemock.ReasonEndpointRate, resp.Header.Get("Stripe-Rate-Limited-Reason"))
	require.Empty(t, resp.Header.Get("Retry-After"), "Stripe's 429s carry no Retry-After")
	require.Equal(t, map[string]any{"error": map[string]any{
		"code":    "rate_limit",
		"doc_url": "https://stripe.com/docs/error-codes/rate-limit",
		"message": "Request rate limit exceeded. Learn more about rate limits here https://stripe.com/docs/rate-limits.",
		"type":    "invalid_request_error",
	}}, body)

	resp, _ = f.do(t, http.MethodGet, "/v1/customers", nil, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, "listing is another operation")
	resp, _ = f.do(t, http.MethodGet, "/v1/customers/"+cust.ID, nil, driverKey)
	require.Equal(t, http.StatusOK, resp.StatusCode, "the driver's key is not the target")

	f.Clock().Advance(time.Second)
	require.Equal(t, map[answer]int{ok200: 5, limited(stripemock.ReasonEndpointRate): 1},
		f.burst(t, stripemock.DefaultAPIKey, times(6, "GET /v1/customers/"+cust.ID)...), "a second later, a full bucket")
}

// TestLimitGlobal: the global limit counts every operation together.
func TestLimitGlobal(t *testing.T) {
	t.Parallel()
	f := newLimitedFake(t, stripemock.Options{Limits: stripemock.Limits{Global: 6, PerOperation: 25, TargetKey: stripemock.DefaultAPIKey}})
	got := f.burst(t, stripemock.DefaultAPIKey, slices.Concat(times(3, "GET /v1/customers"), times(3, "GET /v1/subscriptions"),
		times(2, "GET /v1/events"), times(2, "GET /v1/webhook_endpoints/we_missing"))...)
	require.Equal(t, 4, got[limited(stripemock.ReasonGlobalRate)], "10 requests to four operations, 6 in all: %v", got)
	require.Zero(t, got[limited(stripemock.ReasonEndpointRate)], "%v", got)

	resp, _ := f.do(t, http.MethodGet, "/v1/invoices", nil, nil)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "an operation not yet called is out of the global budget too")
	require.Equal(t, stripemock.ReasonGlobalRate, resp.Header.Get("Stripe-Rate-Limited-Reason"))
}

// TestDocumentedLimitsFollowTheKeysMode: Stripe's published limits give a
// live key 100 requests/s in all and a sandbox key 25, with 25/s for each
// operation, and the two modes draw on separate budgets.
func TestDocumentedLimitsFollowTheKeysMode(t *testing.T) {
	t.Parallel()
	const liveKey, sandboxKey = "sk_live_billsync", "sk_test_sandbox"
	f := newLimitedFake(t, stripemock.Options{APIKey: liveKey, ExtraAPIKeys: []string{sandboxKey}, Limits: stripemock.DocumentedLimits()})
	f.Clock().Advance(time.Second) // full buckets, whatever the harness asked while starting

	ops := []string{"GET /v1/customers", "GET /v1/subscriptions", "GET /v1/events", "GET /v1/invoices"}
	var requests []string
	for _, op := range ops {
		requests = append(requests, times(26, op)...)
	}
	got := f.burst(t, liveKey, requests...)
	require.Equal(t, 100, got[ok200], "live: 25 for each of four operations, 100 in all: %v", got)
	// Each operation's 26th is refused: endpoint-rate while the global
	// budget lasts, global-rate once it is spent (arrival order decides).
	require.Equal(t, 4, got[limited(stripemock.ReasonEndpointRate)]+got[limited(stripemock.ReasonGlobalRate)], "%v", got)
	resp, _ := f.do(t, http.MethodGet, "/v1/prices", nil, map[string]string{"Authorization": "Bearer " + liveKey})
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	require.Equal(t, stripemock.ReasonGlobalRate, resp.Header.Get("Stripe-Rate-Limited-Reason"), "the live budget is spent")

	got = f.burst(t, sandboxKey, slices.Concat(times(20, "GET /v1/customers"), times(10, "GET /v1/prices"))...)
	require.Equal(t, map[answer]int{ok200: 25, limited(stripemock.ReasonGlobalRate): 5}, got,
		"the sandbox: its own budget, 25 in all")
}

// TestLimitConcurrency: a cap on requests in flight refuses a request
// that arrives while the cap's worth are still being answered (held by the
// Latency fault): global-concurrency across operations,
// endpoint-concurrency within one while others still answer. In a
// synctest bubble every request has arrived before any latency ends.
func TestLimitConcurrency(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		limits   stripemock.Limits
		requests []string
		want     map[answer]int
	}{
		{"Global", stripemock.Limits{Concurrency: 3},
			[]string{"/v1/customers", "/v1/events", "/v1/invoices", "/v1/subscriptions"},
			map[answer]int{ok200: 3, limited(stripemock.ReasonGlobalConcurrency): 1}},
		{"Endpoint", stripemock.Limits{OperationConcurrency: 2},
			slices.Concat(times(3, "/v1/customers"), times(2, "/v1/events")),
			map[answer]int{ok200: 4, limited(stripemock.ReasonEndpointConcurrency): 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				f := newBubbleFake(t, stripemock.Options{Faults: stripemock.Faults{Latency: time.Second}, Limits: tc.limits}, nil)
				answers := make(chan answer, len(tc.requests))
				for _, path := range tc.requests {
					go func() {
						req, _ := http.NewRequest(http.MethodGet, f.URL+path, nil)
						req.Header.Set("Authorization", "Bearer "+stripemock.DefaultAPIKey)
						resp, err := f.api.Do(req)
						if err != nil {
							answers <- answer{}
							return
						}
						resp.Body.Close()
						answers <- answer{resp.StatusCode, resp.Header.Get("Stripe-Rate-Limited-Reason")}
					}()
				}
				got := map[answer]int{}
				for range tc.requests {
					got[<-answers]++
				}
				require.Equal(t, tc.want, got)

				resp, _ := f.do(t, http.MethodGet, "/v1/events", nil, nil)
				require.Equal(t, http.StatusOK, resp.StatusCode, "answered requests are no longer in flight")
			})
		})
	}
}

// TestLimitAnswersBeforeLatency: the limits decide as a request arrives,
// before the Latency fault: a refused request answers at once, on the
// bubble's clock exactly.
func TestLimitAnswersBeforeLatency(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := newBubbleFake(t, stripemock.Options{Faults: stripemock.Faults{Latency: 300 * time.Millisecond},
			Limits: stripemock.Limits{PerOperation: 1}}, nil)
		start := time.Now()
		resp, _ := f.do(t, http.MethodGet, "/v1/customers", nil, nil)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Equal(t, 300*time.Millisecond, time.Since(start), "let through: the latency")
		start = time.Now()
		resp, _ = f.do(t, http.MethodGet, "/v1/customers", nil, nil)
		require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "the bubble's stopped fake clock refilled nothing")
		require.Zero(t, time.Since(start), "refused: at once")
	})
}

// TestRateLimitedChangesNothing: a POST refused by the limits creates
// nothing, sends no event and saves no idempotent answer: its retry with
// the same key, once the bucket refills, creates the customer.
func TestRateLimitedChangesNothing(t *testing.T) {
	t.Parallel()
	f := newLimitedFake(t, stripemock.Options{Limits: stripemock.Limits{Operations: map[string]float64{"POST /v1/customers": 1},
		TargetKey: stripemock.DefaultAPIKey}})
	f.Clock().Advance(time.Second)
	f.create(t, "/v1/customers", url.Values{"email": {"first@example.com"}}) // the driver: not limited
	listed := func() int {
		resp, list := f.do(t, http.MethodGet, "/v1/customers", nil, driverKey)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		return len(list["data"].([]any))
	}
	events := func() int {
		resp, list := f.do(t, http.MethodGet, "/v1/events", url.Values{"type": {"customer.created"}}, driverKey)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		return len(list["data"].([]any))
	}

	values := url.Values{"email": {"ada@example.com"}}
	resp, _ := f.do(t, http.MethodPost, "/v1/customers", values, map[string]string{"Idempotency-Key": "k1"})
	require.Equal(t, http.StatusOK, resp.StatusCode)
	resp, _ = f.do(t, http.MethodPost, "/v1/customers", values, map[string]string{"Idempotency-Key": "k2"})
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	require.Equal(t, stripemock.ReasonEndpointRate, resp.Header.Get("Stripe-Rate-Limited-Reason"))
	require.Equal(t, 2, listed(), "the refused POST created nothing")
	require.Equal(t, 2, events(), "and announced nothing")

	f.Clock().Advance(time.Second)
	resp, _ = f.do(t, http.MethodPost, "/v1/customers", values, map[string]string{"Idempotency-Key": "k2"})
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Empty(t, resp.Header.Get("Idempotent-Replayed"), "the 429 saved no answer under k2")
	require.Equal(t, 3, listed())
}

// TestUsageCountsByOperation: every request is counted by operation and
// key: the ones let through as reads (GET) or writes, the refused ones by
// reason; /_mock/usage shows every key's or one key's, and both resets
// start again from zero.
func TestUsageCountsByOperation(t *testing.T) {
	t.Parallel()
	f := newLimitedFake(t, stripemock.Options{Limits: stripemock.Limits{PerOperation: 2, TargetKey: stripemock.DefaultAPIKey}})
	cust := f.customer(t)
	f.ResetUsage()

	for _, id := range []string{cust.ID, "cus_missing", cust.ID} {
		f.do(t, http.MethodGet, "/v1/customers/"+id, nil, nil)
	}
	f.do(t, http.MethodGet, "/v1/customers", nil, nil)
	f.do(t, http.MethodPost, "/v1/customers/"+cust.ID, url.Values{"name": {"Ada"}}, nil)
	f.do(t, http.MethodGet, "/v1/customers/"+cust.ID, nil, driverKey)
	f.do(t, http.MethodGet, "/v1/customers", nil, map[string]string{"Authorization": "Bearer sk_test_unknown"}) // 401: not counted

	billsync := stripemock.Usage{
		Operations: map[string]stripemock.OperationUsage{
			"GET /v1/customers/{id}":  {Requests: 2, Reads: 2, RateLimited: map[string]int64{stripemock.ReasonEndpointRate: 1}},
			"GET /v1/customers":       {Requests: 1, Reads: 1},
			"POST /v1/customers/{id}": {Requests: 1, Writes: 1},
		},
		Requests: 4, Reads: 3, Writes: 1, RateLimited: 1,
	}
	require.Equal(t, billsync, f.KeyUsage(stripemock.DefaultAPIKey))
	all := billsync
	all.Operations = map[string]stripemock.OperationUsage{
		"GET /v1/customers/{id}":  {Requests: 3, Reads: 3, RateLimited: map[string]int64{stripemock.ReasonEndpointRate: 1}},
		"GET /v1/customers":       {Requests: 1, Reads: 1},
		"POST /v1/customers/{id}": {Requests: 1, Writes: 1},
	}
	all.Requests, all.Reads = 5, 4
	require.Equal(t, all, f.Usage())

	getUsage := func(query string) stripemock.Usage {
		resp, err := http.Get(f.URL + "/_mock/usage" + query)
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		var u stripemock.Usage
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&u))
		return u
	}
	require.Equal(t, all, getUsage(""))
	require.Equal(t, billsync, getUsage("?key="+stripemock.DefaultAPIKey))
	require.Equal(t, int64(1), getUsage("?key="+testenv.DriverAPIKey).Reads)

	resp, err := http.Post(f.URL+"/_mock/usage/reset", "application/json", nil)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Zero(t, f.Usage().Requests)

	f.do(t, http.MethodGet, "/v1/customers", nil, nil)
	require.Equal(t, int64(1), f.Usage().Reads)
	resp, err = http.Post(f.URL+"/_mock/reset", "application/json", nil)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, stripemock.Usage{Operations: map[string]stripemock.OperationUsage{}}, f.Usage(), "/_mock/reset forgets usage too")
}

// TestControlLimitsRoundTrip: /_mock/limits sets and shows the limits;
// "documented" fills in Stripe's published rates; an invalid update (a
// negative rate, an operation the fake does not serve) changes nothing.
func TestControlLimitsRoundTrip(t *testing.T) {
	t.Parallel()
	f := newFake(t, stripemock.Options{})
	post := func(body string) int {
		resp, err := http.Post(f.URL+"/_mock/limits", "application/json", bytes.NewBufferString(body))
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusOK, post(`{"documented":true,"operations":{"GET /v1/events":5,"GET /v1/customers":0},
		"concurrency":4,"per_account":10,"accounts":{"acct_slow":2},"target_key":"sk_test_billsync"}`))
	want := stripemock.DocumentedLimits()
	want.Operations = map[string]float64{"GET /v1/events": 5, "GET /v1/customers": 0}
	want.Concurrency, want.TargetKey = 4, stripemock.DefaultAPIKey
	want.PerAccount, want.Accounts = 10, map[string]float64{"acct_slow": 2}
	require.Equal(t, want, f.Limits())

	resp, err := http.Get(f.URL + "/_mock/limits")
	require.NoError(t, err)
	var got stripemock.Limits
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&got))
	resp.Body.Close()
	require.Equal(t, want, got)

	for _, bad := range []string{`{"global":-1}`, `{"operations":{"GET /v1/customers/:id":5}}`, `{"per_op":5}`,
		`{"per_account":-1}`, `{"accounts":{"cus_1":5}}`} {
		require.Equal(t, http.StatusBadRequest, post(bad), bad)
	}
	require.Equal(t, want, f.Limits(), "an invalid update changes nothing")

	require.Equal(t, http.StatusOK, post(`{}`))
	require.Equal(t, stripemock.Limits{}, f.Limits(), "{} turns the limits off")
	require.Panics(t, func() {
		stripemock.New(stripemock.Options{Limits: stripemock.Limits{Operations: map[string]float64{"GET /v1/nope": 1}}})
	})
}
