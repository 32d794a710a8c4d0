package bench

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store"
	"github.com/billsync/billsync/store/scratch"
	"github.com/billsync/billsync/store/storetest"
)

func TestMain(m *testing.M) { os.Exit(storetest.Main(m)) }

func startIntake(t testing.TB, st *store.Store) *intake {
	t.Helper()
	in, err := newIntake(st)
	require.NoError(t, err)
	t.Cleanup(in.close)
	return in
}

// toy is a run small enough for a test.
func toy() Config {
	return Config{Senders: []int{1, 4}, IntakeDeliveries: 40, Rounds: 2,
		DrainEvents: 30, Customers: 6, SweepAccounts: 300, Workers: 3, Latencies: []time.Duration{2 * time.Millisecond},
		RateLimit: 500, OperationRate: 250, LoadFor: time.Second, HealScale: 1000}.withDefaults()
}

// TestIntakeStoresWhatItReports: read back from the database, every
// delivery either path sent is stored exactly once (one receipt each, one
// event per id, seen_count its number of deliveries), the HTTP path's came
// over HTTP and the ceiling's by the direct call, and the report counts
// what was sent.
func TestIntakeStoresWhatItReports(t *testing.T) {
	ctx := context.Background()
	st := storetest.NewStore(t)
	in := startIntake(t, st)
	var mu sync.Mutex
	sent := map[string]map[string]int{} // path → event id → deliveries
	for _, p := range []*path{&in.ceiling, &in.http} {
		send, name := p.send, p.name
		sent[name] = map[string]int{}
		p.send = func(ctx context.Context, d delivery) error {
			err := send(ctx, d)
			if err == nil {
				mu.Lock()
				sent[name][d.verified.Event.EventID]++
				mu.Unlock()
			}
			return err
		}
	}
	cfg := toy()
	res, err := in.run(ctx, cfg)
	require.NoError(t, err)

	stored := map[string]map[string]int{"ceiling": {}, "http": {}}
	events := map[int64]storetest.EventRow{}
	for _, e := range storetest.Events(t, st) {
		events[e.ID] = e
	}
	for _, r := range storetest.Receipts(t, st) {
		e, ok := events[r.EventID]
		require.True(t, ok, "receipt of event %d", r.EventID)
		p := map[bool]string{true: "ceiling", false: "http"}[r.RemoteAddr == directAddr]
		stored[p][e.EventID]++
	}
	for _, e := range events {
		require.Equal(t, sent["ceiling"][e.EventID]+sent["http"][e.EventID], e.SeenCount, "event %s: seen_count is its deliveries", e.EventID)
	}
	require.Equal(t, sent, stored, "every delivery stored once, by the path that sent it")

	var reported, sentAll, timedHTTP, reportedHTTP int
	for _, ids := range sent {
		for _, n := range ids {
			sentAll += n
		}
	}
	for id, n := range sent["http"] {
		if !strings.HasPrefix(id, "evt_hw") { // warm-ups are stored, not timed
			timedHTTP += n
		}
	}
	for i, r := range res {
		require.Equal(t, cfg.Senders[i], r.Senders)
		reported += r.Check.SentDeliveries
		reportedHTTP += r.HTTP.Deliveries
	}
	require.Equal(t, sentAll, reported)
	require.Equal(t, timedHTTP, reportedHTTP)
}

// stepClock is a clock that moves only when told: a path's cost is then
// exactly what the test says it is.
type stepClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *stepClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// TestIntakeRatioComesFromTheTwoPaths: with each direct call costing 1 ms
// and each HTTP delivery 4 ms on the meters' clock, each path's latencies
// are its own and the ratio is the HTTP path's throughput over the
// ceiling's, in every round, whichever path goes first.
func TestIntakeRatioComesFromTheTwoPaths(t *testing.T) {
	st := storetest.NewStore(t)
	in := startIntake(t, st)
	clock := &stepClock{now: time.Unix(0, 0)}
	in.now = clock.Now
	for _, c := range []struct {
		p    *path
		cost time.Duration
	}{{&in.ceiling, time.Millisecond}, {&in.http, 4 * time.Millisecond}} {
		send, cost := c.p.send, c.cost
		c.p.send = func(ctx context.Context, d delivery) error {
			err := send(ctx, d)
			clock.advance(cost)
			return err
		}
	}
	cfg := toy()
	cfg.Senders = []int{1}
	res, err := in.run(context.Background(), cfg)
	require.NoError(t, err)
	require.Len(t, res, 1)
	r := res[0]
	require.Equal(t, []float64{4, 4, 4, 250}, []float64{r.HTTP.P50Ms, r.HTTP.P99Ms, r.HTTP.MaxMs, r.HTTP.PerSec})
	require.Equal(t, []float64{1, 1, 1, 1000}, []float64{r.Ceiling.P50Ms, r.Ceiling.P99Ms, r.Ceiling.MaxMs, r.Ceiling.PerSec})
	require.Equal(t, 0.25, r.Ratio)
	require.Equal(t, []float64{0.25, 0.25}, r.RoundRatios)
}

