package e2e_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	stripeapi "github.com/stripe/stripe-go/v82"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/mocks/fault"
	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store"
	"github.com/billsync/billsync/store/storetest"
)

// sampleHarness is a harness with a dozen Stripe customers on price_pro,
// reconciled, and a sampler on a large account's budget (every account
// every round).
type sampleHarness struct {
	*harness
	customers []string
	subs      map[string]*stripeapi.Subscription
	samples   []reconcile.Sample
	mu        sync.Mutex
}

func newSampleHarness(t *testing.T) *sampleHarness {
	t.Helper()
	h := &sampleHarness{harness: newHarness(t, testenv.Stripe, testenv.Options{}), subs: map[string]*stripeapi.Subscription{}}
	for i := range 12 {
		c := h.Customer("u" + string(rune('a'+i)))
		h.customers = append(h.customers, c)
		h.subs[c] = h.Subscribe(c, "price_pro")
	}
	h.Delivered()
	h.DrainAll(h.Worker(reconcile.WorkerConfig{}), 0)
	return h
}

// sampler is a sampler of st (a replica's store) on a large account's
// budget: 100 requests/s, 100M reads a month, share 5% (300 a minute).
func (h *sampleHarness) sampler(t *testing.T, st *store.Store, prov reconcile.Provider) *reconcile.Sampler {
	t.Helper()
	return h.samplerEvery(t, st, prov, 0)
}

// samplerEvery is sampler with rounds every interval (0: a minute).
func (h *sampleHarness) samplerEvery(t *testing.T, st *store.Store, prov reconcile.Provider, interval time.Duration) *reconcile.Sampler {
	t.Helper()
	w := h.Worker(reconcile.WorkerConfig{Store: st, Providers: []reconcile.Provider{prov}})
	s, err := reconcile.NewSampler(reconcile.SamplerConfig{Provider: testenv.Stripe, Worker: w, Store: st, Share: 0.05,
		Budget:   func() reconcile.SampleBudget { return reconcile.SampleBudget{Rate: 100, Allocation: 1e8} },
		Interval: interval,
		OnSample: func(s reconcile.Sample) {
			h.mu.Lock()
			h.samples = append(h.samples, s)
			h.mu.Unlock()
		}})
	require.NoError(t, err)
	return s
}

// TestSampleFindsASilentChange: a price changed at Stripe with no webhook
// (dropped) and no events feed running is found by the first round among
// a dozen accounts, counted drifted under plan, recorded, and healed by
// the worker with trigger sample.
func TestSampleFindsASilentChange(t *testing.T) {
	t.Parallel()
	h := newSampleHarness(t)
	silent := h.customers[7]
	changesBefore := storetest.Counts(t, h.Store)["account_changes"]

	// The silent change: every webhook of it dropped.
	h.SetFaults(fault.Faults{DropRate: 1, Seed: 1})
	h.ChangePrice(h.subs[silent], "price_team")
	h.Delivered()
	require.Equal(t, "pro", h.state(silent).Plan, "billsync has not heard of it")

	r, err := h.sampler(t, h.Store, h.Client).Round(context.Background())
	require.NoError(t, err)
	require.Equal(t, 12, r.Compared, "a dozen accounts: every one in one round")
	require.Equal(t, 1, r.Drifted)
	var drifted []reconcile.Sample
	for _, s := range h.samples {
		if s.Drifted {
			drifted = append(drifted, s)
		}
	}
	require.Len(t, drifted, 1)
	require.Equal(t, silent, drifted[0].CustomerID)
	require.Equal(t, reconcile.SampleClassPlan, drifted[0].Class)
	rec, err := h.Store.DriftedSamples(context.Background(), 10)
	require.NoError(t, err)
	require.Len(t, rec, 1)
	require.Equal(t, silent, rec[0].CustomerID)
	require.Equal(t, reconcile.SampleClassPlan, rec[0].Class)
	require.Equal(t, changesBefore, storetest.Counts(t, h.Store)["account_changes"], "the dry runs rolled back")
	require.Equal(t, "pro", h.state(silent).Plan, "the sample itself changes nothing")
	q := storetest.QueueRowOf(t, h.Store, testenv.Stripe, silent)
	require.Equal(t, reconcile.TriggerSample, q.Trigger, "queued for the worker at once")
	require.Len(t, storetest.Queue(t, h.Store), 1, "only the drifted account")

	h.DrainAll(h.Worker(reconcile.WorkerConfig{}), 0)
	require.Equal(t, "team", h.state(silent).Plan, "healed by the worker")
	log := storetest.ReconcileLog(t, h.Store)
	last := log[len(log)-1]
	require.Equal(t, silent, last.CustomerID)
	require.Equal(t, reconcile.TriggerSample, last.Trigger)
	require.Equal(t, reconcile.ResultApplied, last.Result)
}

