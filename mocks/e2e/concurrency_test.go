package e2e_test

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	stripeapi "github.com/stripe/stripe-go/v82"

	stripemock "github.com/billsync/billsync/mocks/stripe"
	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/providers/stripe"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store"
	"github.com/billsync/billsync/store/scratch"
)

// workerProcEnv makes the test binary a second billsync worker process
// (see runWorkerProcess); its value is "dbURL fakeURL [lease]".
const workerProcEnv = "BILLSYNC_TEST_WORKER_PROCESS"

// runWorkerProcess runs 4 workers against the database and fake Stripe the
// parent test gives, with its lease (default: the worker's), until SIGTERM.
func runWorkerProcess() int {
	args := strings.Fields(os.Getenv(workerProcEnv))
	if len(args) < 2 {
		fmt.Fprintln(os.Stderr, "worker process: want dbURL fakeURL [lease]")
		return 2
	}
	dbURL, fakeURL := args[0], args[1]
	var lease time.Duration
	if len(args) > 2 {
		var err error
		if lease, err = time.ParseDuration(args[2]); err != nil {
			fmt.Fprintln(os.Stderr, "worker process:", err)
			return 2
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	st, err := store.Open(ctx, dbURL, store.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker process:", err)
		return 1
	}
	defer st.Close()
	plans := testenv.Plans()
	client, err := stripe.NewClient(stripe.Config{APIKey: stripemock.DefaultAPIKey, BaseURL: fakeURL, RateLimit: 1000, Burst: 100})
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker process:", err)
		return 1
	}
	w, err := reconcile.NewWorker(reconcile.WorkerConfig{Name: "proc2", Store: st, Providers: []reconcile.Provider{client},
		Plans: plans, Concurrency: 4, Batch: 5, Poll: 10 * time.Millisecond, Lease: lease})
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker process:", err)
		return 1
	}
	w.Run(ctx)
	return 0
}

// TestConcurrentWorkers: 4 workers in this process and 4 in a second
// process share one database while 1,000 events for 50 customers arrive (with
// copies). No grant may happen twice, every event must end applied, none lost.
func TestConcurrentWorkers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a second process")
	}
	const customers, changes = 50, 1000
	ctx := context.Background()
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	h := newHarness(t, testenv.Stripe, testenv.Options{})
	h.Stripe.Fake.SetFaults(stripemock.Faults{DuplicateCopies: 1, ReorderDelay: 5 * time.Millisecond, Seed: 11})

	proc := exec.Command(os.Args[0], "-test.run=^$")
	proc.Env = append(os.Environ(), workerProcEnv+"="+h.dbURL+" "+h.URL)
	var procLog bytes.Buffer
	proc.Stdout, proc.Stderr = &procLog, &procLog
	require.NoError(t, proc.Start())
	t.Cleanup(func() { _ = proc.Process.Kill() })

	local := h.Worker(reconcile.WorkerConfig{Name: "proc1", Concurrency: 4, Batch: 5, Poll: 10 * time.Millisecond})
	done := make(chan struct{})
	go func() { local.Run(runCtx); close(done) }()

	ids := make([]string, customers)
	subs := make([]*stripeapi.Subscription, customers)
	for i := range ids {
		ids[i] = h.Customer(fmt.Sprintf("user_%d", i))
		subs[i] = h.Subscribe(ids[i], "price_free")
	}
	// Random plan changes from 4 concurrent "apps"; the last change per
	// customer decides its final plan.
	prices := []string{"price_free", "price_pro", "price_team"}
	final := make([]string, customers)
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for g := range 4 {
		wg.Add(1)
		go func() { // no require here: it must fail on the test's goroutine
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 99))
			for i := g; i < changes-2*customers; i += 4 {
				c := rng.IntN(customers)
				mu.Lock() // one change at a time per customer keeps "final" exact
				p := prices[rng.IntN(len(prices))]
				for p == cmp.Or(final[c], "price_free") { // an unchanged price emits no event
					p = prices[rng.IntN(len(prices))]
				}
				_, err := h.Stripe.API.V1Subscriptions.Update(ctx, subs[c].ID, &stripeapi.SubscriptionUpdateParams{
					Items: []*stripeapi.SubscriptionUpdateItemParams{{ID: stripeapi.String(subs[c].Items.Data[0].ID), Price: stripeapi.String(p)}},
				})
				if err != nil {
					mu.Unlock()
					errs <- err
					return
				}
				final[c] = p
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	h.Delivered()

	// Wait until the queue is empty and nothing is pending.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		stats, err := scratch.ReadStats(ctx, h.Store)
		require.NoError(t, err)
		if stats.Queued == 0 && stats.Pending == 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "not drained: %d queued, %d pending events\nsecond process:\n%s", stats.Queued, stats.Pending, procLog.String())
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	<-done
	require.NoError(t, proc.Process.Signal(syscall.SIGTERM))
	require.NoError(t, proc.Wait(), "second process:\n%s", procLog.String())

	stats, err := scratch.ReadStats(ctx, h.Store)
	require.NoError(t, err)
	events, applied, receipts := stats.Events, stats.Applied, stats.Receipts
	require.Equal(t, changes+customers, events, "every event stored once (customer.created, created and invoice.paid per customer, one update per change)")
	require.Equal(t, events, applied, "every event applied")
	require.Equal(t, 2*events, receipts, "every copy has its receipt")

	allowance := map[string]int64{"price_free": 10, "price_pro": 500, "price_team": 2000}
	for i, cus := range ids {
		want := cmp.Or(final[i], "price_free")
		s := h.state(cus)
		require.Equal(t, map[string]string{"price_free": "free", "price_pro": "pro", "price_team": "team"}[want], s.Plan, "customer %d", i)
		require.Equal(t, h.largestGrant(cus), s.Balance, "customer %d: balance must equal the largest plan granted", i)
		require.GreaterOrEqual(t, s.Balance, allowance[want], "customer %d", i)
	}
	reconciles := len(h.TakeOutcomes())
	stats, err = scratch.ReadStats(ctx, h.Store)
	require.NoError(t, err)
	logged := stats.Reconciles
	require.Greater(t, logged, reconciles, "the second process must have taken part")
	require.Less(t, logged, events, "copies and bursts must coalesce")
	t.Logf("%d events (%d deliveries) → %d reconciles, %d in this process", events, receipts, logged, reconciles)
}
