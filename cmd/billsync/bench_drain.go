package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stripe/stripe-go/v82/webhook"

	stripemock "github.com/billsync/billsync/mocks/stripe"
	"github.com/billsync/billsync/mocks/stripe/stripetest"
	"github.com/billsync/billsync/providers/stripe"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store"
)

type benchDrainRes struct {
	Events               int            `json:"events"`
	Customers            int            `json:"customers"`
	StoredVia            string         `json:"stored_via"`
	LatencyMs            float64        `json:"provider_latency_ms"`
	RateLimit            float64        `json:"rate_limit_per_sec"`
	Workers              int            `json:"workers"`
	Batch                int            `json:"batch"`
	SeedSeconds          float64        `json:"seed_seconds"`
	StoreSeconds         float64        `json:"store_seconds"`
	Seconds              float64        `json:"seconds"` // workers start → queue empty
	APIRequests          int64          `json:"api_requests"`
	APIRequestsPerSec    float64        `json:"api_requests_per_sec"`
	LimitShare           float64        `json:"limit_share"`
	Reconciles           int            `json:"reconciles"`
	ReconcilesPerSec     float64        `json:"reconciles_per_sec"`
	RequestsPerReconcile float64        `json:"requests_per_reconcile"`
	MaxReconcilesPerSec  float64        `json:"max_reconciles_per_sec"` // the limit over requests per reconcile
	Fetches              int64          `json:"fetches"`
	CustomersFetched     int            `json:"customers_fetched"`
	FetchesPerCustomer   float64        `json:"fetches_per_customer"`
	RateLimited          int64          `json:"rate_limited_429"`
	Connections          int64          `json:"connections_opened"`
	Outcomes             map[string]int `json:"outcomes"`
	EventsApplied        int            `json:"events_applied"`
	EventsPending        int            `json:"events_pending"`
	EventsOther          int            `json:"events_ignored_or_dead"`
	Live                 benchLiveRes   `json:"live"`
}

