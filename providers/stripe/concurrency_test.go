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
	"github.com/billsync/billsync/mocks/mock"
	stripemock "github.com/billsync/billsync/mocks/stripe"
	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/providers/stripe"
	"github.com/billsync/billsync/reconcile"
)

// These tests run reconcile's worker, through this package's real client,
// against the fake Stripe in a testing/synctest bubble: the fake's latency
// and the client's rate limiter wait on the bubble's clock, so the figures
// (requests per second, in flight) are exact whatever the machine's load.

// deepQueue is a reconcile.Store holding n due jobs, all for customer,
// answering as a busy database would: each claim and each time taken
// before a fetch after dbTakes, each apply after applyTakes (the
// database's part of a reconcile must not take a fetch's place, nor leave
// a slot without its next job): a queue deeper than the rate can drain.
const (
	dbTakes    = 50 * time.Millisecond
	applyTakes = 200 * time.Millisecond
)

type deepQueue struct {
	mu       sync.Mutex
	n, next  int
	customer string
	applied  int
}

func (q *deepQueue) store() *mock.Store {
	return &mock.Store{
		ClaimFn: func(_ context.Context, _ string, limit int, _ time.Duration) ([]reconcile.Job, error) {
			time.Sleep(dbTakes)
			q.mu.Lock()
			defer q.mu.Unlock()
			var jobs []reconcile.Job
			for ; q.next < q.n && len(jobs) < limit; q.next++ {
				jobs = append(jobs, reconcile.Job{ID: int64(q.next + 1), Provider: "stripe", CustomerID: q.customer})
			}
			return jobs, nil
		},
		ExtendFn: func(_ context.Context, _ string, jobs []reconcile.Job, _ time.Duration) (int, error) {
			return len(jobs), nil
		},
		NowFn: func(context.Context) (time.Time, error) { return time.Now(), nil },
		ApplyFn: func(_ context.Context, _ reconcile.Job, _ time.Time, _ reconcile.Decider) (reconcile.Outcome, error) {
			time.Sleep(applyTakes)
			q.mu.Lock()
			defer q.mu.Unlock()
			q.applied++
			return reconcile.Outcome{Result: reconcile.ResultApplied}, nil
		},
		ReleaseFn: func(context.Context, string, []reconcile.Job) error { return nil },
	}
}

// meter records, at the fake, when each customer retrieval arrived and
// how many were being answered at once.
type meter struct {
	mu             sync.Mutex
	arrived        []time.Duration // since start
	start          time.Time
	inFlight, most int
	limited        int // 429 answers
}

func (m *meter) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/v1/customers/") {
			next.ServeHTTP(w, r)
			return
		}
		m.mu.Lock()
		m.arrived = append(m.arrived, time.Since(m.start))
		m.inFlight++
		m.most = max(m.most, m.inFlight)
		m.mu.Unlock()
		status := testenv.AnswerStatus(next, w, r)
		m.mu.Lock()
		m.inFlight--
		if status == http.StatusTooManyRequests {
			m.limited++
		}
		m.mu.Unlock()
	})
}

// between counts the requests that arrived in [from, to).
func (m *meter) between(from, to time.Duration) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, a := range m.arrived {
		if a >= from && a < to {
			n++
		}
	}
	return n
}

// busiestSecond is the most requests that arrived within one second.
func (m *meter) busiestSecond() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	most := 0
	for i, a := range m.arrived {
		n := 0
		for _, b := range m.arrived[i:] {
			if b >= a+time.Second {
				break
			}
			n++
		}
		most = max(most, n)
	}
	return most
}

// countingFetches counts the worker's fetches in flight (including their
// waits for the client's rate limiter) and the most at once.
type countingFetches struct {
	reconcile.Provider
	inFlight, most atomic.Int64
}

func (p *countingFetches) Fetch(ctx context.Context, customerID string) (reconcile.Snapshot, error) {
	n := p.inFlight.Add(1)
	defer p.inFlight.Add(-1)
	for {
		m := p.most.Load()
		if n <= m || p.most.CompareAndSwap(m, n) {
			break
		}
	}
	return p.Provider.Fetch(ctx, customerID)
}

type phase struct {
	latency time.Duration
	lasts   time.Duration
}

