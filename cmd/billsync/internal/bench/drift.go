package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	stripemock "github.com/billsync/billsync/mocks/stripe"
	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/providers/stripe"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store"
)

// The drift part (issue 28, "Measured"): how long a silent drift (a
// customer's subscription changed at Stripe with no webhook and no event
// listed: the fake failed to create its events) stays wrong, by the
// nightly sweep alone and by the correctness sample at its default share;
// and what the sample costs in reads. Run only with -only drift: the
// sample's part takes minutes of wall time.
//
// What is measured and what is computed:
//   - the sweep over 1,000 and 10,000 accounts, timed from its start to
//     each drifted account applied (measured); the wait for the next
//     nightly run is uniform over 24 h (computed: p50 12 h, p99 23.76 h);
//     100,000 accounts are projected from 10,000 (projectTo).
//   - the sample with a large account's allocation (100M reads a month,
//     20M projected for other work: 92.6 accounts a minute), its minute
//     compressed driftScale-fold (the interval ÷ it, the budget × it, so
//     a round reads what a minute's would): accounts compared and reads
//     per sampler minute, and each drift's detection in sampler minutes
//     (rounds), until healed by the worker, measured at 1,000 accounts.
//   - the sample at serve's defaults (the allocation's floor, 10,000 a
//     month: 0.0116 accounts a minute), compressed costScale-fold: its
//     reads counted at the fake per sampler minute (measured), its
//     detection computed from that rate.
const (
	driftChanges = 20 // silent changes per measurement
	// driftFor bounds the sample's detection run (wall time), by default
	// (Config.DriftFor); the defaults' cost is counted over a fifth of it.
	driftFor = 100 * time.Second
	// costScale compresses serve's default sample: a minute in 6 ms.
	costScale = 10000
	// largeAllocation and largeProjected are docs/correctness.md's large
	// account: 500 reads × 200,000 transactions, 20M of them other work.
	largeAllocation = 100e6
	largeProjected  = 20e6
	// nightlyWaitP50 and nightlyWaitP99 are the wait for the next nightly
	// sweep, uniform over 24 hours.
	nightlyWaitP50 = 12 * time.Hour
	nightlyWaitP99 = time.Duration(0.99 * float64(24*time.Hour))
)

// driftSweepSizes are the accounts the sweep is measured at by default
// (Config.DriftSizes); the largest is projected to driftProjectTo, and the
// sample is measured at the first.
var driftSweepSizes = []int{1000, 10000}

const driftProjectTo = 100000

// DriftResult is the drift part at one provider latency.
type DriftResult struct {
	LatencyMs float64      `json:"provider_latency_ms"`
	Changes   int          `json:"changes"`
	Sweep     []DriftSweep `json:"sweep"`
	// Projected is the sweep of driftProjectTo accounts projected from
	// the largest measured (computed).
	Projected DriftSweep   `json:"projected"`
	Sample    DriftSample  `json:"sample"`
	Cost      DriftCost    `json:"cost"`
	Detection []DriftTable `json:"detection"` // computed, per accounts and sampler
}

// DriftSweep is a sweep over Accounts with Changes of them drifted.
type DriftSweep struct {
	Accounts int     `json:"accounts"`
	Seconds  float64 `json:"seconds"`  // the sweep's wall time
	InSweep  Percent `json:"in_sweep"` // sweep start → drifted account applied
	Healed   int     `json:"healed"`
	// P50Hours and P99Hours are the detection with the nightly wait
	// (computed: the wait's percentile + the in-sweep one).
	P50Hours float64 `json:"detect_p50_hours"`
	P99Hours float64 `json:"detect_p99_hours"`
}