// benchDrain seeds the fake with customers and subscriptions, stores a
// burst of events for them, then times the workers until the queue is
// empty.
func benchDrain(ctx context.Context, st *store.Store, plans *reconcile.Plans, o benchOptions, logger *slog.Logger) (benchDrainRes, error) {
	res := benchDrainRes{
		Events: o.DrainEvents, Customers: o.Customers, StoredVia: "store.StoreDelivery (no HTTP)",
		LatencyMs: float64(o.Latency) / float64(time.Millisecond), RateLimit: o.RateLimit,
		Workers: o.Workers, Batch: o.Batch, Outcomes: map[string]int{},
	}

	fake := stripemock.New(stripemock.Options{})
	defer fake.Close()
	for _, p := range stripetest.Prices() {
		fake.AddPrice(p.ID, p.LookupKey, p.Amount)
	}
	counted := &benchCountingHandler{next: fake}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return res, fmt.Errorf("bench fake listener: %w", err)
	}
	hs := &http.Server{Handler: counted, ReadHeaderTimeout: 10 * time.Second, ConnState: counted.connState}
	go hs.Serve(ln) //nolint:errcheck // ends with Shutdown

	defer hs.Shutdown(context.WithoutCancel(ctx)) //nolint:errcheck // bench teardown
	fakeURL := "http://" + ln.Addr().String()

	// Seed with the fake's faults off: the setup is not what is measured.
	t0 := time.Now()
	customers, err := benchSeed(ctx, fakeURL, o.Customers)
	if err != nil {
		return res, err
	}
	res.SeedSeconds = benchRound(time.Since(t0).Seconds(), 2)
	logger.Info("bench drain: fake seeded", slog.Int("customers", len(customers)), slog.Float64("seconds", res.SeedSeconds))

	// Store the burst: event k of every customer before event k+1 of any,
	// as a burst over many customers arrives.
	t0 = time.Now()
	deliveries := make([]benchDelivery, 0, o.DrainEvents)
	for i := range o.DrainEvents {
		cust := customers[i%len(customers)]
		body := benchEventBody(fmt.Sprintf("evt_drain_%06d", i), cust, i)
		deliveries = append(deliveries, benchDelivery{delivery: reconcile.Delivery{Event: stripe.ParseEvent(body)}})
	}
	if _, _, err := benchSend(ctx, 8, len(deliveries), func(ctx context.Context, i int) error {
		_, err := st.StoreDelivery(ctx, deliveries[i].delivery)
		return err
	}); err != nil {
		return res, fmt.Errorf("store drain events: %w", err)
	}
	res.StoreSeconds = benchRound(time.Since(t0).Seconds(), 2)
	depth, err := st.QueueDepth(ctx)
	if err != nil {
		return res, err
	}
	if queued := depth.Pending + depth.Dead; queued != len(customers) {
		return res, fmt.Errorf("drain: %d customers queued after storing events for %d", queued, len(customers))
	}
	logger.Info("bench drain: events stored", slog.Int("events", o.DrainEvents), slog.Float64("seconds", res.StoreSeconds))

	// The provider as Stripe's live mode would be: every request takes the
	// latency, and the account's rate limit is enforced (429 over it).
	fake.SetFaults(stripemock.Faults{Latency: o.Latency, RequestsPerSecond: o.RateLimit})
	client, err := stripe.NewClient(stripe.Config{APIKey: stripemock.DefaultAPIKey, BaseURL: fakeURL, RateLimit: o.RateLimit})
	if err != nil {
		return res, err
	}
	provider := &benchCountingProvider{Provider: client, fetches: map[string]int{}}
	var outcomesMu sync.Mutex
	worker, err := reconcile.NewWorker(reconcile.WorkerConfig{
		Name: "bench", Store: st, Providers: []reconcile.Provider{provider}, Plans: plans,
		Logger:      slog.New(slog.NewTextHandler(io.Discard, nil)), // as in production, minus the output
		Concurrency: o.Workers, Batch: o.Batch,
		OnOutcome: func(_ reconcile.Job, out reconcile.Outcome) {
			outcomesMu.Lock()
			res.Outcomes[string(out.Result)]++
			outcomesMu.Unlock()
		},
	})
	if err != nil {
		return res, err
	}

	reqs0, limited0, conns0 := counted.requests.Load(), counted.limited.Load(), counted.conns.Load()
	runCtx, stopWorkers := context.WithCancel(ctx)
	done := make(chan struct{})
	start := time.Now()
	go func() { defer close(done); worker.Run(runCtx) }()
	// At the limit the drain needs requests/limit seconds; ten times that
	// (plus a minute) means it is broken, not slow.
	expected := time.Duration(2 * float64(len(customers)) / o.RateLimit * float64(time.Second))
	took, err := benchWaitEmpty(ctx, st, start, time.Minute+10*expected)
	stopWorkers()
	<-done
	if err != nil {
		return res, err
	}
	// The queue is empty, so every fetch has finished: what the fake
	// counted so far is the drain's.
	reqs, limited, conns := counted.requests.Load()-reqs0, counted.limited.Load()-limited0, counted.conns.Load()-conns0

	stats, err := st.Stats(ctx)
	if err != nil {
		return res, err
	}
	res.Seconds = benchRound(took.Seconds(), 3)
	res.APIRequests, res.RateLimited, res.Connections = reqs, limited, conns
	res.APIRequestsPerSec = benchRound(float64(reqs)/took.Seconds(), 1)
	res.LimitShare = benchRound(float64(reqs)/took.Seconds()/o.RateLimit, 4)
	res.Reconciles = stats.Reconciles
	res.ReconcilesPerSec = benchRound(float64(stats.Reconciles)/took.Seconds(), 1)
	if stats.Reconciles > 0 {
		res.RequestsPerReconcile = benchRound(float64(reqs)/float64(stats.Reconciles), 2)
		res.MaxReconcilesPerSec = benchRound(o.RateLimit/res.RequestsPerReconcile, 1)
	}
	res.Fetches, res.CustomersFetched = provider.counts()
	res.FetchesPerCustomer = benchRound(float64(res.Fetches)/float64(len(customers)), 3)
	res.EventsApplied, res.EventsPending = stats.Applied, stats.Pending
	res.EventsOther = stats.Ignored + stats.Dead
	if stats.Pending > 0 || stats.Events != o.DrainEvents {
		return res, fmt.Errorf("drain: queue empty but %d of %d stored events (of %d sent) still pending", stats.Pending, stats.Events, o.DrainEvents)
	}
	logger.Info("bench drain: queue empty", slog.Float64("seconds", res.Seconds), slog.Int64("api_requests", reqs))

	res.Live, err = benchDrainLive(ctx, st, client, plans, customers, o, logger)
	return res, err
}

