package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"sync/atomic"
	"time"

	stripemock "github.com/billsync/billsync/mocks/stripe"
	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/providers/stripe"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store"
)

// SweepResult is the nightly sweep over every account, a share of them
// drifted, against the fake Stripe at the client's rate limit.
type SweepResult struct {
	Accounts  int     `json:"accounts"`
	Drifted   int     `json:"drifted"`
	Healed    int     `json:"healed"`
	RateLimit float64 `json:"rate_limit"`
	// ListRate is the sweep's own share, as serve gives it: the list
	// operation's limit, at most half of RateLimit. The provider-bound
	// time is list calls ÷ ListRate.
	ListRate float64 `json:"list_rate"`
	// LatencyMs is what the fake adds to each answer of the measured
	// sweeps; Parallel is how many list requests the sweep keeps in
	// flight (parts of the customer list), 0 = adapting (serve's default).
	LatencyMs float64 `json:"provider_latency_ms"`
	Parallel  int     `json:"parallel"`
	// ListCalls are the API requests of the measured sweep, counted at the
	// fake (429 answers included).
	ListCalls   int64 `json:"list_calls"`
	RateLimited int64 `json:"rate_limited"`
	// ProviderBoundSeconds is the least time the listing can take at the
	// limit: list calls ÷ rate.
	ProviderBoundSeconds float64 `json:"provider_bound_seconds"`
	Seconds              float64 `json:"seconds"`
	WallRatio            float64 `json:"wall_ratio"` // Seconds / ProviderBoundSeconds
	// RequestsPerFetch is what one per-account fetch costs, measured on a
	// sample in the same run; PerAccountCalls = Accounts × it is the
	// baseline of reconciling every account one by one.
	RequestsPerFetch float64 `json:"requests_per_fetch"`
	PerAccountCalls  int64   `json:"per_account_calls"`
	CallReduction    float64 `json:"call_reduction"` // PerAccountCalls / ListCalls
	AccountsPerSec   float64 `json:"accounts_per_sec"`
	// Projected1MSeconds is the wall time projected for a million accounts
	// at the same rate (project1M).
	Projected1MSeconds float64 `json:"projected_1m_seconds"`
	// HeapPeakMiB is the Go heap's peak growth during the measured sweep
	// (sampled); PeakRSSMiB is the process's peak RSS, which includes the
	// in-process fake holding every customer.
	HeapPeakMiB float64 `json:"heap_peak_mib"`
	PeakRSSMiB  float64 `json:"peak_rss_mib"`
	SeedSeconds float64 `json:"seed_seconds"`
	// Import is the first run over the same customers, which created
	// every account the measured sweep then finds: an import into an
	// empty database, measured at the same limits and latency.
	Import ImportResult `json:"import"`
	// Process is the same sweep by `billsync sweep` in a process of its
	// own (Config.SweepCommand), for billsync's own peak RSS; nil when
	// not run.
	Process *ProcessSweep `json:"process,omitempty"`
	// Timeline is how many list calls the fake answered in each second of
	// the measured sweep.
	Timeline []int `json:"list_calls_per_second"`
}

// ImportResult is a provider's first listing into an empty database (a
// run of kind import: Sweeper.Start with reconcile.RunImport, then Sweep),
// with serve's client and sweeper against the fake's limits and latency.
// Its baselines, measured in the same run: the time its list calls need
// at the list operation's rate, and the sweep of the same accounts after
// 1% drifted (SweepResult), which lists the same pages and writes almost
// nothing.
type ImportResult struct {
	Accounts int `json:"accounts"`
	Imported int `json:"imported"` // accounts the import wrote (sweep_runs.changed)
	// ListCalls are the API requests of the import, counted at the fake
	// (429 answers included).
	ListCalls            int64   `json:"list_calls"`
	RateLimited          int64   `json:"rate_limited"`
	Seconds              float64 `json:"seconds"`
	ProviderBoundSeconds float64 `json:"provider_bound_seconds"` // list calls ÷ the list rate
	WallRatio            float64 `json:"wall_ratio"`             // Seconds / ProviderBoundSeconds: 1.0 is bound by Stripe
	AccountsPerSec       float64 `json:"accounts_per_sec"`
	// SteadyPerSec is the accounts a second of the run's middle half
	// (projectImport1M); Projected1MSeconds the import of a million
	// customers projected at it.
	SteadyPerSec       float64 `json:"steady_accounts_per_sec"`
	Projected1MSeconds float64 `json:"projected_1m_seconds"`
	// Timeline is how many list calls the fake answered in each second of
	// the import.
	Timeline []int `json:"list_calls_per_second"`
}

