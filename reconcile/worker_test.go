package reconcile_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	stripemock "github.com/billsync/billsync/mocks/stripe"
	"github.com/billsync/billsync/providers/stripe"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store/storetest"
)

func drain(t testingT, w *reconcile.Worker) int {
	t.Helper()
	n, err := w.Drain(context.Background())
	require.NoError(t, err)
	return n
}

func TestWorkerAppliesWhatStripeSaysNow(t *testing.T) {
	h := newHarness(t)
	cus := h.customer("user_1")
	sub := h.subscribe(cus, "price_free")
	h.changePrice(sub, "price_pro")
	h.delivered()

	w := h.worker(reconcile.WorkerConfig{})
	require.Equal(t, 1, drain(t, w), "four events (customer.created too) for one customer coalesce into one reconcile")
	s := h.state(cus)
	require.Equal(t, customerState{Plan: "pro", Status: "active", Balance: 500, Grants: 1,
		Events: map[string]int{"applied": 4}}, s)
	require.Equal(t, []string{"applied: account created on plan pro (active), Pro allowance granted (+500)"}, h.outcomeTexts(cus))

	a, err := h.st.Account(context.Background(), "stripe", cus)
	require.NoError(t, err)
	require.Equal(t, "user_1", a.UserRef)
	require.Equal(t, sub.ID, a.SubscriptionID)
	require.False(t, a.PeriodStart.IsZero())

	// A later downgrade: plan follows, nothing is clawed back.
	h.changePrice(sub, "price_free")
	h.delivered()
	drain(t, w)
	s = h.state(cus)
	require.Equal(t, "free", s.Plan)
	require.EqualValues(t, 500, s.Balance)
	require.Equal(t, 1, s.Grants)
}

func TestWorkerIgnoresWithAReason(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	cus := h.customer("user_legacy")
	h.subscribe(cus, "price_legacy")
	h.delivered()
	require.NoError(t, h.st.Enqueue(ctx, "stripe", "cus_nobody", reconcile.TriggerResync))

	drain(t, h.worker(reconcile.WorkerConfig{}))
	s := h.state(cus)
	require.Equal(t, map[string]int{"ignored": 3}, s.Events, "customer.created, the subscription and its invoice")
	require.Empty(t, s.Plan, "nothing may be applied from an unmapped price")
	require.Equal(t, []string{"ignored: ignored: price legacy_gold / price_legacy maps to no plan"}, h.outcomeTexts(cus))
	require.Equal(t, []string{"ignored: ignored: customer cus_nobody is unknown to stripe"}, h.outcomeTexts("cus_nobody"))
	var queued int
	require.NoError(t, storetest.LegacyPool(h.st).QueryRow(ctx, `SELECT count(*) FROM reconcile_queue`).Scan(&queued))
	require.Zero(t, queued, "a permanent failure is not retried")
}

// TestWorkerRidesOutProviderFaults: 5xx, 429 with Retry-After and
// timeouts are retried and the result is right.
func TestWorkerRidesOutProviderFaults(t *testing.T) {
	h := newHarness(t)
	cus := h.customer("user_f")
	sub := h.subscribe(cus, "price_free")
	h.changePrice(sub, "price_team")
	h.delivered()

	h.fake.SetFaults(stripemock.Faults{Error5xxRate: 0.4, RateLimitRate: 0.2, RetryAfter: time.Second, Seed: 7})
	w := h.worker(reconcile.WorkerConfig{Providers: []reconcile.Provider{h.newClient(stripe.Config{RetryMax: 8})}})
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
	h := newHarness(t)
	cus := h.customer("user_down")
	h.subscribe(cus, "price_pro")
	h.delivered()

	h.fake.SetFaults(stripemock.Faults{Latency: 300 * time.Millisecond})
	slow := h.newClient(stripe.Config{Timeout: 50 * time.Millisecond, RetryMax: -1})
	backoff := []time.Duration{time.Millisecond, time.Millisecond, time.Millisecond}
	w := h.worker(reconcile.WorkerConfig{Providers: []reconcile.Provider{slow}, Backoff: backoff})
	var results []reconcile.Result
	for range 1000 { // each pass waits out a 1 ms backoff; 4 passes are enough
		drain(t, w)
		for len(h.outcomes) > 0 {
			results = append(results, (<-h.outcomes).Result)
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
	var status string
	require.NoError(t, storetest.LegacyPool(h.st).QueryRow(ctx, `SELECT status FROM reconcile_queue WHERE customer_id = $1`, cus).Scan(&status))
	require.Equal(t, "dead", status)
	var outcome string
	require.NoError(t, storetest.LegacyPool(h.st).QueryRow(ctx, `SELECT outcome FROM inbox_events WHERE customer_id = $1 LIMIT 1`, cus).Scan(&outcome))
	require.Contains(t, outcome, "dead after 4 attempts")

	h.fake.SetFaults(stripemock.Faults{})
	require.NoError(t, h.st.Enqueue(ctx, "stripe", cus, reconcile.TriggerResync))
	drain(t, h.worker(reconcile.WorkerConfig{}))
	s = h.state(cus)
	require.Equal(t, "pro", s.Plan)
	require.Equal(t, map[string]int{"applied": 3}, s.Events, "the revived reconcile answers the dead events")
}

// TestWorkerStopReleasesLeases: stopping mid-batch finishes or hands back
// every claimed job at once, instead of holding customers for a lease.
func TestWorkerStopReleasesLeases(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	for range 5 {
		h.subscribe(h.customer("u"), "price_pro")
	}
	h.delivered()
	h.fake.SetFaults(stripemock.Faults{Latency: 150 * time.Millisecond})
	w := h.worker(reconcile.WorkerConfig{Concurrency: 1, Batch: 5, Lease: time.Hour})
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { w.Run(runCtx); close(done) }()
	// Wait for the batch to be claimed, then stop.
	require.Eventually(t, func() bool {
		var leased int
		err := storetest.LegacyPool(h.st).QueryRow(ctx, `SELECT count(*) FROM reconcile_queue WHERE locked_until IS NOT NULL`).Scan(&leased)
		return err == nil && leased == 5
	}, 10*time.Second, 5*time.Millisecond)
	cancel()
	<-done

	var queued, leased, pending int
	require.NoError(t, storetest.LegacyPool(h.st).QueryRow(ctx, `
		SELECT count(*), count(*) FILTER (WHERE locked_until IS NOT NULL),
		       (SELECT count(*) FROM inbox_events WHERE status = 'pending')
		FROM reconcile_queue`).Scan(&queued, &leased, &pending))
	require.Zero(t, leased, "no lease may outlive the worker")
	require.Positive(t, queued, "the stop came before the batch was done")
	require.Positive(t, pending, "unfinished customers keep their events pending")
	var attempts int
	require.NoError(t, storetest.LegacyPool(h.st).QueryRow(ctx, `SELECT coalesce(max(attempts), 0) FROM reconcile_queue`).Scan(&attempts))
	require.Zero(t, attempts, "a shutdown is not a provider failure")
}