// benchLiveRes is the drain with the events arriving while the workers
// run, as in production: coalescing is only tested when a customer can be
// fetched before its burst is over.
type benchLiveRes struct {
	Events             int     `json:"events"`
	Customers          int     `json:"customers"`
	Senders            int     `json:"senders"`
	PostedVia          string  `json:"posted_via"`
	PostSeconds        float64 `json:"post_seconds"` // first post → last answer
	Seconds            float64 `json:"seconds"`      // first post → queue empty
	Fetches            int64   `json:"fetches"`
	CustomersFetched   int     `json:"customers_fetched"`
	FetchesPerCustomer float64 `json:"fetches_per_customer"`
	Refetched          int     `json:"customers_fetched_more_than_once"`
	EventsPending      int     `json:"events_pending"`
}

// benchDrainLive posts one burst per customer (its events back to back)
// through the HTTP intake while the workers reconcile; it counts the
// fetches until the queue is empty.
func benchDrainLive(ctx context.Context, st *store.Store, client reconcile.Provider, plans *reconcile.Plans, customers []string, o benchOptions, logger *slog.Logger) (benchLiveRes, error) {
	senders := slices.Max(o.Senders)
	res := benchLiveRes{Events: o.DrainEvents, Customers: len(customers), Senders: senders,
		PostedVia: "HTTP intake (signed deliveries)"}
	verifier, err := stripe.NewVerifier([]string{benchSecret}, 0)
	if err != nil {
		return res, err
	}
	post, stopHTTP, err := benchHTTPIntake(st, verifier)
	if err != nil {
		return res, err
	}
	defer stopHTTP()
	plan := make([]benchDelivery, 0, o.DrainEvents)
	now := time.Now()
	for c, cust := range customers {
		n := o.DrainEvents / len(customers)
		if c < o.DrainEvents%len(customers) {
			n++
		}
		for range n {
			body := benchEventBody(fmt.Sprintf("evt_live_%06d", len(plan)), cust, len(plan))
			header := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: benchSecret, Timestamp: now}).Header
			plan = append(plan, benchDelivery{body: body, header: header})
		}
	}

	provider := &benchCountingProvider{Provider: client, fetches: map[string]int{}}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	worker, err := reconcile.NewWorker(reconcile.WorkerConfig{
		Name: "bench-live", Store: st, Providers: []reconcile.Provider{provider}, Plans: plans,
		Logger: quiet, Concurrency: o.Workers, Batch: o.Batch,
	})
	if err != nil {
		return benchLiveRes{}, err
	}
	runCtx, stopWorkers := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); worker.Run(runCtx) }()
	defer func() { stopWorkers(); wg.Wait() }()

	// Each stored delivery wakes the idle loops at once, as serve's NOTIFY
	// listener would a moment later.
	postAndWake := func(ctx context.Context, d benchDelivery) error {
		err := post(ctx, d)
		worker.Wake()
		return err
	}
	start := time.Now()
	if _, _, err := benchSend(ctx, senders, len(plan), func(ctx context.Context, i int) error { return postAndWake(ctx, plan[i]) }); err != nil {
		return res, fmt.Errorf("drain (live): %w", err)
	}
	res.PostSeconds = benchRound(time.Since(start).Seconds(), 2)
	expected := time.Duration(2 * float64(len(customers)) / o.RateLimit * float64(time.Second))
	took, err := benchWaitEmpty(ctx, st, start, time.Minute+10*expected)
	if err != nil {
		return res, fmt.Errorf("drain (live): %w", err)
	}
	stopWorkers()
	wg.Wait()
	res.Seconds = benchRound(took.Seconds(), 3)
	res.Fetches, res.CustomersFetched = provider.counts()
	res.FetchesPerCustomer = benchRound(float64(res.Fetches)/float64(len(customers)), 3)
	for _, n := range provider.fetchCounts() {
		if n > 1 {
			res.Refetched++
		}
	}
	stats, err := st.Stats(ctx)
	if err != nil {
		return res, err
	}
	res.EventsPending = stats.Pending
	if stats.Pending > 0 {
		return res, fmt.Errorf("drain (live): queue empty but %d events still pending", stats.Pending)
	}
	logger.Info("bench drain (live): queue empty", slog.Float64("seconds", res.Seconds), slog.Int64("fetches", res.Fetches))
	return res, nil
}