// sweepDrift is the share of accounts the bench makes wrong before the
// measured sweep.
const sweepDrift = 0.01

// sweepGCPercent is the bench process's GOGC during the measured sweeps.
const sweepGCPercent = 400

// fetchSample is how many customers the per-account baseline fetches.
const fetchSample = 100

func runSweep(ctx context.Context, st *store.Store, cfg Config) (SweepResult, error) {
	listRate := cfg.listRate()
	res := SweepResult{Accounts: cfg.SweepAccounts, RateLimit: cfg.RateLimit, ListRate: listRate,
		LatencyMs: float64(cfg.Latency) / float64(time.Millisecond), Parallel: cfg.SweepParallel}
	plans := testenv.Plans()
	counted := &countingHandler{}
	// A real account's customers were created over months; seeded in one
	// burst, some 2,000 would share each second, and the sweep splits its
	// listing by creation second. So the fake's clock stands still and
	// moves a minute after every hundredth customer: each page of the
	// list spans about a minute, as at a business signing up a hundred
	// customers a minute.
	clock := stripemock.NewStoppedClock(time.Now().Add(-48 * time.Hour).Truncate(time.Second))
	spread := func(i int) {
		if i%100 == 99 {
			clock.Advance(time.Minute)
		}
	}
	h, err := testenv.New(testenv.Stripe, testenv.Options{
		Wrap: counted.wrap, ConnState: counted.connState,
		Stripe: testenv.StripeOptions{
			Fake:   stripemock.Options{APIKey: benchKey, Clock: clock, Faults: stripemock.Faults{DropRate: 1}}, // drift: no webhook reaches billsync
			Client: stripe.Config{RateLimit: 1e6, OperationRateLimit: 1e6, ListRateLimit: 1e6},                 // the per-account baseline, unmetered
		},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		return res, err
	}
	defer h.Close()

	t0 := time.Now()
	customers, err := seedCustomers(ctx, h, cfg.SweepAccounts, spread)
	if err != nil {
		return res, err
	}
	res.SeedSeconds = round(time.Since(t0).Seconds(), 1)
	// From here the fake's clock runs: its rate limits refill by it.
	clock.Start()
	cfg.Logger.Info("bench sweep: fake seeded", slog.Int("customers", len(customers)), slog.Float64("seconds", res.SeedSeconds))

	// The fake's limits and latency are on for what billsync does and off
	// for what the bench does in the dashboard's place (the drift).
	meter := func(on bool) error {
		if !on {
			h.Stripe.Fake.SetFaults(stripemock.Faults{DropRate: 1})
			return h.Stripe.Fake.SetLimits(stripemock.Limits{})
		}
		h.Stripe.Fake.SetFaults(stripemock.Faults{DropRate: 1, Latency: cfg.Latency})
		return h.Stripe.Fake.SetLimits(cfg.limits())
	}
	// The in-process fake holds every customer, subscription, invoice and
	// event (about 1 GiB of small objects at 100,000 accounts), and the
	// Go GC re-scans all of it on the cores the import and the sweep are
	// measured on, a cost a real provider does not put on billsync's
	// machine. So this process collects less often while they run;
	// billsync sweep in its own process keeps the default.
	defer debug.SetGCPercent(debug.SetGCPercent(sweepGCPercent))
	// billsync's client at the fake's rates, the listing's share the list
	// operation's (the client's default, as in serve).
	client, err := h.Stripe.NewClient(cfg.client())
	if err != nil {
		return res, err
	}

	// The import: every customer into the empty database, as serve's
	// first start runs it, measured at Stripe's limits and the latency.
	if err := meter(true); err != nil {
		return res, err
	}
	runtime.GC()
	imp, err := measureRun(ctx, st, client, plans, cfg.SweepParallel, reconcile.RunImport, counted)
	if err != nil {
		return res, err
	}
	if run := imp.rep.Run; run.Kind != reconcile.RunImport || run.Seen != len(customers) || run.Healed != len(customers) || run.Failed != 0 {
		return res, fmt.Errorf("import bench: the run (kind %s) saw %d and created %d accounts of %d (%d failed)",
			run.Kind, run.Seen, run.Healed, len(customers), run.Failed)
	}
	if err := imp.checkShare("import", listRate); err != nil {
		return res, err
	}
	res.Import = importResult(imp, len(customers), listRate)
	cfg.Logger.Info("bench import: done", slog.Float64("seconds", res.Import.Seconds), slog.Int64("list_calls", res.Import.ListCalls))

	// Drift: every 100th customer from first moves between pro and team
	// at Stripe, its webhook lost.
	step := int(math.Round(1 / sweepDrift))
	drift := func(first int) (drifted int, err error) {
		for i := first; i < len(customers); i += step {
			if err := h.Stripe.ChangePrice(ctx, customers[i].sub, otherPrice(customers[i].price)); err != nil {
				return drifted, fmt.Errorf("sweep bench drift: %w", err)
			}
			drifted++
		}
		return drifted, nil
	}
	if err := meter(false); err != nil {
		return res, err
	}
	if res.Drifted, err = drift(0); err != nil {
		return res, err
	}

	// The per-account baseline: what reconciling one account costs.
	reqs0 := counted.requests.Load()
	for _, c := range customers[:min(fetchSample, len(customers))] {
		if _, err := h.Stripe.Client.Fetch(ctx, c.id); err != nil {
			return res, fmt.Errorf("sweep bench baseline fetch: %w", err)
		}
	}
	res.RequestsPerFetch = round(float64(counted.requests.Load()-reqs0)/float64(min(fetchSample, len(customers))), 2)
	res.PerAccountCalls = int64(math.Round(res.RequestsPerFetch * float64(len(customers))))

	// The measured sweep, at the import's limits and latency.
	if err := meter(true); err != nil {
		return res, err
	}
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	peak := &heapPeak{}
	stopSampling := peak.sample(20 * time.Millisecond)
	stopProfile, err := startCPUProfile(cfg.CPUProfile)
	if err != nil {
		stopSampling()
		return res, err
	}
	swept, err := measureRun(ctx, st, client, plans, cfg.SweepParallel, reconcile.RunSweep, counted)
	res.Timeline = swept.timeline
	stopSampling()
	if perr := stopProfile(); perr != nil {
		return res, perr
	}
	if err != nil {
		return res, err
	}
	rep, took := swept.rep, swept.took
	res.ListCalls, res.RateLimited = swept.calls, swept.limited
	res.Healed = rep.Run.Healed
	if rep.Run.Seen != len(customers) || rep.Run.Healed != res.Drifted || rep.Run.Failed != 0 {
		return res, fmt.Errorf("sweep bench: the sweep saw %d of %d customers and healed %d of %d drifted (%d failed)",
			rep.Run.Seen, len(customers), rep.Run.Healed, res.Drifted, rep.Run.Failed)
	}
	res.Seconds = round(took.Seconds(), 2)
	res.ProviderBoundSeconds = round(float64(res.ListCalls)/listRate, 2)
	res.WallRatio = wallRatio(took.Seconds(), res.ListCalls, listRate)
	if err := swept.checkShare("sweep", listRate); err != nil {
		return res, err
	}
	if res.ListCalls > 0 {
		res.CallReduction = round(float64(res.PerAccountCalls)/float64(res.ListCalls), 1)
	}
	res.AccountsPerSec = round(float64(len(customers))/took.Seconds(), 0)
	res.Projected1MSeconds = project1M(took.Seconds(), res.ListCalls, listRate, len(customers))
	res.HeapPeakMiB = round(float64(peak.max.Load()-int64(before.HeapAlloc))/(1<<20), 1)
	res.PeakRSSMiB = round(peakRSSMiB(), 1)
	cfg.Logger.Info("bench sweep: done", slog.Float64("seconds", res.Seconds), slog.Int64("list_calls", res.ListCalls))
	if len(cfg.SweepCommand) == 0 {
		return res, nil
	}

	// billsync's own footprint: drift another 1% (the customers between
	// the first drift's) and sweep again with `billsync sweep` in a
	// process of its own.
	if err := meter(false); err != nil {
		return res, err
	}
	drifted, err := drift(step / 2)
	if err != nil {
		return res, err
	}
	if err := meter(true); err != nil {
		return res, err
	}
	reqs0 = counted.requests.Load()
	counted.mark()
	ran, err := sweepProcess(ctx, cfg, st, h.URL)
	if err != nil {
		return res, err
	}
	ran.Drifted, ran.ListCalls = drifted, counted.requests.Load()-reqs0
	ran.Timeline = counted.timeline()
	ran.WallRatio = wallRatio(ran.Seconds, ran.ListCalls, listRate)
	ran.Projected1MSeconds = project1M(ran.Seconds, ran.ListCalls, listRate, len(customers))
	if ran.ListCalls >= minJudgedCalls && ran.WallRatio < minWallRatio {
		return res, fmt.Errorf("sweep bench: billsync sweep made %d list calls in %.2f s, faster than the sweep's %.0f req/s allow: it was given more than its share",
			ran.ListCalls, ran.Seconds, listRate)
	}
	if ran.Seen != len(customers) || ran.Healed != ran.Drifted {
		return res, fmt.Errorf("sweep bench: billsync sweep saw %d of %d customers and healed %d of %d drifted",
			ran.Seen, len(customers), ran.Healed, ran.Drifted)
	}
	res.Process = &ran
	cfg.Logger.Info("bench sweep: billsync sweep done", slog.Float64("seconds", ran.Seconds), slog.Float64("peak_rss_mib", ran.PeakRSSMiB))
	return res, nil
}

// project1M projects the wall time of a sweep of a million accounts from a
// sweep of n that took seconds for calls list calls: the time those calls
// need at rate, scaled to a million, plus what the run took beyond it.
// That excess is the start (the first pages, finding the oldest customer,
// the splits that bring the parts to the rate) and the last parts'
// answers; it does not grow with the accounts (measured at 300 ms: 3.1 s
// at 20,000 accounts, 3.7 s at 100,000, with the calls at the rate
// between), so scaling it too would project it ten times over.
func project1M(seconds float64, calls int64, rate float64, n int) float64 {
	if calls == 0 || n == 0 {
		return 0
	}
	bound := float64(calls) / rate
	return round(max(seconds-bound, 0)+bound*1e6/float64(n), 0)
}

// minWallRatio is the least wall ratio a sweep held to its share can
// show: its limiter's burst and the calls that find where a part ends
// allow a little less than 1, no more. Below it the bench gave the sweep
// more than its share, and its figures would flatter it.
// A sweep of fewer than minJudgedCalls calls is not judged so: its first
// call goes at once, a share of a few calls' time.
const (
	minWallRatio   = 0.95
	minJudgedCalls = 100
)

// wallRatio is seconds against the least time calls take at rate (0 when
// there were none).
func wallRatio(seconds float64, calls int64, rate float64) float64 {
	if calls == 0 {
		return 0
	}
	return round(seconds/(float64(calls)/rate), 3)
}

// startCPUProfile writes a CPU profile to path until stop is called; with
// no path it does nothing.
func startCPUProfile(path string) (stop func() error, err error) {
	if path == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	return func() error {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		return nil
	}, nil
}

// listingRun is one run of the sweeper over every Stripe customer, with
// what the fake answered meanwhile.
type listingRun struct {
	rep      reconcile.SweepReport
	took     time.Duration
	calls    int64 // API requests counted at the fake, 429 answers included
	limited  int64
	timeline []int // requests answered in each second of the run
}

// measureRun runs one run of kind (reconcile.RunImport, RunSweep) of
// every Stripe account, as serve's sweeper does (Start, then Sweep), and
// counts the fake's answers by counted.
func measureRun(ctx context.Context, st *store.Store, client *stripe.Client, plans *reconcile.Plans, parallel int,
	kind string, counted *countingHandler) (listingRun, error) {
	s, err := reconcile.NewSweeper(reconcile.SweeperConfig{Store: st, Provider: stripe.Provider, Lister: client, Parallel: parallel, Plans: plans})
	if err != nil {
		return listingRun{}, err
	}
	reqs0, limited0 := counted.requests.Load(), counted.limited.Load()
	counted.mark()
	t0 := time.Now()
	started, err := s.Start(ctx, kind)
	if err != nil {
		return listingRun{}, err
	}
	rep, err := started.Sweep(ctx)
	r := listingRun{rep: rep, took: time.Since(t0), timeline: counted.timeline(),
		calls: counted.requests.Load() - reqs0, limited: counted.limited.Load() - limited0}
	return r, err
}

// checkShare fails a run of minJudgedCalls list calls or more that was
// faster than rate allows: it was given more than its share, and its
// figures would flatter it.
func (r listingRun) checkShare(name string, rate float64) error {
	if r.calls >= minJudgedCalls && wallRatio(r.took.Seconds(), r.calls, rate) < minWallRatio {
		return fmt.Errorf("%s bench: %d list calls in %.2f s, faster than the listing's %.0f req/s allow", name, r.calls, r.took.Seconds(), rate)
	}
	return nil
}

// importResult is the figures of the import r of n accounts, its list
// calls at rate.
func importResult(r listingRun, n int, rate float64) ImportResult {
	secs := r.took.Seconds()
	steady, projected := projectImport1M(secs, r.calls, n, r.timeline)
	return ImportResult{Accounts: n, Imported: r.rep.Run.Healed, ListCalls: r.calls, RateLimited: r.limited,
		Seconds: round(secs, 2), ProviderBoundSeconds: round(float64(r.calls)/rate, 2), WallRatio: wallRatio(secs, r.calls, rate),
		AccountsPerSec: round(float64(n)/secs, 0), SteadyPerSec: steady, Projected1MSeconds: projected, Timeline: r.timeline}
}

// projectImport1M projects the import of a million customers from one of
// n that took seconds for calls list calls, answered timeline[i] in its
// i-th second: this run, plus the other customers at the rate of the
// run's middle half (its list calls a second times the customers a call
// brought). An import runs at the slower of Stripe's list rate and its
// own writes, both in proportion to the customers, so the middle half
// runs at that bound whichever it is; the start (the first pages, the
// splits) and the last parts' short pages are paid once. project1M, the
// sweep's, scales the list calls' time alone: an import bound by its
// writes would be projected at the calls' pace. With fewer than four
// seconds in the middle half, the whole run is scaled.
func projectImport1M(seconds float64, calls int64, n int, timeline []int) (steadyPerSec, projected float64) {
	if calls == 0 || n == 0 || seconds <= 0 {
		return 0, 0
	}
	mid := timeline[len(timeline)/4 : len(timeline)*3/4]
	answered := 0
	for _, c := range mid {
		answered += c
	}
	if len(mid) < 4 || answered == 0 {
		return round(float64(n)/seconds, 0), round(seconds*1e6/float64(n), 0)
	}
	steadyPerSec = float64(answered) / float64(len(mid)) * float64(n) / float64(calls)
	return round(steadyPerSec, 0), round(seconds+max(1e6-float64(n), 0)/steadyPerSec, 0)
}

func otherPrice(price string) string {
	if price == "price_pro" {
		return "price_team"
	}
	return "price_pro"
}

// heapPeak samples the Go heap's size and keeps the largest.
type heapPeak struct{ max atomic.Int64 }

func (p *heapPeak) sample(every time.Duration) (stop func()) {
	return sample(every, func() {
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		if int64(m.HeapAlloc) > p.max.Load() {
			p.max.Store(int64(m.HeapAlloc))
		}
	})
}

// sample calls f now and then every period until stop is called.
func sample(every time.Duration, f func()) (stop func()) {
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			f()
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() { close(done); <-stopped }
}
