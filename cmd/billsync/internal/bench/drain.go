package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	stripeapi "github.com/stripe/stripe-go/v82"

	stripemock "github.com/billsync/billsync/mocks/stripe"
	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/providers/stripe"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store"
	"github.com/billsync/billsync/store/scratch"
)

// DrainResult is the worker draining a burst stored before it starts.
type DrainResult struct {
	Events            int     `json:"events"`
	Customers         int     `json:"customers"`
	StoredVia         string  `json:"stored_via"`
	LatencyMs         float64 `json:"provider_latency_ms"`
	RateLimit         float64 `json:"rate_limit_per_sec"`     // the global rate
	OperationRate     float64 `json:"operation_rate_per_sec"` // each operation's
	Allowed           float64 `json:"allowed_per_sec"`        // the read operations' rates together, within the global one
	Workers           int     `json:"workers"`
	Batch             int     `json:"batch"`
	SeedSeconds       float64 `json:"seed_seconds"`
	StoreSeconds      float64 `json:"store_seconds"`
	Seconds           float64 `json:"seconds"` // workers start → queue empty
	APIRequests       int64   `json:"api_requests"`
	APIRequestsPerSec float64 `json:"api_requests_per_sec"`
	LimitShare        float64 `json:"limit_share"` // APIRequestsPerSec / Allowed
	// Operations are the drain's requests by API operation, counted at the
	// fake, 429s included; LimitedPer1000 is its 429 answers per 1,000
	// requests, LimitedBy them by Stripe-Rate-Limited-Reason.
	Operations     map[string]int64 `json:"requests_by_operation"`
	LimitedPer1000 float64          `json:"rate_limited_per_1000"`
	LimitedBy      map[string]int64 `json:"rate_limited_by_reason,omitempty"`
	// DeepShare is the share of the limit while the queue was deep: the
	// requests over the time less one latency (the last requests' answers
	// come back a latency after they were sent, with nothing left to send).
	DeepShare float64 `json:"limit_share_queue_deep"`
	// Timeline is how many fetches ended in each second of the drain
	// (the requests sent a latency before).
	Timeline             []int          `json:"fetches_ended_per_second"`
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
	Live                 LiveResult     `json:"live"`
	// Baseline is the same drain, in the same run, by a worker bounded at
	// BaselineWorkers in flight: serve's old fixed loops.
	Baseline *DrainBaseline `json:"baseline,omitempty"`
}

// DrainBaseline is the drain's baseline: the old fixed loops.
type DrainBaseline struct {
	Workers           int     `json:"workers"`
	Seconds           float64 `json:"seconds"`
	APIRequestsPerSec float64 `json:"api_requests_per_sec"`
	LimitShare        float64 `json:"limit_share"`
}

