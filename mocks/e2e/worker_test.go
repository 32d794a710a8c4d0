package e2e_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/mocks/mock"
	stripemock "github.com/billsync/billsync/mocks/stripe"
	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/providers/stripe"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store/scratch"
	"github.com/billsync/billsync/store/storetest"
)

func drain(t testingT, w *reconcile.Worker) int {
	t.Helper()
	n, err := w.Drain(context.Background())
	require.NoError(t, err)
	return n
}

func TestWorkerAppliesWhatStripeSaysNow(t *testing.T) {
	h := newHarness(t, testenv.Stripe, testenv.Options{})
	cus := h.Customer("user_1")
	sub := h.Subscribe(cus, "price_free")
	h.ChangePrice(sub, "price_pro")
	h.Delivered()

	w := h.Worker(reconcile.WorkerConfig{})
	require.Equal(t, 1, drain(t, w), "four events (customer.created too) for one customer coalesce into one reconcile")
	s := h.state(cus)
	require.Equal(t, storetest.CustomerState{Plan: "pro", Status: "active", Balance: 500, Grants: 1,
		Events: map[string]int{"applied": 4}}, s)
	require.Equal(t, []string{"applied: account created on plan pro (active), Pro allowance granted (+500)"}, h.outcomeTexts(cus))

	a, err := h.Store.Account(context.Background(), "stripe", cus)
	require.NoError(t, err)
	require.Equal(t, "user_1", a.UserRef)
	require.Equal(t, sub.ID, a.SubscriptionID)
	require.False(t, a.PeriodStart.IsZero())

	// A later downgrade: plan follows, nothing is clawed back.
	h.ChangePrice(sub, "price_free")
	h.Delivered()
	drain(t, w)
	s = h.state(cus)
	require.Equal(t, "free", s.Plan)
	require.EqualValues(t, 500, s.Balance)
	require.Equal(t, 1, s.Grants)
}

func TestWorkerIgnoresWithAReason(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, testenv.Stripe, testenv.Options{})
	cus := h.Customer("user_legacy")
	h.Subscribe(cus, "price_legacy")
	h.Delivered()
	require.NoError(t, h.Store.Enqueue(ctx, "stripe", "cus_nobody", reconcile.TriggerResync))

	drain(t, h.Worker(reconcile.WorkerConfig{}))
	s := h.state(cus)
	require.Equal(t, map[string]int{"ignored": 3}, s.Events, "customer.created, the subscription and its invoice")
	require.Empty(t, s.Plan, "nothing may be applied from an unmapped price")
	require.Equal(t, []string{"ignored: ignored: price legacy_gold / price_legacy maps to no plan"}, h.outcomeTexts(cus))
	require.Equal(t, []string{"ignored: ignored: customer cus_nobody is unknown to stripe"}, h.outcomeTexts("cus_nobody"))
	require.Empty(t, storetest.Queue(t, h.Store), "a permanent failure is not retried")
}

// TestWorkerRidesOutProviderFaults: 5xx, 429 with Retry-After and
// timeouts are retried and the result is right.
func TestWorkerRidesOutProviderFaults(t *testing.T) {
	h := newHarness(t, testenv.Stripe, testenv.Options{})
	cus := h.Customer("user_f")
	sub := h.Subscribe(cus, "price_free")
	h.ChangePrice(sub, "price_team")
	h.Delivered()

	h.Stripe.Fake.SetFaults(stripemock.Faults{Error5xxRate: 0.4, RateLimitRate: 0.2, RetryAfter: time.Second, Seed: 7})
	w := h.Worker(reconcile.WorkerConfig{Providers: []reconcile.Provider{h.NewStripeClient(stripe.Config{RetryMax: 8})}})
	drain(t, w)
	s := h.state(cus)
	require.Equal(t, "team", s.Plan)
	require.EqualValues(t, 2000, s.Balance)
	require.Equal(t, map[string]int{"applied": 4}, s.Events, "customer.created, created, invoice.paid, updated")
}

