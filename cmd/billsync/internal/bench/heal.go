package bench

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	stripeapi "github.com/stripe/stripe-go/v82"

	stripemock "github.com/billsync/billsync/mocks/stripe"
	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/providers/stripe"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store"
)

// The heal part: how long a plan change at Stripe takes to reach its
// account when every webhook is lost, the events feed being the only
// signal, against the same changes delivered by webhook in the same run.
// The feed runs as serve runs it on an account at the read allocation's
// floor (no transactions: 10,000 reads a month), its time scaled down.
const (
	// HealPollScale divides the feed's times for the bench (its fastest
	// interval, 1 min; its endpoint reads, every 6 h) and multiplies the
	// allocation: the interval its budget gives, 18m10s at the floor,
	// becomes 11 s, so a run takes seconds, not hours. The target scales
	// with it: one budget interval + TargetHealSlack.
	HealPollScale   = 100
	TargetHealSlack = 5 * time.Second
	healChanges     = 40
	healCustomers   = 20
	healSpacing     = 150 * time.Millisecond // between two changes at the fake
)

// HealResult is the time from a change at the fake to its applied
// account: by webhook (the baseline), and by the events feed alone.
type HealResult struct {
	Changes   int     `json:"changes"`
	LatencyMs float64 `json:"provider_latency_ms"`
	// Allocation is the account's read allocation (reads per 30 days);
	// PollMs the interval its budget gives the bench's scaled feed, and
	// BudgetPollMs the same unscaled: what an account at that allocation
	// waits, at most, before the feed looks.
	Allocation   float64 `json:"read_allocation"`
	PollMs       float64 `json:"poll_interval_ms"`
	BudgetPollMs float64 `json:"budget_interval_ms"`
	Scale        int     `json:"scale"` // the feed's times ÷ it, its allocation × it
	Workers      int     `json:"workers"`
	Webhook      Percent `json:"webhook"`
	Feed         Percent `json:"feed"`
	FeedCaught   int64   `json:"feed_caught"`
}

// Percent is p50, p99 and max of a set of durations, in milliseconds.
type Percent struct {
	P50Ms float64 `json:"p50_ms"`
	P99Ms float64 `json:"p99_ms"`
	MaxMs float64 `json:"max_ms"`
}

func percentOf(d []time.Duration) Percent {
	slices.Sort(d)
	ms := func(v time.Duration) float64 { return round(float64(v)/float64(time.Millisecond), 1) }
	return Percent{P50Ms: ms(percentile(d, 0.5)), P99Ms: ms(percentile(d, 0.99)), MaxMs: ms(percentile(d, 1))}
}

// runHeal seeds customers on Pro at the fake, then changes their plans
// one by one and times each change until its account shows it: first
// with webhooks delivered (the feed running too, as serve runs it), then
// with every webhook dropped.
func runHeal(ctx context.Context, st *store.Store, cfg Config) (HealResult, error) {
	workers := 8 // serve's default -workers
	res := HealResult{Changes: healChanges, LatencyMs: float64(cfg.Latency) / float64(time.Millisecond), Workers: workers}
	h, err := meteredFake(st, cfg)
	if err != nil {
		return res, err
	}
	defer h.Close()
	discard := slog.New(slog.DiscardHandler)
	worker, err := h.Worker(reconcile.WorkerConfig{Name: "bench-heal", Concurrency: workers, Logger: discard})
	if err != nil {
		return res, err
	}
	res.Allocation = h.Stripe.Client.Allocation(0)
	res.Scale = cfg.HealScale
	feed, err := newServeFeed(h, st, cfg.HealScale)
	if err != nil {
		return res, err
	}
	unscaled, err := newServeFeed(h, st, 1)
	if err != nil {
		return res, err
	}
	res.PollMs = ms(feed.BudgetInterval())
	res.BudgetPollMs = ms(unscaled.BudgetInterval())
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { st.Listen(runCtx, discard, worker.Wake) })
	wg.Go(func() { worker.Run(runCtx) })
	wg.Go(func() { feed.Run(runCtx) })
	defer func() { stop(); wg.Wait() }()

	subs := make([]*stripeapi.Subscription, healCustomers)
	for i := range subs {
		cus, err := h.Stripe.Customer(ctx, fmt.Sprint("heal_", i))
		if err != nil {
			return res, err
		}
		if subs[i], err = h.Stripe.Subscribe(ctx, cus, "price_pro"); err != nil {
			return res, err
		}
	}
	if err := waitPlans(ctx, st, subs, func(int) string { return "pro" }, time.Minute); err != nil {
		return res, fmt.Errorf("heal: seeding: %w", err)
	}
	plans := make([]string, len(subs))
	for i := range plans {
		plans[i] = "pro"
	}
	if res.Webhook, err = timeChanges(ctx, h, st, subs, plans); err != nil {
		return res, fmt.Errorf("heal (webhooks): %w", err)
	}
	before, err := caught(ctx, st)
	if err != nil {
		return res, err
	}
	h.SetFaults(stripemock.Faults{Latency: cfg.Latency, DropRate: 1})
	if res.Feed, err = timeChanges(ctx, h, st, subs, plans); err != nil {
		return res, fmt.Errorf("heal (feed alone): %w", err)
	}
	after, err := caught(ctx, st)
	res.FeedCaught = after - before
	return res, err
}