// LiveResult is the drain with the events arriving while the workers run,
// as in production: coalescing is only tested when a customer can be
// fetched before its burst is over.
type LiveResult struct {
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

// drain is the fake Stripe (counted) with billsync wired to it, and the
// customers seeded at the fake.
type drain struct {
	st        *store.Store
	plans     *reconcile.Plans
	h         *testenv.Env
	counted   *countingHandler
	customers []string
	subjects  []subject // what each customer's events name: its subscription and price at the fake

	seedSeconds float64
}

// runDrain seeds the fake with customers and subscriptions, stores a burst
// of events for them, then times the workers until the queue is empty; then
// does it again with the burst posted through the intake while they run.
// live false skips the second part (the baseline's).
func runDrain(ctx context.Context, st *store.Store, cfg Config, live bool) (DrainResult, error) {
	res := DrainResult{
		Events: cfg.DrainEvents, Customers: cfg.Customers, StoredVia: "store.StoreReceipt (no HTTP)",
		LatencyMs: float64(cfg.Latency) / float64(time.Millisecond), RateLimit: cfg.RateLimit,
		OperationRate: cfg.OperationRate, Allowed: cfg.allowed(),
		Workers: cfg.Workers, Batch: cfg.Batch, Outcomes: map[string]int{},
	}
	d, err := newDrain(ctx, st, cfg)
	if err != nil {
		return res, err
	}
	defer d.h.Close()
	res.SeedSeconds = d.seedSeconds

	// Store the burst: event k of every customer before event k+1 of any,
	// as a burst over many customers arrives.
	t0 := time.Now()
	deliveries := make([]reconcile.Receipt, 0, cfg.DrainEvents)
	for i := range cfg.DrainEvents {
		body := eventBody(fmt.Sprintf("evt_drain_%06d", i), d.subjects[i%len(d.subjects)], i)
		deliveries = append(deliveries, reconcile.Receipt{Event: stripe.ParseEvent(body)})
	}
	if _, _, err := sendAll(ctx, time.Now, 8, len(deliveries), func(ctx context.Context, i int) error {
		_, err := st.StoreReceipt(ctx, deliveries[i])
		return err
	}); err != nil {
		return res, fmt.Errorf("store drain events: %w", err)
	}
	res.StoreSeconds = round(time.Since(t0).Seconds(), 2)
	depth, err := st.QueueDepth(ctx)
	if err != nil {
		return res, err
	}
	if queued := depth.Pending + depth.Dead; queued != len(d.customers) {
		return res, fmt.Errorf("drain: %d customers queued after storing events for %d", queued, len(d.customers))
	}
	cfg.Logger.Info("bench drain: events stored", slog.Int("events", cfg.DrainEvents), slog.Float64("seconds", res.StoreSeconds))

	// The provider as Stripe's live mode would be: every request takes the
	// latency, and the account's limits are enforced (429 over them).
	if err := d.meter(cfg, stripemock.Faults{Latency: cfg.Latency}); err != nil {
		return res, err
	}
	provider := &countingProvider{Provider: d.h.Stripe.Client, fetches: map[string]int{}}
	var outcomesMu sync.Mutex
	worker, err := d.worker(cfg, provider, func(_ reconcile.Job, out reconcile.Outcome) {
		outcomesMu.Lock()
		res.Outcomes[string(out.Result)]++
		outcomesMu.Unlock()
	})
	if err != nil {
		return res, err
	}

	reqs0, limited0, conns0 := d.counted.requests.Load(), d.counted.limited.Load(), d.counted.conns.Load()
	runCtx, stopWorkers := context.WithCancel(ctx)
	done := make(chan struct{})
	start := time.Now()
	go func() { defer close(done); worker.Run(runCtx) }()
	took, err := d.waitEmpty(ctx, start, cfg)
	stopWorkers()
	<-done
	if err != nil {
		return res, err
	}
	// The queue is empty, so every fetch has finished: what the fake
	// counted so far is the drain's.
	reqs, limited, conns := d.counted.requests.Load()-reqs0, d.counted.limited.Load()-limited0, d.counted.conns.Load()-conns0

	stats, err := scratch.ReadStats(ctx, st)
	if err != nil {
		return res, err
	}
	res.Seconds = round(took.Seconds(), 3)
	res.APIRequests, res.RateLimited, res.Connections = reqs, limited, conns
	res.APIRequestsPerSec = round(float64(reqs)/took.Seconds(), 1)
	res.LimitShare = round(float64(reqs)/took.Seconds()/res.Allowed, 4)
	if deep := took - cfg.Latency; deep > 0 {
		res.DeepShare = round(float64(reqs)/deep.Seconds()/res.Allowed, 4)
	}
	res.Operations, res.LimitedBy = byOperation(d.h.Stripe.Fake.Usage())
	if reqs > 0 {
		res.LimitedPer1000 = round(float64(limited)*1000/float64(reqs), 2)
	}
	res.Reconciles = stats.Reconciles
	res.ReconcilesPerSec = round(float64(stats.Reconciles)/took.Seconds(), 1)
	if stats.Reconciles > 0 {
		res.RequestsPerReconcile = round(float64(reqs)/float64(stats.Reconciles), 2)
		res.MaxReconcilesPerSec = round(res.Allowed/res.RequestsPerReconcile, 1)
	}
	res.Fetches, res.CustomersFetched = provider.counts()
	res.Timeline = provider.timeline(start)
	res.FetchesPerCustomer = round(float64(res.Fetches)/float64(len(d.customers)), 3)
	res.EventsApplied, res.EventsPending = stats.Applied, stats.Pending
	res.EventsOther = stats.Ignored + stats.Dead
	if stats.Pending > 0 || stats.Events != cfg.DrainEvents {
		return res, fmt.Errorf("drain: queue empty but %d of %d stored events (of %d sent) still pending", stats.Pending, stats.Events, cfg.DrainEvents)
	}
	cfg.Logger.Info("bench drain: queue empty", slog.Float64("seconds", res.Seconds), slog.Int64("api_requests", reqs))

	if live {
		res.Live, err = d.live(ctx, cfg)
	}
	return res, err
}

func (d *drain) worker(cfg Config, provider reconcile.Provider, onOutcome func(reconcile.Job, reconcile.Outcome)) (*reconcile.Worker, error) {
	return reconcile.NewWorker(reconcile.WorkerConfig{
		Name: "bench", Store: d.st, Providers: []reconcile.Provider{provider}, Plans: d.plans,
		Logger:      slog.New(slog.NewTextHandler(io.Discard, nil)), // as in production, minus the output
		Concurrency: cfg.Workers, Batch: cfg.Batch, OnOutcome: onOutcome,
	})
}

// live posts one burst per customer (its events back to back) through the
// HTTP intake while the workers reconcile; it counts the fetches until the
// queue is empty.
func (d *drain) live(ctx context.Context, cfg Config) (LiveResult, error) {
	senders := slices.Max(cfg.Senders)
	res := LiveResult{Events: cfg.DrainEvents, Customers: len(d.customers), Senders: senders,
		PostedVia: "HTTP intake (signed deliveries)"}
	poster := newPoster(d.h.IntakeURL)
	defer poster.close()
	plan := make([]delivery, 0, cfg.DrainEvents)
	now := time.Now()
	for c := range d.customers {
		n := cfg.DrainEvents / len(d.customers)
		if c < cfg.DrainEvents%len(d.customers) {
			n++
		}
		for range n {
			body := eventBody(fmt.Sprintf("evt_live_%06d", len(plan)), d.subjects[c], len(plan))
			plan = append(plan, delivery{body: body, header: sign(body, d.h.Stripe.Secret, now)})
		}
	}

	provider := &countingProvider{Provider: d.h.Stripe.Client, fetches: map[string]int{}}
	worker, err := d.worker(cfg, provider, nil)
	if err != nil {
		return res, err
	}
	runCtx, stopWorkers := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { worker.Run(runCtx) })
	defer func() { stopWorkers(); wg.Wait() }()

	start := time.Now()
	// Each stored delivery wakes the idle loops at once, as serve's NOTIFY
	// listener would a moment later.
	if _, _, err := sendAll(ctx, time.Now, senders, len(plan), func(ctx context.Context, i int) error {
		err := poster.post(ctx, plan[i].body, plan[i].header)
		worker.Wake()
		return err
	}); err != nil {
		return res, fmt.Errorf("drain (live): %w", err)
	}
	res.PostSeconds = round(time.Since(start).Seconds(), 2)
	took, err := d.waitEmpty(ctx, start, cfg)
	if err != nil {
		return res, fmt.Errorf("drain (live): %w", err)
	}
	stopWorkers()
	wg.Wait()
	res.Seconds = round(took.Seconds(), 3)
	res.Fetches, res.CustomersFetched = provider.counts()
	res.FetchesPerCustomer = round(float64(res.Fetches)/float64(len(d.customers)), 3)
	for _, n := range provider.fetchCounts() {
		if n > 1 {
			res.Refetched++
		}
	}
	stats, err := scratch.ReadStats(ctx, d.st)
	if err != nil {
		return res, err
	}
	res.EventsPending = stats.Pending
	if stats.Pending > 0 {
		return res, fmt.Errorf("drain (live): queue empty but %d events still pending", stats.Pending)
	}
	cfg.Logger.Info("bench drain (live): queue empty", slog.Float64("seconds", res.Seconds), slog.Int64("fetches", res.Fetches))
	return res, nil
}

