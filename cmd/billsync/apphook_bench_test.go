package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/server"
	"github.com/billsync/billsync/store"
	"github.com/billsync/billsync/store/storetest"
)

// BenchmarkAppDelivery measures the app webhooks end to end on a real
// database, with serve's defaults (8 in flight, woken by the change
// channel): Throughput delivers b.N changes of 20 accounts written before
// the deliverer starts (changes/s); Latency writes b.N debits one after
// another while the deliverer runs and reports the time from a change's
// transaction to the app's receipt (p50, p99). The receiver answers at
// once, or after 20 ms. Latency/during-import measures the same live
// debits while the deliverer also has an import's backlog of
// importBacklog changes to deliver (written as an import writes them,
// a page of 100 accounts a transaction): live changes go first, so their
// p99 stays near the idle one measured in the same run.
//
//	go test -bench AppDelivery -run '^$' -benchtime 400x ./cmd/billsync
func BenchmarkAppDelivery(b *testing.B) {
	for _, answer := range []time.Duration{0, 20 * time.Millisecond} {
		every := func(int64) time.Duration { return answer }
		b.Run(fmt.Sprintf("Throughput/answer=%s", answer), func(b *testing.B) { benchDelivery(b, every, false, 0) })
		b.Run(fmt.Sprintf("Latency/answer=%s", answer), func(b *testing.B) { benchDelivery(b, every, true, 0) })
		b.Run(fmt.Sprintf("Latency/during-import/answer=%s", answer), func(b *testing.B) {
			benchDelivery(b, every, true, importBacklog)
		})
	}
	// One account of the 20 answered in 200 ms, the rest at once: the
	// slow account must not hold up the others.
	oneSlow := func(account int64) time.Duration {
		if account%deliveryAccounts == 0 {
			return 200 * time.Millisecond
		}
		return 0
	}
	b.Run("Throughput/answer=one-account-200ms", func(b *testing.B) { benchDelivery(b, oneSlow, false, 0) })
	b.Run("Latency/answer=one-account-200ms", func(b *testing.B) { benchDelivery(b, oneSlow, true, 0) })
}

const (
	// deliveryAccounts is how many accounts the delivery benchmark's live
	// changes are spread over.
	deliveryAccounts = 20
	// importBacklog is how many imported accounts' changes wait for
	// delivery in Latency/during-import.
	importBacklog = 20_000
)

// benchDelivery measures deliveries of live debits (all b.N of them
// written first, or one after another with latency), after backlog
// imported accounts' changes, which are delivered too but not measured.
func benchDelivery(b *testing.B, answer func(account int64) time.Duration, latency bool, backlog int) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var lags []time.Duration
	var imported atomic.Int64
	got := make(chan struct{}, b.N*2)
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var c struct {
			Time      time.Time
			AccountID int64 `json:"account_id"`
			Why       struct {
				Trigger string
			}
		}
		_ = json.Unmarshal(body, &c)
		time.Sleep(answer(c.AccountID)) // the app's own work
		w.WriteHeader(http.StatusNoContent)
		if c.Why.Trigger == reconcile.TriggerImport {
			imported.Add(1) // the backlog: delivered, not measured
			return
		}
		mu.Lock()
		lags = append(lags, time.Since(c.Time))
		mu.Unlock()
		got <- struct{}{}
	}))
	defer app.Close()
	st := storetest.OpenStoreWithEndpoints(b, storetest.URL(b), store.Options{}, app.URL)
	const accounts = deliveryAccounts
	for i := range accounts {
		debitsFor(b, st, fmt.Sprintf("cus_%d", i), fmt.Sprintf("u%d", i), 0)
	}
	drain := func(n int) {
		for range n {
			<-got
		}
	}
	sender, err := server.NewAppSender(server.AppSenderConfig{Secret: testAppSecret})
	if err != nil {
		b.Fatal(err)
	}
	d, err := reconcile.NewAppDeliverer(reconcile.AppDelivererConfig{Name: "bench", Store: st, Sender: sender, Endpoints: []string{app.URL}})
	if err != nil {
		b.Fatal(err)
	}
	debit := func(i int) {
		if _, err := st.Debit(ctx, reconcile.Debit{UserRef: fmt.Sprintf("u%d", i%accounts), Key: fmt.Sprint("k", i), Amount: 1},
			reconcile.DecideDebit); err != nil {
			b.Fatal(err)
		}
	}
	if !latency {
		for i := range b.N {
			debit(i)
		}
	}
	go st.ListenChanges(ctx, slog.New(slog.DiscardHandler), d.Wake)
	go d.Run(ctx)
	drain(accounts) // the accounts' own changes
	writeImport(b, st, backlog)
	// Measured once the backlog's deliveries exist: an import writes at
	// most a page every 40 ms, which the fan-out follows as it goes, so
	// the backlog that lasts is of deliveries waiting for the app.
	for backlog > 0 {
		stats, err := st.AppDeliveryStats(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if stats.Pending+stats.Delivered >= int64(accounts+backlog) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	imported.Store(0)
	mu.Lock()
	lags = lags[:0]
	mu.Unlock()
	b.ResetTimer()
	if latency {
		for i := range b.N {
			debit(i)
		}
	}
	drain(b.N)
	b.StopTimer()
	if backlog > 0 {
		// Below backlog: the live changes were delivered while the
		// import's still waited.
		b.ReportMetric(float64(imported.Load()), "imported-by-then")
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "changes/s")
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(lags)
	if latency && len(lags) > 0 {
		b.ReportMetric(float64(lags[len(lags)/2].Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(lags[len(lags)*99/100].Microseconds())/1000, "p99-ms")
	}
}

// writeImport writes n new accounts as an import does, a page of 100 in
// a transaction, each with its account change (trigger import).
func writeImport(b *testing.B, st *store.Store, n int) {
	ctx := context.Background()
	plans := testenv.Plans()
	for first := 0; first < n; first += 100 {
		now, err := st.Now(ctx)
		if err != nil {
			b.Fatal(err)
		}
		start := now.Truncate(time.Hour)
		var jobs []reconcile.Job
		var deciders []reconcile.Decider
		for i := first; i < min(first+100, n); i++ {
			customer := fmt.Sprintf("cus_imported_%d", i)
			job := reconcile.Job{Provider: "stripe", CustomerID: customer, Trigger: reconcile.TriggerImport}
			snap := reconcile.Snapshot{Provider: "stripe", CustomerID: customer, UserRef: fmt.Sprintf("imported_%d", i),
				Subscriptions: []reconcile.Subscription{{ID: "sub_" + customer, Status: "active", Items: []reconcile.Item{{
					PriceRefs: []string{"price_pro"}, Quantity: 1, PeriodStart: start, PeriodEnd: start.AddDate(0, 1, 0)}}}}}
			jobs = append(jobs, job)
			deciders = append(deciders, reconcile.NewDecider(job, snap, plans, now))
		}
		if _, err := st.ApplySweptPage(ctx, jobs, now, deciders); err != nil {
			b.Fatal(err)
		}
	}
}