// TestIntakeThatDropsDeliveriesFailsTheRun: an intake that answers without
// storing (here every seventh HTTP delivery) makes the run an error, never
// a figure.
func TestIntakeThatDropsDeliveriesFailsTheRun(t *testing.T) {
	st := storetest.NewStore(t)
	in := startIntake(t, st)
	var n atomic.Int64
	send := in.http.send
	in.http.send = func(ctx context.Context, d delivery) error {
		if n.Add(1)%7 == 0 {
			return nil
		}
		return send(ctx, d)
	}
	_, err := in.run(context.Background(), toy())
	require.ErrorContains(t, err, "lost work")
}

// TestLatencyAnswersEveryDelivery: every delivery of the steady load is
// timed to the reconcile that answered it, for the measured worker and
// the baseline, and every event ends applied.
func TestLatencyAnswersEveryDelivery(t *testing.T) {
	ctx := context.Background()
	st := storetest.NewStore(t)
	cfg := toy()
	cfg.LoadFor = time.Second
	cfg.BaselineWorkers = 2
	res, err := runLatency(ctx, st, cfg)
	require.NoError(t, err)
	load := int(cfg.allowed() / 2) // one second at half what the read operations allow
	require.Equal(t, load, res.Measured.Events)
	require.NotNil(t, res.Baseline)
	require.Equal(t, load, res.Baseline.Events)
	require.Equal(t, 2, res.Baseline.Workers)
	require.GreaterOrEqual(t, res.Measured.P99Ms, 2.0, "each includes the fake's 2 ms")
	require.LessOrEqual(t, res.Measured.P50Ms, res.Measured.P99Ms)
	stats, err := scratch.ReadStats(ctx, st)
	require.NoError(t, err)
	require.Equal(t, 2*load, stats.Events)
	require.Equal(t, stats.Events, stats.Applied)
}

// TestDrainAnswersEveryEvent: read back from the database after both
// drains, every event sent is stored and applied, the queue is empty, and
// each customer's account has the plan of its subscription at the fake;
// the fake's count of API requests agrees with the provider's count of
// fetches (one request each, the customer with its subscriptions expanded,
// plus one per 429).
func TestDrainAnswersEveryEvent(t *testing.T) {
	ctx := context.Background()
	st := storetest.NewStore(t)
	cfg := toy()
	res, err := runDrain(ctx, st, cfg, true)
	require.NoError(t, err)

	counts := storetest.Counts(t, st)
	events, applied := counts["inbox_events"], 0
	for _, e := range storetest.Events(t, st) {
		if e.Status == reconcile.EventApplied {
			applied++
		}
	}
	require.Equal(t, 2*cfg.DrainEvents, events, "the stored burst and the live one")
	require.Equal(t, events, applied)
	require.Equal(t, events, counts["receipts"])
	require.Zero(t, counts["reconcile_queue"])

	var plans []string
	for _, a := range storetest.Accounts(t, st) {
		plans = append(plans, a.UserRef+"="+a.Plan)
	}
	slices.Sort(plans)
	require.Equal(t, []string{"user_000000=pro", "user_000001=pro", "user_000002=team",
		"user_000003=pro", "user_000004=pro", "user_000005=team"}, plans, "the seed subscribes every third customer to team")

	require.Equal(t, cfg.Customers, res.CustomersFetched, "every customer is fetched")
	require.Equal(t, cfg.Customers, res.Live.CustomersFetched, "and again for its live burst")
	require.Equal(t, res.Fetches+res.RateLimited, res.APIRequests)
	outcomes := 0
	for _, n := range res.Outcomes {
		outcomes += n
	}
	require.Equal(t, res.Reconciles, outcomes, "the worker's outcomes are the log's rows")
}