// waitEmpty polls the queue until its last row is gone and returns the time
// since start. At the limit a drain needs requests/limit seconds; ten times
// that (plus a minute) means it is broken, not slow.
func (d *drain) waitEmpty(ctx context.Context, start time.Time, cfg Config) (time.Duration, error) {
	limit := time.Minute + 10*time.Duration(2*float64(len(d.customers))/cfg.allowed()*float64(time.Second))
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
			depth, err := d.st.QueueDepth(ctx)
			if err != nil {
				return 0, err
			}
			if depth.Pending+depth.Dead == 0 {
				return time.Since(start), nil
			}
		}
	}
}

// newDrain starts the fake Stripe (counted, its own webhooks dropped)
// with billsync wired to it at cfg's rate, and seeds cfg.Customers
// customers there. The caller closes d.h.
func newDrain(ctx context.Context, st *store.Store, cfg Config) (*drain, error) {
	d := &drain{st: st, plans: testenv.Plans(), counted: &countingHandler{}}
	var err error
	d.h, err = testenv.New(testenv.Stripe, testenv.Options{
		Store: st, Wrap: d.counted.wrap, ConnState: d.counted.connState,
		Stripe: testenv.StripeOptions{
			// The fake's own webhooks are not the load: seeding sends none.
			Fake: stripemock.Options{APIKey: benchKey, Faults: stripemock.Faults{DropRate: 1}},
			// billsync's client as serve runs it, at the bench's rates.
			Client: cfg.client(),
		},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	if err := d.seed(ctx, cfg.Customers); err != nil {
		d.h.Close()
		return nil, err
	}
	d.seedSeconds = round(time.Since(t0).Seconds(), 2)
	cfg.Logger.Info("bench: fake seeded", slog.Int("customers", len(d.customers)), slog.Float64("seconds", d.seedSeconds))
	return d, nil
}

// meter has the fake enforce the run's limits, with faults, and starts
// counting its requests again.
func (d *drain) meter(cfg Config, faults stripemock.Faults) error {
	d.h.Stripe.Fake.SetFaults(faults)
	if err := d.h.Stripe.Fake.SetLimits(cfg.limits()); err != nil {
		return err
	}
	d.h.Stripe.Fake.ResetUsage()
	return nil
}

// byOperation returns the requests the fake counted by operation and its
// 429s by reason.
func byOperation(u stripemock.Usage) (requests, limited map[string]int64) {
	requests = map[string]int64{}
	for op, ou := range u.Operations {
		requests[op] = ou.Requests
		for reason, n := range ou.RateLimited {
			if limited == nil {
				limited = map[string]int64{}
			}
			limited[reason] += n
		}
	}
	return requests, limited
}

// seed creates n customers at the fake for the drain.
func (d *drain) seed(ctx context.Context, n int) error {
	seeded, err := seedCustomers(ctx, d.h, n, nil)
	d.customers = make([]string, len(seeded))
	d.subjects = make([]subject, len(seeded))
	for i, c := range seeded {
		d.customers[i] = c.id
		if c.sub != nil {
			d.subjects[i] = subject{customer: c.id, subscription: c.sub.ID, price: c.price}
		}
	}
	return err
}

// seededCustomer is one customer the bench created at the fake.
type seededCustomer struct {
	id    string
	price string
	sub   *stripeapi.Subscription
}

// seedCustomers creates n customers at the fake, each with a subscription
// to pro or team (every third), through stripe-go as the app would; after
// each, seeded (when set) is told its number.
func seedCustomers(ctx context.Context, h *testenv.Env, n int, seeded func(i int)) ([]seededCustomer, error) {
	customers := make([]seededCustomer, n)
	_, _, err := sendAll(ctx, time.Now, 8, n, func(ctx context.Context, i int) error {
		if seeded != nil {
			defer seeded(i)
		}
		id, err := h.Stripe.Customer(ctx, fmt.Sprintf("user_%06d", i))
		if err != nil {
			return fmt.Errorf("seed fake: %w", err)
		}
		price := "price_pro"
		if i%3 == 2 {
			price = "price_team"
		}
		sub, err := h.Stripe.Subscribe(ctx, id, price)
		if err != nil {
			return fmt.Errorf("seed fake: %w", err)
		}
		customers[i] = seededCustomer{id: id, price: price, sub: bare(sub)}
		return nil
	})
	return customers, err
}

// bare keeps of a subscription what the bench uses (its id and first
// item's): stripe-go's struct also holds its raw JSON, and a hundred
// thousand of them would make the bench process's heap, and the GC work
// that shares the cores with what is measured, a third larger.
func bare(sub *stripeapi.Subscription) *stripeapi.Subscription {
	b := &stripeapi.Subscription{ID: sub.ID}
	if sub.Items != nil && len(sub.Items.Data) > 0 {
		b.Items = &stripeapi.SubscriptionItemList{Data: []*stripeapi.SubscriptionItem{{ID: sub.Items.Data[0].ID}}}
	}
	return b
}

// countingHandler counts the fake's API requests, its 429 answers and the
// connections clients open to it.
type countingHandler struct {
	next                     http.Handler
	requests, limited, conns atomic.Int64

	mu       sync.Mutex
	since    time.Time // zero: no timeline kept
	answered []int     // requests answered in each second after since
}

// mark starts a timeline of the requests answered each second from now;
// timeline returns it.
func (h *countingHandler) mark() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.since, h.answered = time.Now(), nil
}

func (h *countingHandler) timeline() []int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.answered)
}