// meteredFake starts the fake Stripe with the run's latency and limits,
// billsync wired to it as serve runs it (the intake registered, the
// client at the run's rates). The caller closes it.
func meteredFake(st *store.Store, cfg Config) (*testenv.Env, error) {
	h, err := testenv.New(testenv.Stripe, testenv.Options{
		Store: st,
		Stripe: testenv.StripeOptions{
			Fake:   stripemock.Options{APIKey: benchKey, Faults: stripemock.Faults{Latency: cfg.Latency}},
			Client: cfg.client(),
		},
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return nil, err
	}
	if err := h.Stripe.Fake.SetLimits(cfg.limits()); err != nil {
		h.Close()
		return nil, err
	}
	return h, nil
}

// newServeFeed is the events feed as serve builds it on an account with
// no transactions (the allocation's floor), its times divided by scale
// and its allocation multiplied by it.
func newServeFeed(h *testenv.Env, st *store.Store, scale int) (*reconcile.EventsFeed, error) {
	return reconcile.NewEventsFeed(reconcile.EventsFeedConfig{Provider: stripe.Provider, Source: h.Stripe.Client, Store: st,
		Endpoint:      stripe.Endpoint{Client: h.Stripe.Client},
		Allocation:    func() float64 { return h.Stripe.Client.Allocation(0) * float64(scale) },
		Interval:      reconcile.DefaultFeedInterval / time.Duration(scale),
		EndpointEvery: reconcile.DefaultEndpointEvery / time.Duration(scale),
		Logger:        slog.New(slog.DiscardHandler)})
}

func ms(d time.Duration) float64 { return round(float64(d)/float64(time.Millisecond), 1) }

func caught(ctx context.Context, st *store.Store) (int64, error) {
	s, err := st.EventsFeedState(ctx, stripe.Provider)
	return s.Caught, err
}

// timeChanges makes healChanges plan changes at the fake, healSpacing
// apart, each on the next customer (pro ↔ team), and returns how long
// each took to show in its account (checked every 20 ms).
func timeChanges(ctx context.Context, h *testenv.Env, st *store.Store, subs []*stripeapi.Subscription, plans []string) (Percent, error) {
	type change struct {
		customer, plan string
		at             time.Time
	}
	var mu sync.Mutex
	var waiting []change
	var took []time.Duration
	done := make(chan error, 1)
	go func() {
		deadline := time.Now().Add(healChanges*healSpacing + 2*time.Minute)
		for {
			mu.Lock()
			left := slices.Clone(waiting)
			mu.Unlock()
			for _, c := range left {
				a, err := st.Account(ctx, stripe.Provider, c.customer)
				if err == nil && a.Plan == c.plan {
					d := time.Since(c.at)
					mu.Lock()
					waiting = slices.DeleteFunc(waiting, func(w change) bool { return w == c })
					took = append(took, d)
					mu.Unlock()
				}
			}
			mu.Lock()
			finished := len(took) == healChanges
			mu.Unlock()
			if finished {
				done <- nil
				return
			}
			if time.Now().After(deadline) {
				done <- fmt.Errorf("%d of %d changes never reached their account", healChanges-len(took), healChanges)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	for i := range healChanges {
		c := i % len(subs)
		next, price := "team", "price_team"
		if plans[c] == "team" {
			next, price = "pro", "price_pro"
		}
		// A customer's next change waits for its last one to be applied:
		// each timing is one change's.
		for {
			mu.Lock()
			busy := slices.ContainsFunc(waiting, func(w change) bool { return w.customer == subs[c].Customer.ID })
			mu.Unlock()
			if !busy {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		at := time.Now()
		if err := h.Stripe.ChangePrice(ctx, subs[c], price); err != nil {
			return Percent{}, err
		}
		plans[c] = next
		mu.Lock()
		waiting = append(waiting, change{customer: subs[c].Customer.ID, plan: next, at: at})
		mu.Unlock()
		time.Sleep(healSpacing)
	}
	if err := <-done; err != nil {
		return Percent{}, err
	}
	return percentOf(took), nil
}

// waitPlans waits until every subscription's customer has its plan.
func waitPlans(ctx context.Context, st *store.Store, subs []*stripeapi.Subscription, plan func(int) string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for i := 0; i < len(subs); {
		a, err := st.Account(ctx, stripe.Provider, subs[i].Customer.ID)
		if err == nil && a.Plan == plan(i) {
			i++
			continue
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("customer %s never reached plan %s", subs[i].Customer.ID, plan(i))
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}