// TestWorkerProviderDownForGood: every attempt fails; after the last one
// the job is dead, its events say why, nothing was applied, and a resync
// once the provider is back fixes the account.
func TestWorkerProviderDownForGood(t *testing.T) {
	ctx := context.Background()
	gate := newFetchGate(t)
	h := newHarness(t, testenv.Stripe, testenv.Options{Wrap: gate.wrap})
	cus := h.Customer("user_down")
	h.Subscribe(cus, "price_pro")
	h.Delivered()

	// Every fetch hangs until the client's attempt times out.
	gate.shut.Store(true)
	slow := h.NewStripeClient(stripe.Config{Timeout: 50 * time.Millisecond, RetryMax: -1})
	backoff := []time.Duration{time.Millisecond, time.Millisecond, time.Millisecond}
	w := h.Worker(reconcile.WorkerConfig{Providers: []reconcile.Provider{slow}, Backoff: backoff})
	var results []reconcile.Result
	for range 1000 { // each pass waits out a 1 ms backoff; 4 passes are enough
		drain(t, w)
		for _, o := range h.TakeOutcomes() {
			results = append(results, o.Result)
		}
		if len(results) >= 4 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	require.Equal(t, []reconcile.Result{reconcile.ResultRetry, reconcile.ResultRetry, reconcile.ResultRetry, reconcile.ResultDead}, results)
	require.EqualValues(t, 1, w.Dead())
	s := h.state(cus)
	require.Empty(t, s.Plan)
	require.Equal(t, map[string]int{"dead": 3}, s.Events, "customer.created, the subscription and its invoice")
	require.Equal(t, "dead", s.Queue.Status)
	events := storetest.CustomerEvents(t, h.Store, stripe.Provider, cus)
	require.NotEmpty(t, events)
	require.Contains(t, events[0].Outcome, "dead after 4 attempts")

	gate.shut.Store(false)
	require.NoError(t, h.Store.Enqueue(ctx, "stripe", cus, reconcile.TriggerResync))
	drain(t, h.Worker(reconcile.WorkerConfig{}))
	s = h.state(cus)
	require.Equal(t, "pro", s.Plan)
	require.Equal(t, map[string]int{"applied": 3}, s.Events, "the revived reconcile answers the dead events")
}

// TestWorkerStopReleasesLeases: stopping mid-batch finishes or hands back
// every claimed job at once, instead of holding customers for a lease.
func TestWorkerStopReleasesLeases(t *testing.T) {
	ctx := context.Background()
	gate := newFetchGate(t)
	h := newHarness(t, testenv.Stripe, testenv.Options{Wrap: gate.wrap})
	for range 5 {
		h.Subscribe(h.Customer("u"), "price_pro")
	}
	h.Delivered()
	// The batch's first fetch is held at the fake until the worker gives
	// it up, so the stop comes mid-batch whatever the machine's speed.
	gate.shut.Store(true)
	w := h.Worker(reconcile.WorkerConfig{Concurrency: 1, Batch: 5, Lease: time.Hour})
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { w.Run(runCtx); close(done) }()
	// Wait for the batch to be claimed, then stop.
	// leases counts the queue rows under a lease, and the most attempts
	// any row has had.
	leases := func() (leased, attempts int) {
		for _, q := range storetest.Queue(t, h.Store) {
			if q.Leased() {
				leased++
			}
			attempts = max(attempts, q.Attempts)
		}
		return leased, attempts
	}
	storetest.WaitFor(t, "the batch of 5 claimed", func() bool {
		leased, _ := leases()
		return leased == 5
	})
	cancel()
	<-done

	leased, attempts := leases()
	require.Zero(t, leased, "no lease may outlive the worker")
	require.Positive(t, len(storetest.Queue(t, h.Store)), "the stop came before the batch was done")
	stats, err := scratch.ReadStats(ctx, h.Store)
	require.NoError(t, err)
	require.Positive(t, stats.Pending, "unfinished customers keep their events pending")
	require.Zero(t, attempts, "a shutdown is not a provider failure")
}

// fetchGate holds the fake's answers to customer retrievals (the worker's
// Fetch) while shut, each until its request is given up or the gate
// opens (at the test's end).
type fetchGate struct {
	shut atomic.Bool
	open chan struct{}
}

func newFetchGate(t *testing.T) *fetchGate {
	g := &fetchGate{open: make(chan struct{})}
	t.Cleanup(func() { close(g.open) })
	return g
}

func (g *fetchGate) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if g.shut.Load() && r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v1/customers/") {
			select {
			case <-r.Context().Done():
				return
			case <-g.open:
			}
		}
		next.ServeHTTP(w, r)
	})
}

// TestWorkerReadCoversWhatCameWhileItWaited: a claimed job's read is
// observed when it begins. An event received while the job waited behind
// another read is answered by its read (one fetch); an event received while
// its own read is in flight is not, and the customer is read again.
func TestWorkerReadCoversWhatCameWhileItWaited(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, testenv.Stripe, testenv.Options{})
	cusA, cusB := h.Customer("user_a"), h.Customer("user_b")
	subA, subB := h.Subscribe(cusA, "price_free"), h.Subscribe(cusB, "price_free")
	h.Delivered()
	w := h.Worker(reconcile.WorkerConfig{})
	require.Equal(t, 2, drain(t, w))
	// Both queued again with no event pending (a resync), so neither job
	// carries an expectation that a read could contradict.
	for _, cus := range []string{cusA, cusB} {
		require.NoError(t, h.Store.Enqueue(ctx, stripe.Provider, cus, reconcile.TriggerResync))
	}

	inFirst, release := make(chan string, 1), make(chan struct{})
	var mu sync.Mutex
	fetches := map[string]int{}
	first := true
	provider := &mock.Provider{ProviderName: stripe.Provider, FetchFn: func(ctx context.Context, customerID string) (reconcile.Snapshot, error) {
		mu.Lock()
		fetches[customerID]++
		wait := first
		first = false
		mu.Unlock()
		if wait {
			inFirst <- customerID
			<-release
		}
		return h.Client.Fetch(ctx, customerID)
	}}
	w = h.Worker(reconcile.WorkerConfig{Providers: []reconcile.Provider{provider}, Batch: 2})
	drained := make(chan int)
	go func() { drained <- drain(t, w) }()

	// Both customers were claimed in one batch: the first is being read,
	// the second waits behind it. Both change at the provider now.
	reading := <-inFirst
	waiting, subWaiting, subReading := cusB, subB, subA
	if reading == cusB {
		waiting, subWaiting, subReading = cusA, subA, subB
	}
	h.ChangePrice(subReading, "price_pro")
	h.ChangePrice(subWaiting, "price_pro")
	h.Delivered()
	close(release)
	// The batch, then the customer read during its event, once more.
	require.Equal(t, 3, <-drained)
	for _, cus := range []string{reading, waiting} {
		s := h.state(cus)
		require.Equal(t, "pro", s.Plan)
		require.Zero(t, s.Events["pending"])
		require.Empty(t, s.Queue.Status)
	}
	// The waiting job's read came after its event and answered it; the
	// event received during the first read was not answered by that read.
	require.Equal(t, map[string]int{reading: 2, waiting: 1}, fetches)
}