// TestBenchQuick runs the whole bench at toy sizes on the test server: it
// works in databases of its own and drops them, its pools have serve's
// size, and without 32 senders the intake is judged at the largest count.
// It asserts no timing: figures are measurements.
func TestBenchQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the bench")
	}
	ctx := context.Background()
	probe := storetest.NewStore(t) // a database of the tests' own on the same server
	cfg := toy()
	cfg.Rounds = 1
	// billsync sweep in a process of its own: billsync built for the test.
	bin := filepath.Join(t.TempDir(), "billsync")
	build := exec.Command("go", "build", "-o", bin, "github.com/billsync/billsync/cmd/billsync")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)
	cfg.SweepCommand = []string{bin, "sweep"}
	url := storetest.URL(t)
	rep, err := Run(ctx, url, cfg)
	require.NoError(t, err)

	require.Empty(t, storetest.Databases(t, probe, "billsync_bench_"), "the bench drops its databases")
	require.Equal(t, int(store.ServePoolSize(url)), rep.PoolConns, "the bench's pools are serve's size")
	require.Len(t, rep.Intake, 2)
	require.Equal(t, "intake throughput / ceiling, 4 senders", rep.Targets[0].Name)
	require.Len(t, rep.Targets, 13)
	require.Len(t, rep.Drain, 1, "one latency")
	require.Zero(t, rep.Drain[0].RateLimited, "the client keeps within the fake's limits")
	require.Equal(t, rep.Drain[0].APIRequests, rep.Drain[0].Operations["GET /v1/customers/{id}"]+rep.Drain[0].Operations["GET /v1/subscriptions"],
		"the drain reads customers by its two operations only: %v", rep.Drain[0].Operations)
	require.Len(t, rep.Latency, 1)
	require.Equal(t, int(cfg.allowed()/2), rep.Latency[0].Measured.Events, "one second of load at half what the read operations allow")
	require.Len(t, rep.Sweep, 1)
	sw := rep.Sweep[0]
	require.Equal(t, 300, sw.Import.Imported, "the sweep's accounts were imported first")
	require.Equal(t, 300, sw.Accounts)
	require.Equal(t, 3, sw.Drifted, "1% of the accounts drifted")
	require.Equal(t, sw.Drifted, sw.Healed, "the sweep healed exactly the drifted accounts")
	require.LessOrEqual(t, sw.ListCalls, int64(4), "300 accounts in pages of 100, and one call to find the end")
	require.Zero(t, sw.RateLimited)
	require.Equal(t, cfg.OperationRate, sw.ListRate, "the sweep lists at its operation's rate")
	require.Positive(t, sw.PerAccountCalls)
	p := sw.Process
	require.NotNil(t, p)
	require.Equal(t, 3, p.Drifted, "another 1% drifted")
	require.Equal(t, p.Drifted, p.Healed, "billsync sweep healed exactly them")
	require.Equal(t, 300, p.Seen)
	require.Positive(t, p.PeakRSSMiB, "the child's peak RSS was read")
	require.LessOrEqual(t, p.ListCalls, int64(4), "300 accounts in pages of 100, and one call to find the end")
	require.Positive(t, p.WallRatio)
	require.Equal(t, "billsync sweep peak RSS, 300 accounts, 2 ms", rep.Targets[len(rep.Targets)-3].Name)
	// Every change of the heal part's second half was caught by the feed:
	// no webhook brought it.
	require.Equal(t, healChanges, rep.Heal.Changes)
	require.GreaterOrEqual(t, rep.Heal.FeedCaught, int64(healChanges))
	require.Positive(t, rep.Heal.Feed.P99Ms)
	require.Equal(t, 10000.0, rep.Heal.Allocation, "an account with no transactions: the floor")
	require.Equal(t, (18*time.Minute+10*time.Second).Seconds()*1000, rep.Heal.BudgetPollMs, "the floor's budget interval")
	require.Equal(t, 2000.0, rep.Heal.PollMs, "18m10s ÷ 1000, rounded up to the second")
	require.Equal(t, "heal p99, every webhook lost (events feed alone), 10000 reads/month", rep.Targets[len(rep.Targets)-2].Name)
	// Idle: one read a quiet poll (the events list), one the endpoint's
	// status; a quarter of the floor at most.
	require.Equal(t, 1.0, rep.Idle.ReadsPerPoll)
	require.Equal(t, 1.0, rep.Idle.EndpointReads)
	require.Equal(t, 1090.0, rep.Idle.IntervalS)
	require.LessOrEqual(t, rep.Idle.ReadsPerMonth, float64(TargetIdleReads))
	require.Equal(t, 60.0, rep.Idle.BaselineIntervalS)
	require.Equal(t, 43320.0, rep.Idle.BaselineReadsPerMonth, "43,200 polls and 120 endpoint reads")
	require.Equal(t, "PASS", rep.Targets[len(rep.Targets)-1].Verdict)
}