// TestSampleEqualWritesNothing: accounts equal to Stripe count as sampled,
// not drifted; no account change, no queue row, the accounts as they were.
func TestSampleEqualWritesNothing(t *testing.T) {
	t.Parallel()
	h := newSampleHarness(t)
	before := storetest.Counts(t, h.Store)
	accounts := storetest.Accounts(t, h.Store)
	r, err := h.sampler(t, h.Store, h.Client).Round(context.Background())
	require.NoError(t, err)
	require.Equal(t, 12, r.Compared)
	require.Zero(t, r.Drifted)
	require.Len(t, h.samples, 12)
	for _, s := range h.samples {
		require.False(t, s.Drifted, s.CustomerID)
	}
	after := storetest.Counts(t, h.Store)
	require.Equal(t, before["account_changes"], after["account_changes"])
	require.Equal(t, before["reconcile_log"], after["reconcile_log"])
	require.Equal(t, before["ledger"], after["ledger"])
	require.Equal(t, before["samples"]+12, after["samples"])
	require.Empty(t, storetest.Queue(t, h.Store))
	require.Equal(t, accounts, storetest.Accounts(t, h.Store))
}

// TestSampleOneReplicaAtATime: two replicas' samplers on one database; while
// one leads (its round held inside a read), the other's lease is refused
// and it reads nothing; once the first stops, the other samples.
func TestSampleOneReplicaAtATime(t *testing.T) {
	t.Parallel()
	h := newSampleHarness(t)
	other, err := store.Open(context.Background(), h.dbURL, store.Options{})
	require.NoError(t, err)
	t.Cleanup(other.Close)

	inside, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	var firstReads, otherReads atomic.Int64
	blocking := &countingProvider{Provider: h.Client, reads: &firstReads, hook: func() {
		once.Do(func() { close(inside); <-release })
	}}
	ctx1, stop1 := context.WithCancel(context.Background())
	done1 := make(chan struct{})
	go func() { defer close(done1); h.samplerEvery(t, h.Store, blocking, 100*time.Millisecond).Run(ctx1) }()
	<-inside
	_, _, err = other.SampleLock(context.Background(), testenv.Stripe)
	require.ErrorIs(t, err, reconcile.ErrLeaseHeld, "the second replica cannot sample while the first does")

	ctx2, stop2 := context.WithCancel(context.Background())
	defer stop2()
	done2 := make(chan struct{})
	go func() {
		defer close(done2)
		h.samplerEvery(t, other, &countingProvider{Provider: h.Client, reads: &otherReads}, 100*time.Millisecond).Run(ctx2)
	}()
	close(release)
	// Rounds every 100 ms, the second replica trying the lease as often:
	// twenty of the first's reads span many of its tries.
	storetest.WaitFor(t, "the first replica's rounds", func() bool { return firstReads.Load() >= 20 })
	require.Zero(t, otherReads.Load(), "the second replica read nothing while the first held the lease")
	stop1()
	<-done1
	storetest.WaitFor(t, "the second replica takes over once the first stops", func() bool { return otherReads.Load() >= 1 })
	stop2()
	<-done2
}

// countingProvider counts its reads and calls hook before each.
type countingProvider struct {
	reconcile.Provider
	reads *atomic.Int64
	hook  func()
}

func (p *countingProvider) Fetch(ctx context.Context, customerID string) (reconcile.Snapshot, error) {
	if p.hook != nil {
		p.hook()
	}
	p.reads.Add(1)
	return p.Provider.Fetch(ctx, customerID)
}