func (h *countingHandler) wrap(next http.Handler) http.Handler {
	h.next = next
	return h
}

func (h *countingHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !strings.HasPrefix(r.URL.Path, "/v1/") {
		h.next.ServeHTTP(w, r)
		return
	}
	status := testenv.AnswerStatus(h.next, w, r)
	h.requests.Add(1)
	h.mu.Lock()
	if !h.since.IsZero() {
		sec := int(time.Since(h.since) / time.Second)
		for len(h.answered) <= sec {
			h.answered = append(h.answered, 0)
		}
		h.answered[sec]++
	}
	h.mu.Unlock()
	if status == http.StatusTooManyRequests {
		h.limited.Add(1)
	}
}

func (h *countingHandler) connState(_ net.Conn, s http.ConnState) {
	if s == http.StateNew {
		h.conns.Add(1)
	}
}

// countingProvider counts Fetch calls per customer.
type countingProvider struct {
	reconcile.Provider
	mu      sync.Mutex
	fetches map[string]int
	ended   []time.Time // when each fetch ended
}

func (p *countingProvider) Fetch(ctx context.Context, customerID string) (reconcile.Snapshot, error) {
	p.mu.Lock()
	p.fetches[customerID]++
	p.mu.Unlock()
	snap, err := p.Provider.Fetch(ctx, customerID)
	p.mu.Lock()
	p.ended = append(p.ended, time.Now())
	p.mu.Unlock()
	return snap, err
}

// timeline returns how many fetches ended in each second after start.
func (p *countingProvider) timeline(start time.Time) []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []int
	for _, t := range p.ended {
		sec := int(t.Sub(start) / time.Second)
		for len(out) <= sec {
			out = append(out, 0)
		}
		out[sec]++
	}
	return out
}

func (p *countingProvider) fetchCounts() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.fetches)
}

func (p *countingProvider) counts() (fetches int64, customers int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, n := range p.fetches {
		fetches += int64(n)
	}
	return fetches, len(p.fetches)
}