// TestReportPrintsMiss: the table names each target and says MISS plainly
// when one is missed.
func TestReportPrintsMiss(t *testing.T) {
	rep := Report{
		Mode: "quick",
		Intake: []IntakeResult{{Senders: 32, Ratio: 0.5,
			HTTP: Latency{PerSec: 500, P99Ms: 40}, Ceiling: Latency{PerSec: 1000, P99Ms: 10}}},
		Drain: []DrainResult{{Events: 20, Customers: 2, LatencyMs: 50, LimitShare: 0.99, RateLimit: 100, Allowed: 50, FetchesPerCustomer: 1,
			APIRequests: 1000, RateLimited: 3, LimitedPer1000: 3, Live: LiveResult{FetchesPerCustomer: 1.5, Refetched: 1}}},
		Sweep: []SweepResult{{Accounts: 1000, LatencyMs: 300, WallRatio: 2.5, CallReduction: 100}},
		Idle:  IdleResult{Allocation: 10000, ReadsPerMonth: 2498, BaselineReadsPerMonth: 43320, BaselineIntervalS: 60},
	}
	rep.evaluate()
	var out bytes.Buffer
	rep.Print(&out)
	verdicts := map[string]string{}
	for _, line := range strings.Split(out.String(), "\n") {
		for _, tg := range rep.Targets {
			if strings.HasPrefix(line, tg.Name+" ") {
				for _, v := range []string{"PASS", "MISS"} {
					if strings.Contains(line, " "+v+" ") {
						verdicts[tg.Name] = v
					}
				}
			}
		}
	}
	require.Equal(t, map[string]string{
		"intake throughput / ceiling, 32 senders":                               "MISS",
		"intake p99, 32 senders":                                                "MISS",
		"drain API requests/s / what its read operations allow, 50 ms":          "PASS",
		"drain 429s per 1,000 requests, 50 ms":                                  "MISS",
		"drain fetches per customer, burst stored first, 50 ms":                 "PASS",
		"drain fetches per customer, burst arriving live, 50 ms":                "MISS",
		"sweep wall time / list operation's minimum, 1000 accounts, 300 ms":     "MISS",
		"sweep per-account requests / list requests, 300 ms":                    "PASS",
		"idle events feed reads / 30 days, serve's defaults, 10000 reads/month": "PASS",
	}, verdicts, out.String())
	require.Contains(t, out.String(), "MISS: 5 of 9 targets missed")
}

// TestSweep1MProjection: from 100,000 accounts the bench judges the 1M
// projection, on billsync sweep's own process when it ran (the in-process
// sweep shares the fake's heap), else on the in-process sweep; below that
// size it does not judge one.
func TestSweep1MProjection(t *testing.T) {
	judged := func(sw SweepResult) (Target, bool) {
		rep := Report{Sweep: []SweepResult{sw}}
		rep.evaluate()
		for _, tg := range rep.Targets {
			if strings.HasPrefix(tg.Name, "sweep, 1M accounts projected") {
				return tg, true
			}
		}
		return Target{}, false
	}
	sw := SweepResult{Accounts: 100_000, RateLimit: 100, ListRate: 25, ListCalls: 1060, WallRatio: 1.19,
		CallReduction: 100, Projected1MSeconds: 504, Process: &ProcessSweep{Seconds: 43.4, Projected1MSeconds: 434}}
	tg, ok := judged(sw)
	require.True(t, ok)
	require.Contains(t, tg.Name, "billsync sweep, a process of its own")
	require.Equal(t, "PASS", tg.Verdict)
	require.InDelta(t, 434.0/60, tg.Value, 0.001)
	require.Contains(t, tg.Baseline, "the in-process sweep: 8.4 min")

	sw.Process = nil
	tg, ok = judged(sw)
	require.True(t, ok)
	require.Contains(t, tg.Name, "the in-process sweep")
	require.Equal(t, "MISS", tg.Verdict, "8.4 min")

	sw.Accounts = 20_000
	_, ok = judged(sw)
	require.False(t, ok, "too few accounts to project from")

	// The calls' time scales with the accounts; the run's excess over it
	// (its start and end) is added once.
	require.Equal(t, 216.0, project1M(24.93, 1064, 50, 100_000), "3.65 s + 10 × 21.28 s")
	require.Equal(t, 213.0, project1M(20, 1064, 50, 100_000), "no excess: never less than the calls need")
	require.Zero(t, project1M(1, 0, 50, 100_000))
}