// benchWaitEmpty polls the queue until its last row is gone and returns
// the time since start.
func benchWaitEmpty(ctx context.Context, st *store.Store, start time.Time, limit time.Duration) (time.Duration, error) {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	for {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-deadline.C:
			return 0, fmt.Errorf("drain: the queue was not empty after %s", limit)
		case <-tick.C:
			depth, err := st.QueueDepth(ctx)
			if err != nil {
				return 0, err
			}
			if depth.Pending+depth.Dead == 0 {
				return time.Since(start), nil
			}
		}
	}
}

// benchSeed creates n customers, each with a subscription to pro or team,
// through the fake's REST API (form-encoded, as stripe-go sends them).
func benchSeed(ctx context.Context, fakeURL string, n int) ([]string, error) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}, Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	call := func(path string, form url.Values) (string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, fakeURL+path, strings.NewReader(form.Encode()))
		if err != nil {
			return "", err
		}
		req.Header.Set("Authorization", "Bearer "+stripemock.DefaultAPIKey)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := client.Do(req)
		if err != nil {
			return "", fmt.Errorf("seed fake: POST %s: %w", path, err)
		}
		defer resp.Body.Close()
		var out struct {
			ID string `json:"id"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK || out.ID == "" {
			return "", fmt.Errorf("seed fake: POST %s: status %d", path, resp.StatusCode)
		}
		return out.ID, nil
	}
	customers := make([]string, n)
	_, _, err := benchSend(ctx, 8, n, func(ctx context.Context, i int) error {
		id, err := call("/v1/customers", url.Values{"metadata[user_id]": {fmt.Sprintf("user_%05d", i)}})
		if err != nil {
			return err
		}
		price := "price_pro"
		if i%3 == 2 {
			price = "price_team"
		}
		if _, err := call("/v1/subscriptions", url.Values{"customer": {id}, "items[0][price]": {price}}); err != nil {
			return err
		}
		customers[i] = id
		return nil
	})
	return customers, err
}

// benchCountingHandler counts the fake's API requests, its 429 answers and
// the connections clients open to it.
type benchCountingHandler struct {
	next                     http.Handler
	requests, limited, conns atomic.Int64
}

func (h *benchCountingHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !strings.HasPrefix(r.URL.Path, "/v1/") {
		h.next.ServeHTTP(w, r)
		return
	}
	sw := &benchStatusWriter{ResponseWriter: w, status: http.StatusOK}
	h.next.ServeHTTP(sw, r)
	h.requests.Add(1)
	if sw.status == http.StatusTooManyRequests {
		h.limited.Add(1)
	}
}

func (h *benchCountingHandler) connState(_ net.Conn, s http.ConnState) {
	if s == http.StateNew {
		h.conns.Add(1)
	}
}

type benchStatusWriter struct {
	http.ResponseWriter
	status int
}

func (w *benchStatusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

// benchCountingProvider counts Fetch calls per customer.
type benchCountingProvider struct {
	reconcile.Provider
	mu      sync.Mutex
	fetches map[string]int
}

func (p *benchCountingProvider) Fetch(ctx context.Context, customerID string) (reconcile.Snapshot, error) {
	p.mu.Lock()
	p.fetches[customerID]++
	p.mu.Unlock()
	return p.Provider.Fetch(ctx, customerID)
}

func (p *benchCountingProvider) fetchCounts() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.fetches)
}

func (p *benchCountingProvider) counts() (fetches int64, customers int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, n := range p.fetches {
		fetches += int64(n)
	}
	return fetches, len(p.fetches)
}

func benchRound(v float64, places int) float64 {
	p := math.Pow(10, float64(places))
	return math.Round(v*p) / p
}