// DriftSample is the sample with a large account's allocation at 1,000
// accounts, measured in compressed time.
type DriftSample struct {
	Accounts   int     `json:"accounts"`
	Share      float64 `json:"share"`
	Allocation float64 `json:"allocation"`
	Projected  float64 `json:"projected"`
	Size       float64 `json:"size_per_minute"` // SampleSize (computed)
	Scale      int     `json:"scale"`           // sampler minutes a round stands for ÷ its interval
	Minutes    int64   `json:"sampler_minutes"` // rounds run
	Seconds    float64 `json:"seconds"`         // wall time
	Compared   int64   `json:"compared"`
	// ComparedPerMinute and ReadsPerMinute are per sampler minute, over
	// the rounds finished (measured: compared accounts, and every read
	// request at the fake: the sample's, a retrieved customer or, when
	// that operation's limit is spent, a listing of its subscriptions,
	// and the worker's heals).
	ComparedPerMinute float64 `json:"compared_per_minute"`
	ReadsPerMinute    float64 `json:"reads_per_minute"`
	Detected          int     `json:"detected"`
	// Detect is change → account applied, in sampler minutes (×60,000
	// ms), over every drift: a drift not detected within the run counts
	// as later than any, so a percentile it would decide is -1 (not
	// measured). MaxMs is the latest detected.
	Detect Percent `json:"detect"`
	// ExpectedShare and ExpectedP50Min are what the rate measured
	// predicts in the bench's conditions (computed): every account was
	// changed by the import, so both halves of the sample pick alike, an
	// account each minute with probability compared ÷ accounts.
	ExpectedShare  float64 `json:"expected_detected_share"`
	ExpectedP50Min float64 `json:"expected_p50_minutes"`
}

// DriftCost is the sample at serve's defaults, counted at the fake.
type DriftCost struct {
	Share         float64 `json:"share"`
	Allocation    float64 `json:"allocation"`
	Size          float64 `json:"size_per_minute"` // SampleSize (computed)
	Minutes       int64   `json:"sampler_minutes"` // rounds run
	Reads         int64   `json:"reads"`           // counted at the fake
	ReadsPerMonth float64 `json:"reads_per_month"` // Reads over 43,200 sampler minutes
	AllocationPct float64 `json:"allocation_pct"`
}

// DriftTable is a computed detection: an account picked uniformly by half
// of the sample (the recent half favours accounts changed lately, which a
// silent drift is not), at the rate measured.
type DriftTable struct {
	Sampler    string  `json:"sampler"`
	Accounts   int     `json:"accounts"`
	PerMinute  float64 `json:"compared_per_minute"`
	MeanHours  float64 `json:"mean_hours"`
	P50Hours   float64 `json:"p50_hours"`
	P99Hours   float64 `json:"p99_hours"`
	SweepP50H  float64 `json:"sweep_p50_hours"`
	SweepP99H  float64 `json:"sweep_p99_hours"`
	MeasuredAt string  `json:"measured_at,omitempty"`
}

// runDriftSize measures the sweep at n accounts (in st, a database of its
// own); with sample set, the sample on the same accounts too.
func runDriftSize(ctx context.Context, st *store.Store, cfg Config, n int, sample bool, res *DriftResult) error {
	res.LatencyMs, res.Changes = ms(cfg.Latency), driftChanges
	sw, err := driftSweep(ctx, st, cfg, n, sample, res)
	if err != nil {
		return err
	}
	res.Sweep = append(res.Sweep, sw)
	return nil
}

// finish projects the sweep of driftProjectTo accounts from the largest
// measured and computes the detection table.
func (r *DriftResult) finish() {
	if len(r.Sweep) == 0 {
		return
	}
	last := r.Sweep[len(r.Sweep)-1]
	r.Projected = DriftSweep{Accounts: driftProjectTo,
		Seconds: round(last.Seconds*driftProjectTo/float64(last.Accounts), 1)}
	// Healed uniformly during the listing: half of it, and 99% of it.
	r.Projected.InSweep = Percent{P50Ms: r.Projected.Seconds * 500, P99Ms: r.Projected.Seconds * 990, MaxMs: r.Projected.Seconds * 1000}
	r.Projected.P50Hours, r.Projected.P99Hours = nightly(r.Projected.InSweep)
	r.Detection = detectionTable(*r)
}

// nightly adds the wait for the next nightly sweep to in-sweep times.
func nightly(in Percent) (p50, p99 float64) {
	h := func(ms float64) float64 { return ms / 3.6e6 }
	return round(nightlyWaitP50.Hours()+h(in.P50Ms), 2), round(nightlyWaitP99.Hours()+h(in.P99Ms), 2)
}