// TestImportThenSweep: the sweep part first imports every customer into
// the empty database (a run of kind import, its reconciles triggered
// import), then sweeps the same accounts after 1% drifted; the import's
// figures are its own run's, counted at the fake.
func TestImportThenSweep(t *testing.T) {
	ctx := context.Background()
	st := storetest.NewStore(t)
	cfg := toy()
	res, err := runSweep(ctx, st, cfg)
	require.NoError(t, err)

	im := res.Import
	require.Equal(t, cfg.SweepAccounts, im.Accounts)
	require.Equal(t, cfg.SweepAccounts, im.Imported, "the import created every account")
	require.Len(t, storetest.Accounts(t, st), cfg.SweepAccounts)
	require.GreaterOrEqual(t, im.ListCalls, int64(3), "300 customers in pages of 100")
	require.LessOrEqual(t, im.ListCalls, int64(4), "and one call to find the end")
	require.Zero(t, im.RateLimited)
	require.Equal(t, round(float64(im.ListCalls)/cfg.listRate(), 2), im.ProviderBoundSeconds)
	require.Positive(t, im.WallRatio)
	require.Positive(t, im.Projected1MSeconds)

	runs, err := st.SweepRuns(ctx, 10)
	require.NoError(t, err)
	require.Len(t, runs, 2)
	require.Equal(t, []string{reconcile.RunSweep, reconcile.RunImport}, []string{runs[0].Kind, runs[1].Kind}, "newest first")
	require.Equal(t, []string{"succeeded", "succeeded"}, []string{runs[0].Status, runs[1].Status})
	triggers := map[string]int{}
	for _, l := range storetest.ReconcileLog(t, st) {
		triggers[l.Trigger]++
	}
	require.Equal(t, map[string]int{reconcile.TriggerImport: cfg.SweepAccounts, reconcile.TriggerSweep: res.Drifted}, triggers,
		"each account imported once, then each drifted one healed by the sweep")
	require.Equal(t, 3, res.Drifted)
	require.Equal(t, res.Drifted, res.Healed)
}

// TestImport1MProjection: an import is projected at the rate of its
// middle half, whether that is Stripe's list rate or its own writes, with
// its start and end paid once; a run too short for a middle half is
// scaled whole.
func TestImport1MProjection(t *testing.T) {
	flat := func(seconds, perSec int) []int {
		tl := make([]int, seconds)
		for i := range tl {
			tl[i] = perSec
		}
		return tl
	}
	// Bound by its writes: 20,000 customers in 200 calls over 50 s, two
	// calls (200 customers) a second in the middle.
	steady, projected := projectImport1M(50, 200, 20_000, flat(50, 2))
	require.Equal(t, 200.0, steady)
	require.Equal(t, 4950.0, projected, "50 s + 980,000 ÷ 200/s")
	require.Equal(t, 442.0, project1M(50, 200, 25, 20_000), "the sweep's projection scales the calls alone: 42 s + 400 s")

	// Bound by Stripe: 25 calls a second in the middle, after a slow start.
	tl := append([]int{2, 5}, flat(8, 25)...)
	steady, projected = projectImport1M(10, 200, 20_000, tl)
	require.Equal(t, 2500.0, steady)
	require.Equal(t, 402.0, projected, "10 s + 980,000 ÷ 2,500/s")

	steady, projected = projectImport1M(3, 30, 3000, []int{10, 10, 10})
	require.Equal(t, 1000.0, steady)
	require.Equal(t, 1000.0, projected, "too short: the whole run scaled")
	steady, projected = projectImport1M(3, 0, 3000, nil)
	require.Zero(t, steady)
	require.Zero(t, projected)
}

// BenchmarkIntake is `billsync bench`'s intake pair as a Go benchmark: the
// same engine sends b.N deliveries through each path from TargetSenders
// senders and reports the same figures, on the test cluster (fsync off, so
// not the command's numbers):
//
//	go test -bench Intake -run '^$' ./cmd/billsync/internal/bench
func BenchmarkIntake(b *testing.B) {
	in := startIntake(b, storetest.NewStore(b))
	for _, p := range []path{in.ceiling, in.http} {
		b.Run(p.name, func(b *testing.B) {
			plan, _, err := in.plan(p.name[:1], b.N)
			require.NoError(b, err)
			b.ResetTimer()
			t, err := in.measure(context.Background(), p, TargetSenders, plan)
			b.StopTimer()
			require.NoError(b, err)
			l := latencyOf(t.lat, t.took, t.cpu)
			b.ReportMetric(l.PerSec, "deliveries/s")
			b.ReportMetric(l.P50Ms, "p50-ms")
			b.ReportMetric(l.P99Ms, "p99-ms")
		})
	}
}