// runAdaptive runs a worker bounded at bound against the fake Stripe at
// rate requests a second, whose latency follows phases, over a queue
// deeper than the phases can drain. It returns what the fake saw and the
// most fetches the worker had in flight.
func runAdaptive(t *testing.T, rate float64, bound int, phases []phase) (*meter, int64) {
	m := &meter{}
	f := newFake(t, stripemock.Options{}, nil)
	cus := f.customer(t, map[string]string{"user_id": "u1"})
	f.subscribe(t, cus, "price_pro")
	var most int64
	synctest.Test(t, func(t *testing.T) {
		// The client as serve runs it at -stripe-rate: evenly spaced
		// requests (burst 1).
		// One operation at the whole rate: this test is about latency,
		// not Stripe's per-operation limits (budget_test.go).
		cfg := stripe.Config{APIKey: stripemock.DefaultAPIKey, BaseURL: f.URL, RateLimit: rate, OperationRateLimit: rate}
		client, err := stripe.NewClientOver(cfg, inproc.Transport{Handler: m.wrap(f.Server)})
		require.NoError(t, err)
		provider := &countingFetches{Provider: client}
		var total time.Duration
		for _, p := range phases {
			total += p.lasts
		}
		q := &deepQueue{n: int(rate*total.Seconds()) * 2, customer: cus}
		w, err := reconcile.NewWorker(reconcile.WorkerConfig{
			Store: q.store(), Providers: []reconcile.Provider{provider}, Plans: testenv.Plans(), Concurrency: bound,
		})
		require.NoError(t, err)
		ctx, stop := context.WithCancel(context.Background())
		m.start = time.Now()
		f.SetFaults(stripemock.Faults{Latency: phases[0].latency, RequestsPerSecond: rate})
		done := make(chan struct{})
		go func() { defer close(done); w.Run(ctx) }()
		for i, p := range phases {
			if i > 0 {
				f.SetFaults(stripemock.Faults{Latency: p.latency, RequestsPerSecond: rate})
			}
			time.Sleep(p.lasts)
		}
		stop()
		<-done
		most = provider.most.Load()
	})
	return m, most
}

// TestWorkerAdaptsInFlightToLatency: the provider's latency moves from
// 50 ms to 1 s and back while the queue is deep. The worker keeps the
// rate budget used (≥ 90% of the limit in each phase, once it has seen a
// few answers at the new latency), never sends more than the rate, and
// never has more than its bound in flight. Eight fixed loops, the old
// worker, would have sent 8 requests a second at 1 s.
func TestWorkerAdaptsInFlightToLatency(t *testing.T) {
	const rate = 100
	const bound = reconcile.DefaultMaxInFlight
	// settle is how long after a change of latency the share is not
	// judged: the answers at the new latency take that long to come back
	// (one latency) and to move the average (a few more).
	const settle = 3 * time.Second
	phases := []phase{{50 * time.Millisecond, 6 * time.Second}, {time.Second, 12 * time.Second}, {50 * time.Millisecond, 6 * time.Second}}
	m, most := runAdaptive(t, rate, bound, phases)

	var at time.Duration
	for _, p := range phases {
		from, to := at+settle, at+p.lasts
		share := float64(m.between(from, to)) / (to - from).Seconds() / rate
		t.Logf("latency %s: %.1f%% of the limit from %s to %s; whole phase %.1f%%", p.latency, 100*share, from, to,
			100*float64(m.between(at, to))/p.lasts.Seconds()/rate)
		require.GreaterOrEqual(t, share, 0.9, "latency %s: share of the limit", p.latency)
		at = to
	}
	require.LessOrEqual(t, m.busiestSecond(), rate+1, "the client's limiter holds the rate (burst 1)")
	require.Zero(t, m.limited, "no 429 from the fake's limit")
	require.LessOrEqual(t, most, int64(bound))
	require.Greater(t, most, int64(rate), "at 1 s, about rate × latency fetches were in flight")
}

// TestWorkerInFlightStaysWithinBound: a bound below what the latency
// calls for is held exactly: the worker fills it and never goes past it.
func TestWorkerInFlightStaysWithinBound(t *testing.T) {
	const rate, bound = 100, 20
	m, most := runAdaptive(t, rate, bound, []phase{{time.Second, 5 * time.Second}})
	require.Equal(t, int64(bound), most, "the worker fills its bound and never exceeds it")
	require.LessOrEqual(t, m.most, bound)
	// At 1 s, 20 in flight send 20 a second: the bound, not the rate, caps it.
	require.InDelta(t, bound*4, m.between(time.Second, 5*time.Second), bound/2)
}

// TestBudgetLatencyLeavesOutTheRateLimitWait: a fetch's latency, as the
// client reports it for sizing, is the provider's answer, not the wait for
// the client's own rate limiter: at 1 request a second, the second fetch
// waits a second before it is sent, and the latency stays the fake's.
func TestBudgetLatencyLeavesOutTheRateLimitWait(t *testing.T) {
	f := newFake(t, stripemock.Options{}, nil)
	cus := f.customer(t, map[string]string{"user_id": "u1"})
	synctest.Test(t, func(t *testing.T) {
		f.SetFaults(stripemock.Faults{Latency: 300 * time.Millisecond})
		c := f.bubbleClient(t, stripe.Config{APIKey: stripemock.DefaultAPIKey, BaseURL: f.URL, RateLimit: 1})
		require.Equal(t, reconcile.Budget{Rate: 1}, c.Budget(), "no latency before the first fetch")
		for range 2 {
			begin := time.Now()
			_, err := c.Fetch(context.Background(), cus)
			require.NoError(t, err)
			t.Logf("fetch took %s", time.Since(begin))
		}
		require.Equal(t, reconcile.Budget{Rate: 1, Latency: 300 * time.Millisecond}, c.Budget())
		require.Equal(t, reconcile.Budget{Rate: 0.5}, c.ListBudget(), "the listing's half, nothing listed yet")
	})
}