// driftSweep seeds n customers, imports them, changes driftChanges of them
// silently and times the sweep that heals them; with sample set, it then
// measures the sample on the same accounts (res.Sample, res.Cost).
func driftSweep(ctx context.Context, st *store.Store, cfg Config, n int, sample bool, res *DriftResult) (DriftSweep, error) {
	out := DriftSweep{Accounts: n}
	clock := stripemock.NewStoppedClock(time.Now().Add(-48 * time.Hour).Truncate(time.Second))
	h, err := testenv.New(testenv.Stripe, testenv.Options{
		Store: st, NoIntake: true,
		Stripe: testenv.StripeOptions{
			Fake:   stripemock.Options{APIKey: benchKey, Clock: clock},
			Client: cfg.client(),
		},
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return out, err
	}
	defer h.Close()
	customers, err := seedCustomers(ctx, h, n, func(i int) {
		if i%100 == 99 {
			clock.Advance(time.Minute)
		}
	})
	if err != nil {
		return out, err
	}
	clock.Start()
	fake := h.Stripe.Fake
	meter := func(on bool) error {
		if !on {
			fake.SetFaults(stripemock.Faults{})
			return fake.SetLimits(stripemock.Limits{})
		}
		fake.SetFaults(stripemock.Faults{Latency: cfg.Latency})
		return fake.SetLimits(cfg.limits())
	}
	plans := testenv.Plans()
	counted := &countingHandler{}
	if err := meter(true); err != nil {
		return out, err
	}
	imp, err := measureRun(ctx, st, h.Stripe.Client, plans, cfg.SweepParallel, reconcile.RunImport, counted)
	if err != nil {
		return out, err
	}
	if imp.rep.Run.Healed != n {
		return out, fmt.Errorf("drift bench: the import created %d accounts of %d", imp.rep.Run.Healed, n)
	}
	cfg.Logger.Info("bench drift: imported", slog.Int("accounts", n), slog.Duration("took", imp.took))

	// The silent drift: Stripe fails to create the changes' events, so
	// no webhook is sent and GET /v1/events lists nothing.
	fake.FailEventGeneration(true)
	drift := func() ([]seededCustomer, error) {
		if err := meter(false); err != nil {
			return nil, err
		}
		picked := pickDrifts(customers, driftChanges)
		for i, c := range picked {
			if err := h.Stripe.ChangePrice(ctx, c.sub, otherPrice(c.price)); err != nil {
				return nil, fmt.Errorf("drift bench: %w", err)
			}
			picked[i].price = otherPrice(c.price)
			customers[slices.IndexFunc(customers, func(x seededCustomer) bool { return x.id == c.id })].price = picked[i].price
		}
		return picked, meter(true)
	}
	drifted, err := drift()
	if err != nil {
		return out, err
	}
	watch := watchPlans(ctx, st, drifted)
	t0 := time.Now()
	swept, err := measureRun(ctx, st, h.Stripe.Client, plans, cfg.SweepParallel, reconcile.RunSweep, counted)
	took := watch.wait(time.Minute)
	if err != nil {
		return out, err
	}
	if len(took) != len(drifted) {
		return out, fmt.Errorf("drift bench: the sweep of %d accounts healed %d of %d silent changes", n, len(took), len(drifted))
	}
	out.Seconds = round(swept.took.Seconds(), 2)
	out.Healed = swept.rep.Run.Healed
	out.InSweep = percentOf(sinceAll(took, t0))
	out.P50Hours, out.P99Hours = nightly(out.InSweep)
	cfg.Logger.Info("bench drift: swept", slog.Int("accounts", n), slog.Float64("seconds", out.Seconds))
	if !sample {
		return out, nil
	}
	if res.Sample, err = driftSampler(ctx, st, cfg, h, n, drift); err != nil {
		return out, err
	}
	res.Cost, err = driftCost(ctx, st, h, cfg.DriftFor/5)
	return out, err
}

// censoredPercent is the percentiles of detection rounds (sampler
// minutes) over n drifts, those not in rounds detected later than any: a
// percentile they decide is -1.
func censoredPercent(rounds map[string]int64, n int) Percent {
	d := make([]time.Duration, 0, n)
	for _, r := range rounds {
		d = append(d, time.Duration(r)*time.Minute)
	}
	latest := Percent{}
	if len(d) > 0 {
		latest = percentOf(slices.Clone(d))
	}
	for len(d) < n {
		d = append(d, time.Duration(math.MaxInt64))
	}
	slices.Sort(d)
	at := func(q float64) float64 {
		v := percentile(d, q)
		if v == time.Duration(math.MaxInt64) {
			return -1
		}
		return ms(v)
	}
	return Percent{P50Ms: at(0.5), P99Ms: at(0.99), MaxMs: latest.MaxMs}
}

// pickDrifts picks k customers at random, without repeats.
func pickDrifts(customers []seededCustomer, k int) []seededCustomer {
	idx := rand.Perm(len(customers))[:min(k, len(customers))]
	out := make([]seededCustomer, len(idx))
	for i, j := range idx {
		out[i] = customers[j]
	}
	return out
}

// planWatch polls drifted customers' accounts until each shows its new
// plan and keeps when it did.
type planWatch struct {
	mu   sync.Mutex
	at   map[string]time.Time
	want int
	stop chan struct{}
	done chan struct{}
}

func watchPlans(ctx context.Context, st *store.Store, drifted []seededCustomer) *planWatch {
	w := &planWatch{at: map[string]time.Time{}, want: len(drifted), stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for {
			for _, c := range drifted {
				w.mu.Lock()
				_, seen := w.at[c.id]
				w.mu.Unlock()
				if seen {
					continue
				}
				if a, err := st.Account(ctx, stripe.Provider, c.id); err == nil && a.Plan == planOf(c.price) {
					w.mu.Lock()
					w.at[c.id] = time.Now()
					w.mu.Unlock()
				}
			}
			w.mu.Lock()
			all := len(w.at) == w.want
			w.mu.Unlock()
			if all {
				return
			}
			select {
			case <-w.stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return w
}

// wait waits up to d for every account, then stops and returns the times.
func (w *planWatch) wait(d time.Duration) map[string]time.Time {
	select {
	case <-w.done:
	case <-time.After(d):
	}
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.at
}

func sinceAll(at map[string]time.Time, t0 time.Time) []time.Duration {
	var d []time.Duration
	for _, t := range at {
		d = append(d, t.Sub(t0))
	}
	return d
}

func planOf(price string) string {
	if price == "price_team" {
		return "team"
	}
	return "pro"
}

// driftSampler runs the worker and the sample at its default share with a
// large account's allocation, the minute compressed, from a new silent
// drift until each account is healed or driftSamplerFor has passed.
func driftSampler(ctx context.Context, st *store.Store, cfg Config, h *testenv.Env, n int, drift func() ([]seededCustomer, error)) (DriftSample, error) {
	client := h.Stripe.Client
	res := DriftSample{Accounts: n, Share: reconcile.DefaultSampleShare, Allocation: largeAllocation, Projected: largeProjected}
	budget := reconcile.SampleBudget{Rate: client.Budget().Rate, Allocation: largeAllocation, Projected: largeProjected, ReadsPerAccount: 1}
	res.Size = round(reconcile.SampleSize(res.Share, budget), 1)
	// A round reads Size accounts one after another: its interval must
	// hold them at this latency, or rounds overrun (which the counts in
	// rounds absorb, at the price of fewer rounds in the run).
	res.Scale = cfg.DriftScale
	if res.Scale == 0 {
		res.Scale = max(1, min(10, int(time.Minute/(time.Duration(res.Size*1.3)*cfg.Latency+time.Second))))
	}
	discard := slog.New(slog.DiscardHandler)
	worker, err := h.Worker(reconcile.WorkerConfig{Name: "bench-drift", Logger: discard})
	if err != nil {
		return res, err
	}
	// Rates are counted over the rounds finished: at each round's start
	// (rounds run one after another) the counts so far are kept.
	var rounds, compared atomic.Int64
	var doneMu sync.Mutex
	var doneRounds, doneCompared, doneReads int64
	reads := func() int64 { return h.Stripe.Fake.KeyUsage(benchKey).Reads }
	sampler, err := reconcile.NewSampler(reconcile.SamplerConfig{Provider: stripe.Provider, Worker: worker, Store: st,
		Share: res.Share, Interval: reconcile.SampleInterval / time.Duration(res.Scale), Logger: discard,
		OnSample: func(reconcile.Sample) { compared.Add(1) },
		Budget: func() reconcile.SampleBudget {
			doneMu.Lock()
			doneRounds, doneCompared, doneReads = rounds.Load(), compared.Load(), reads()
			doneMu.Unlock()
			rounds.Add(1)
			b := budget
			b.Rate, b.Allocation, b.Projected = b.Rate*float64(res.Scale), b.Allocation*float64(res.Scale), b.Projected*float64(res.Scale)
			return b
		}})
	if err != nil {
		return res, err
	}
	drifted, err := drift()
	if err != nil {
		return res, err
	}
	h.Stripe.Fake.ResetUsage()
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { st.Listen(runCtx, discard, worker.Wake) })
	wg.Go(func() { worker.Run(runCtx) })
	// Detection is counted in rounds: the round under way when an account
	// shows its plan.
	var mu sync.Mutex
	detected := map[string]int64{}
	wg.Go(func() {
		for runCtx.Err() == nil {
			for _, c := range drifted {
				mu.Lock()
				_, seen := detected[c.id]
				mu.Unlock()
				if !seen {
					if a, err := st.Account(runCtx, stripe.Provider, c.id); err == nil && a.Plan == planOf(c.price) {
						mu.Lock()
						detected[c.id] = rounds.Load()
						mu.Unlock()
					}
				}
			}
			select {
			case <-runCtx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	})
	t0 := time.Now()
	wg.Go(func() { sampler.Run(runCtx) })
	deadline := time.After(cfg.DriftFor)
wait:
	for {
		mu.Lock()
		all := len(detected) == len(drifted)
		mu.Unlock()
		select {
		case <-deadline:
			break wait
		case <-time.After(200 * time.Millisecond):
		}
		if all {
			break
		}
	}
	stop()
	wg.Wait()
	res.Seconds = round(time.Since(t0).Seconds(), 1)
	res.Minutes, res.Compared = rounds.Load(), compared.Load()
	if doneRounds > 0 {
		res.ComparedPerMinute = round(float64(doneCompared)/float64(doneRounds), 1)
		res.ReadsPerMinute = round(float64(doneReads)/float64(doneRounds), 1)
	}
	res.Detected = len(detected)
	res.Detect = censoredPercent(detected, len(drifted))
	if res.ComparedPerMinute > 0 {
		rate := res.ComparedPerMinute / float64(n)
		res.ExpectedShare = round(1-math.Exp(-rate*float64(res.Minutes)), 2)
		res.ExpectedP50Min = round(math.Ln2/rate, 1)
	}
	cfg.Logger.Info("bench drift: sampled", slog.Int64("rounds", res.Minutes), slog.Int("detected", res.Detected))
	return res, nil
}

// driftCost runs the sample at serve's defaults (the allocation's floor)
// compressed costScale-fold for driftCostFor and counts its reads at the
// fake.
func driftCost(ctx context.Context, st *store.Store, h *testenv.Env, runFor time.Duration) (DriftCost, error) {
	client := h.Stripe.Client
	res := DriftCost{Share: reconcile.DefaultSampleShare, Allocation: client.Allocation(0)}
	budget := reconcile.SampleBudget{Rate: client.Budget().Rate, Allocation: res.Allocation, ReadsPerAccount: 1}
	res.Size = round(reconcile.SampleSize(res.Share, budget), 4)
	discard := slog.New(slog.DiscardHandler)
	worker, err := h.Worker(reconcile.WorkerConfig{Name: "bench-drift-cost", Logger: discard})
	if err != nil {
		return res, err
	}
	var rounds atomic.Int64
	sampler, err := reconcile.NewSampler(reconcile.SamplerConfig{Provider: stripe.Provider, Worker: worker, Store: st,
		Share: res.Share, Interval: reconcile.SampleInterval / costScale, Logger: discard,
		Budget: func() reconcile.SampleBudget {
			rounds.Add(1)
			b := budget
			b.Rate, b.Allocation = b.Rate*costScale, b.Allocation*costScale
			return b
		}})
	if err != nil {
		return res, err
	}
	h.Stripe.Fake.ResetUsage()
	runCtx, stop := context.WithTimeout(ctx, runFor)
	defer stop()
	sampler.Run(runCtx)
	res.Minutes = rounds.Load()
	res.Reads = h.Stripe.Fake.KeyUsage(benchKey).Reads
	if res.Minutes > 0 {
		res.ReadsPerMonth = round(float64(res.Reads)*float64(reconcile.ReadWindow/time.Minute)/float64(res.Minutes), 0)
		res.AllocationPct = round(res.ReadsPerMonth/res.Allocation*100, 1)
	}
	return res, nil
}

// detectionTable computes the sample's detection at 1,000 and 100,000
// accounts from the rates measured, beside the sweep's.
func detectionTable(r DriftResult) []DriftTable {
	sweepAt := func(n int) DriftSweep {
		for _, s := range r.Sweep {
			if s.Accounts == n {
				return s
			}
		}
		return r.Projected
	}
	var out []DriftTable
	for _, s := range []struct {
		name string
		rate float64
	}{
		{"sample, large allocation", r.Sample.ComparedPerMinute},
		{"sample, serve's defaults", float64(r.Cost.Reads) / math.Max(1, float64(r.Cost.Minutes))},
	} {
		for _, n := range []int{1000, driftProjectTo} {
			t := DriftTable{Sampler: s.name, Accounts: n, PerMinute: round(s.rate, 4)}
			if s.rate > 0 {
				// Uniform half: each account is picked with probability
				// (rate ÷ 2) ÷ n a minute; detection is exponential.
				mean := 2 * float64(n) / s.rate / 60
				t.MeanHours, t.P50Hours, t.P99Hours = round(mean, 2), round(mean*math.Ln2, 2), round(mean*math.Log(100), 2)
			}
			sw := sweepAt(n)
			t.SweepP50H, t.SweepP99H = sw.P50Hours, sw.P99Hours
			out = append(out, t)
		}
	}
	return out
}

// minutes renders a sampler-minute percentile; -1 is not measured.
func minutes(v float64) string {
	if v < 0 {
		return "not measured (later than the run)"
	}
	return fmt.Sprintf("%.0f min", v/60000)
}

// printDrift writes the drift part, each figure marked measured or
// computed.
func printDrift(w io.Writer, d DriftResult) {
	fmt.Fprintf(w, "DRIFT: %d silent changes each time (the fake creates no event: no webhook, nothing listed); fake Stripe latency %.0f ms\n", d.Changes, d.LatencyMs)
	fmt.Fprintln(w, "  the nightly sweep alone (the sample off): the sweep measured; the wait for it, uniform over 24 h, computed (p50 12 h, p99 23.76 h)")
	row := func(s DriftSweep, how string) {
		fmt.Fprintf(w, "    %7d accounts: sweep %8.2f s (%s); sweep start → account applied p50 %.1f s, p99 %.1f s; with the nightly wait p50 %.2f h, p99 %.2f h (computed)\n",
			s.Accounts, s.Seconds, how, s.InSweep.P50Ms/1000, s.InSweep.P99Ms/1000, s.P50Hours, s.P99Hours)
	}
	for _, s := range d.Sweep {
		row(s, "measured")
	}
	row(d.Projected, fmt.Sprintf("computed: %d accounts' × %d", d.Sweep[len(d.Sweep)-1].Accounts, driftProjectTo/d.Sweep[len(d.Sweep)-1].Accounts))
	sm := d.Sample
	fmt.Fprintf(w, "  the sample at its default share %.2f, a large allocation (%.0fM reads/month, %.0fM for other work): %.1f accounts a minute (computed, SampleSize)\n",
		sm.Share, sm.Allocation/1e6, sm.Projected/1e6, sm.Size)
	fmt.Fprintf(w, "    measured at %d accounts, its minute compressed %d-fold: %d sampler minutes in %.0f s; %.1f accounts compared and %.1f reads at the fake (the sample's and the heals') a sampler minute\n",
		sm.Accounts, sm.Scale, sm.Minutes, sm.Seconds, sm.ComparedPerMinute, sm.ReadsPerMinute)
	fmt.Fprintf(w, "    change → account applied (measured, sampler minutes): %d of %d detected within the run's %d minutes (%.0f%% expected, computed); p50 %s, p99 %s over all %d (expected p50 %.1f min, computed)\n",
		sm.Detected, d.Changes, sm.Minutes, sm.ExpectedShare*100, minutes(sm.Detect.P50Ms), minutes(sm.Detect.P99Ms), d.Changes, sm.ExpectedP50Min)
	c := d.Cost
	fmt.Fprintf(w, "  the sample's cost at serve's defaults (share %.2f, allocation %.0f reads/month): %.4f accounts a minute (computed)\n", c.Share, c.Allocation, c.Size)
	fmt.Fprintf(w, "    measured, compressed %d-fold: %d reads at the fake in %d sampler minutes = %.5f requests a minute = %.0f reads / 30 days = %.1f%% of the allocation\n",
		costScale, c.Reads, c.Minutes, float64(c.Reads)/math.Max(1, float64(c.Minutes)), c.ReadsPerMonth, c.AllocationPct)
	fmt.Fprintln(w, "  detection computed from the measured rates (the uniform half alone: exponential, mean 2 × accounts ÷ rate), beside the sweep's:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "    sampler\taccounts\tcompared/min\tp50 h\tp99 h\tsweep alone p50 h\tsweep alone p99 h\t")
	for _, t := range d.Detection {
		fmt.Fprintf(tw, "    %s\t%d\t%.4f\t%.1f\t%.1f\t%.2f\t%.2f\t\n", t.Sampler, t.Accounts, t.PerMinute, t.P50Hours, t.P99Hours, t.SweepP50H, t.SweepP99H)
	}
	tw.Flush()
	fmt.Fprintln(w)
}
