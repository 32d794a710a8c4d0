package bench

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	stripemock "github.com/billsync/billsync/mocks/stripe"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store"
)

// LatencyResult is the time from a webhook's delivery to its customer's
// account applied, under a steady load of deliveries below the rate limit
// (half of it, each about another customer), with serve's defaults; and
// the same load, in the same run, against the baseline's bound.
type LatencyResult struct {
	LatencyMs  float64 `json:"provider_latency_ms"`
	RateLimit  float64 `json:"rate_limit_per_sec"` // what the read operations allow (Config.allowed)
	LoadPerSec float64 `json:"load_per_sec"`
	Seconds    float64 `json:"load_seconds"`
	Customers  int     `json:"customers"`
	Measured   Applied `json:"measured"`
	// Baseline is the same load with at most BaselineWorkers in flight
	// (serve's old fixed loops); nil when skipped.
	Baseline *Applied `json:"baseline,omitempty"`
}

// Applied is webhook → applied latency: from the post of a delivery to
// the commit of the reconcile that answered it.
type Applied struct {
	Workers int     `json:"workers"`
	Events  int     `json:"events"`
	P50Ms   float64 `json:"p50_ms"`
	P99Ms   float64 `json:"p99_ms"`
	MaxMs   float64 `json:"max_ms"`
}

// runLatency posts deliveries through the HTTP intake at half the rate
// limit for cfg.LoadFor while the worker runs (woken after each, as
// serve's NOTIFY listener would), and times each to its reconcile.
func runLatency(ctx context.Context, st *store.Store, cfg Config) (LatencyResult, error) {
	res := LatencyResult{LatencyMs: float64(cfg.Latency) / float64(time.Millisecond), RateLimit: cfg.allowed(),
		LoadPerSec: cfg.allowed() / 2, Seconds: cfg.LoadFor.Seconds(), Customers: cfg.Customers}
	d, err := newDrain(ctx, st, cfg)
	if err != nil {
		return res, err
	}
	defer d.h.Close()
	if err := d.meter(cfg, stripemock.Faults{DropRate: 1, Latency: cfg.Latency}); err != nil {
		return res, err
	}
	if res.Measured, err = d.steady(ctx, cfg, cfg.Workers, "measured"); err != nil {
		return res, err
	}
	if cfg.BaselineWorkers > 0 {
		base, err := d.steady(ctx, cfg, cfg.BaselineWorkers, "baseline")
		if err != nil {
			return res, err
		}
		res.Baseline = &base
	}
	return res, nil
}

// steady runs one steady load against a worker bounded at workers.
func (d *drain) steady(ctx context.Context, cfg Config, workers int, name string) (Applied, error) {
	res := Applied{Workers: workers}
	var mu sync.Mutex
	pending := map[string][]time.Time{} // when each delivery's post began, by customer
	var took []time.Duration
	// A reconcile answers the deliveries posted before it began: one
	// stored later is answered by the next (its queue row stays due). One
	// whose post began just before a reconcile of an earlier delivery of
	// its customer, and was stored during its fetch, would be counted
	// answered early: each customer's deliveries are len(customers) ÷
	// load seconds apart, so that takes a reconcile slower than that.
	onOutcome := func(job reconcile.Job, out reconcile.Outcome) {
		if out.Result == reconcile.ResultRetry {
			return
		}
		now := time.Now()
		// The reconcile's database time, when it has one: a claimed job
		// takes it before it waits for a fetch slot, and a delivery stored
		// before it is answered by this reconcile (its queue row goes).
		began := now.Add(-out.Took)
		if t := out.After.ObservedAt; t.After(began) {
			began = t
		}
		mu.Lock()
		defer mu.Unlock()
		kept := pending[job.CustomerID][:0]
		for _, sent := range pending[job.CustomerID] {
			if sent.Before(began) {
				took = append(took, now.Sub(sent))
			} else {
				kept = append(kept, sent)
			}
		}
		pending[job.CustomerID] = kept
	}
	cfg.Workers = workers
	worker, err := d.worker(cfg, d.h.Stripe.Client, onOutcome)
	if err != nil {
		return res, err
	}
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { worker.Run(runCtx) })
	defer func() { stop(); wg.Wait() }()

	poster := newPoster(d.h.IntakeURL)
	defer poster.close()
	n := int(cfg.LoadFor.Seconds() * cfg.allowed() / 2)
	tick := time.NewTicker(time.Duration(float64(time.Second) / (cfg.allowed() / 2)))
	defer tick.Stop()
	errs := make(chan error, n)
	var posts sync.WaitGroup
	for i := range n {
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-tick.C:
		}
		c := i % len(d.customers)
		posts.Go(func() {
			body := eventBody(fmt.Sprintf("evt_%s_%06d", name, i), d.subjects[c], i)
			sent := time.Now()
			mu.Lock()
			pending[d.customers[c]] = append(pending[d.customers[c]], sent)
			mu.Unlock()
			if err := poster.post(ctx, body, sign(body, d.h.Stripe.Secret, sent)); err != nil {
				errs <- err
				return
			}
			worker.Wake()
		})
	}
	posts.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return res, fmt.Errorf("latency (%s): %w", name, err)
	}
	if _, err := d.waitEmpty(ctx, time.Now(), cfg); err != nil {
		return res, fmt.Errorf("latency (%s): %w", name, err)
	}
	stop()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(took) != n {
		return res, fmt.Errorf("latency (%s): %d of %d deliveries answered by a reconcile", name, len(took), n)
	}
	slices.Sort(took)
	ms := func(q float64) float64 { return round(float64(percentile(took, q))/float64(time.Millisecond), 1) }
	res.Events, res.P50Ms, res.P99Ms, res.MaxMs = n, ms(0.5), ms(0.99), ms(1)
	cfg.Logger.Info("bench latency: done", slog.String("run", name), slog.Float64("p99_ms", res.P99Ms))
	return res, nil
}
