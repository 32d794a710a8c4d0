package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stripe/stripe-go/v82/webhook"

	stripemock "github.com/billsync/billsync/mocks/stripe"
	"github.com/billsync/billsync/providers/stripe"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/server"
	"github.com/billsync/billsync/store"
)

// The targets the bench measures against (see BENCHMARKS.md).
const (
	benchTargetIntakeRatio = 0.8                   // intake throughput / ceiling, at benchTargetSenders
	benchTargetIntakeP99   = 20 * time.Millisecond // intake p99, at benchTargetSenders
	benchTargetLimitShare  = 0.95                  // drain: API requests/s as a share of the client's limit
	benchTargetFetches     = 1.1                   // drain: provider fetches per customer per burst
	benchTargetSenders     = 32

	benchCopyShare       = 0.3 // share of intake deliveries that are copies of another delivery's event
	benchSecret          = "whsec_billsync_bench"
	benchIntakeCustomers = 1000 // customers the intake's events are spread over
)

// benchOptions sizes a run. Zero values take the mode's defaults.
type benchOptions struct {
	Full             bool
	Senders          []int
	IntakeDeliveries int // per path, per round, per sender count
	Rounds           int
	DrainEvents      int
	Customers        int
	Workers          int
	Batch            int
	Latency          time.Duration
	RateLimit        float64
	// PoolConns is the bench pools' size; 0 = what serve gets on the same
	// URL (its pool_max_conns, else pgx's default: max(4, CPUs)).
	PoolConns int
}

func (o benchOptions) withDefaults() benchOptions {
	if o.Full {
		if len(o.Senders) == 0 {
			o.Senders = []int{1, 8, benchTargetSenders}
		}
		o.IntakeDeliveries = cmp.Or(o.IntakeDeliveries, 10000)
		o.Rounds = cmp.Or(o.Rounds, 3)
		o.DrainEvents = cmp.Or(o.DrainEvents, 10000)
		o.Customers = cmp.Or(o.Customers, 1000)
	} else {
		if len(o.Senders) == 0 {
			o.Senders = []int{benchTargetSenders}
		}
		o.IntakeDeliveries = cmp.Or(o.IntakeDeliveries, 4000)
		o.Rounds = cmp.Or(o.Rounds, 2)
		o.DrainEvents = cmp.Or(o.DrainEvents, 2000)
		o.Customers = cmp.Or(o.Customers, 200)
	}
	o.Workers = cmp.Or(o.Workers, 16)
	o.Batch = cmp.Or(o.Batch, reconcile.DefaultBatch) // as serve runs it
	o.Latency = cmp.Or(o.Latency, 50*time.Millisecond)
	o.RateLimit = cmp.Or(o.RateLimit, 100)
	return o
}

func (o benchOptions) validate() error {
	var errs []error
	for _, n := range o.Senders {
		if n < 1 {
			errs = append(errs, errors.New("-senders: each count must be 1 or more"))
			break
		}
	}
	if o.IntakeDeliveries < 10 || o.Rounds < 1 {
		errs = append(errs, errors.New("-intake-deliveries must be 10 or more and -rounds 1 or more"))
	}
	if o.Customers < 1 || o.DrainEvents < o.Customers {
		errs = append(errs, errors.New("-customers must be 1 or more and -drain-events at least -customers"))
	}
	if o.Workers < 1 || o.Batch < 1 || o.Latency < 0 || o.RateLimit <= 0 || o.PoolConns < 0 {
		errs = append(errs, errors.New("-workers and -batch must be 1 or more, -latency and -pool-conns not negative, -rate positive"))
	}
	return errors.Join(errs...)
}

// benchSenders is the comma-separated -senders flag.
type benchSenders []int

func (s *benchSenders) String() string {
	parts := make([]string, len(*s))
	for i, n := range *s {
		parts[i] = strconv.Itoa(n)
	}
	return strings.Join(parts, ",")
}

func (s *benchSenders) Set(v string) error {
	*s = nil
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return fmt.Errorf("want counts like 1,8,32: %w", err)
		}
		*s = append(*s, n)
	}
	return nil
}

// benchHidden are tuning flags kept out of --help: they change what is
// measured, so the figures would no longer be the issue's.
var benchHidden = map[string]bool{
	"senders": true, "intake-deliveries": true, "rounds": true, "drain-events": true,
	"customers": true, "workers": true, "batch": true, "latency": true, "rate": true, "pool-conns": true,
}

func runBench(ctx context.Context, args []string, stdout io.Writer, logger *slog.Logger) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), `usage: billsync bench [flags]

Measures billsync on this machine, each figure against a baseline measured
in the same run, in a fresh database of its own (dropped at the end; the
operator's tables are never touched) and with an in-process fake Stripe:

  intake  concurrent senders post signed deliveries (30% copies) over HTTP;
          compared with the same store transaction called directly
  drain   a burst of events over many customers, reconciled against the
          fake with 50 ms latency through a client limited to 100 req/s;
          then a second burst posted through the intake while the
          workers run

It prints each figure, its target and PASS or MISS, and exits 0 either way.

flags:`)
		fs.VisitAll(func(f *flag.Flag) {
			if benchHidden[f.Name] {
				return
			}
			def := ""
			if f.DefValue != "" && f.DefValue != "false" {
				def = fmt.Sprintf(" (default %q)", f.DefValue)
			}
			fmt.Fprintf(fs.Output(), "  -%s\n    \t%s%s\n", f.Name, f.Usage, def)
		})
	}
	var cfg config
	cfg.bindCommon(fs, os.Getenv)
	var o benchOptions
	asJSON := fs.Bool("json", false, "print the results as JSON instead of a table")
	fs.BoolVar(&o.Full, "full", false, "the issue's sizes (senders 1, 8 and 32; 10,000 events over 1,000 customers): a few minutes")
	fs.Var((*benchSenders)(&o.Senders), "senders", "intake sender counts, comma-separated")
	fs.IntVar(&o.IntakeDeliveries, "intake-deliveries", 0, "intake deliveries per path, round and sender count")
	fs.IntVar(&o.Rounds, "rounds", 0, "intake rounds per sender count (paths alternate which goes first)")
	fs.IntVar(&o.DrainEvents, "drain-events", 0, "drain: events to store before the workers start")
	fs.IntVar(&o.Customers, "customers", 0, "drain: customers the events are spread over")
	fs.IntVar(&o.Workers, "workers", 0, "drain: reconcile loops")
	fs.IntVar(&o.Batch, "batch", 0, "drain: jobs claimed at once per loop (default: the worker's, reconcile.DefaultBatch)")
	fs.IntVar(&o.PoolConns, "pool-conns", 0, "database connections of the bench pools (default: as serve gets them)")
	fs.DurationVar(&o.Latency, "latency", 0, "drain: latency the fake adds to every API request")
	fs.Float64Var(&o.RateLimit, "rate", 0, "drain: the Stripe client's requests per second")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: bench takes no arguments, got %q", errUsage, fs.Args())
	}
	o = o.withDefaults()
	if err := o.validate(); err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	plans, err := loadPlans("")
	if err != nil {
		return err
	}

	dbURL, stopCluster, err := databaseURL(ctx, cfg, logger)
	if err != nil {
		return err
	}
	defer stopCluster()

	rep := benchReport{
		Mode:      map[bool]string{false: "quick", true: "full"}[o.Full],
		CPUs:      runtime.NumCPU(),
		GoVersion: runtime.Version(),
		Database:  map[bool]string{false: "DATABASE_URL", true: "embedded PostgreSQL (durable: fsync and synchronous_commit on)"}[cfg.DatabaseURL == ""],
		StartedAt: time.Now().UTC().Truncate(time.Second),
	}
	started := time.Now()
	stamp := time.Now().Unix()
	if o.PoolConns == 0 {
		pc, err := pgxpool.ParseConfig(dbURL)
		if err != nil {
			return fmt.Errorf("parse database url: %w", err)
		}
		o.PoolConns = int(pc.MaxConns)
	}
	rep.PoolConns = o.PoolConns
	// Each part gets a database of its own: the intake leaves its
	// customers queued, which the drain must not see.
	err = withBenchDatabase(ctx, dbURL, fmt.Sprintf("billsync_bench_%d_intake", stamp), o.PoolConns, logger, func(pool *pgxpool.Pool) error {
		var err error
		rep.Intake, err = benchIntake(ctx, pool, o, logger)
		return err
	})
	if err != nil {
		return err
	}
	err = withBenchDatabase(ctx, dbURL, fmt.Sprintf("billsync_bench_%d_drain", stamp), o.PoolConns, logger, func(pool *pgxpool.Pool) error {
		var err error
		rep.Drain, err = benchDrain(ctx, pool, plans, o, logger)
		return err
	})
	if err != nil {
		return err
	}
	rep.Seconds = benchRound(time.Since(started).Seconds(), 1)
	rep.evaluate()

	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	rep.print(stdout)
	return nil
}

// withBenchDatabase runs fn on a fresh, migrated database called name,
// through a pool of conns connections, and drops the database afterwards,
// whatever happened.
func withBenchDatabase(ctx context.Context, dbURL, name string, conns int, logger *slog.Logger, fn func(*pgxpool.Pool) error) error {
	created, drop, err := store.CreateDatabase(ctx, dbURL, name)
	if err != nil {
		return err
	}
	defer func() {
		dropCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if err := drop(dropCtx); err != nil {
			logger.Error("drop bench database", slog.String("database", name), slog.Any("error", err))
		}
	}()
	// The pool serve would have, on the new database: the pool size
	// changes both paths' latency under many senders.
	pcfg := created.Config()
	pcfg.MaxConns = int32(conns)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return fmt.Errorf("open bench database %s: %w", name, err)
	}
	defer pool.Close()
	if _, err := store.Migrate(ctx, pool); err != nil {
		return fmt.Errorf("migrate bench database %s: %w", name, err)
	}
	return fn(pool)
}

// ---- report ----

type benchReport struct {
	Mode      string         `json:"mode"`
	CPUs      int            `json:"cpus"`
	GoVersion string         `json:"go_version"`
	Database  string         `json:"database"`
	PoolConns int            `json:"pool_conns"`
	StartedAt time.Time      `json:"started_at"`
	Seconds   float64        `json:"seconds"`
	Intake    []benchIntake1 `json:"intake"`
	Drain     benchDrainRes  `json:"drain"`
	Targets   []benchTarget  `json:"targets"`
	Missed    int            `json:"missed"`
}

// benchTarget is one measured figure against its target.
type benchTarget struct {
	Name     string  `json:"name"`
	Value    float64 `json:"value"`
	Unit     string  `json:"unit"`
	Target   string  `json:"target"`
	Pass     bool    `json:"pass"`
	Verdict  string  `json:"verdict"` // PASS or MISS
	Baseline string  `json:"baseline,omitempty"`
}

func (r *benchReport) evaluate() {
	add := func(t benchTarget) {
		t.Verdict = map[bool]string{true: "PASS", false: "MISS"}[t.Pass]
		if !t.Pass {
			r.Missed++
		}
		r.Targets = append(r.Targets, t)
	}
	// The intake targets are set at 32 senders; a run without 32 is judged
	// at its largest count, and says so in the name.
	var at *benchIntake1
	for i := range r.Intake {
		if at == nil || r.Intake[i].Senders == benchTargetSenders ||
			(at.Senders != benchTargetSenders && r.Intake[i].Senders > at.Senders) {
			at = &r.Intake[i]
		}
	}
	if at != nil {
		add(benchTarget{
			Name: fmt.Sprintf("intake throughput / ceiling, %d senders", at.Senders), Value: at.Ratio, Unit: "ratio",
			Target: fmt.Sprintf(">= %.2f", benchTargetIntakeRatio), Pass: at.Ratio >= benchTargetIntakeRatio,
			Baseline: fmt.Sprintf("ceiling %.0f deliveries/s, intake %.0f deliveries/s", at.Ceiling.PerSec, at.HTTP.PerSec),
		})
		add(benchTarget{
			Name: fmt.Sprintf("intake p99, %d senders", at.Senders), Value: at.HTTP.P99Ms, Unit: "ms",
			Target:   fmt.Sprintf("<= %d ms", benchTargetIntakeP99.Milliseconds()),
			Pass:     at.HTTP.P99Ms <= float64(benchTargetIntakeP99.Milliseconds()),
			Baseline: fmt.Sprintf("ceiling p99 %.1f ms", at.Ceiling.P99Ms),
		})
	}
	d := r.Drain
	add(benchTarget{
		Name: "drain API requests/s / client limit", Value: d.LimitShare, Unit: "share",
		Target: fmt.Sprintf(">= %.0f%%", benchTargetLimitShare*100), Pass: d.LimitShare >= benchTargetLimitShare,
		Baseline: fmt.Sprintf("%.1f of %.0f req/s", d.APIRequestsPerSec, d.RateLimit),
	})
	add(benchTarget{
		Name: "drain fetches per customer, burst stored first", Value: d.FetchesPerCustomer, Unit: "fetches",
		Target: fmt.Sprintf("<= %.1f", benchTargetFetches), Pass: d.FetchesPerCustomer <= benchTargetFetches,
		Baseline: fmt.Sprintf("%d events over %d customers", d.Events, d.Customers),
	})
	add(benchTarget{
		Name: "drain fetches per customer, burst arriving live", Value: d.Live.FetchesPerCustomer, Unit: "fetches",
		Target: fmt.Sprintf("<= %.1f", benchTargetFetches), Pass: d.Live.FetchesPerCustomer <= benchTargetFetches,
		Baseline: fmt.Sprintf("%d customers fetched more than once", d.Live.Refetched),
	})
}

func (r *benchReport) print(w io.Writer) {
	fmt.Fprintf(w, "billsync bench (%s): %d CPUs, %s, %s, pools of %d connections, %.0f s\n\n",
		r.Mode, r.CPUs, r.GoVersion, r.Database, r.PoolConns, r.Seconds)
	if len(r.Intake) > 0 {
		first := r.Intake[0]
		fmt.Fprintf(w, "INTAKE: %d deliveries per path and round (%d%% copies, %d customers), %d rounds, paths alternating first\n",
			first.Deliveries, int(benchCopyShare*100), benchIntakeCustomers, first.Rounds)
		fmt.Fprintln(w, "  ceiling = store.StoreDelivery called directly (same transaction, no HTTP, no signature check)")
		fmt.Fprintln(w, "  bench CPU = this process (senders, HTTP server, pgx); machine busy = all CPUs, PostgreSQL included")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "  senders\tpath\tdeliveries/s\tp50 ms\tp99 ms\tmax ms\tratio\tbench CPU µs/delivery\tmachine busy\t")
		row := func(senders int, path string, l benchLatency, ratio string) {
			fmt.Fprintf(tw, "  %d\t%s\t%.0f\t%.1f\t%.1f\t%.1f\t%s\t%.0f\t%.0f%%\t\n",
				senders, path, l.PerSec, l.P50Ms, l.P99Ms, l.MaxMs, ratio, l.ProcessCPUus, l.MachineBusy*100)
		}
		for _, in := range r.Intake {
			row(in.Senders, "ceiling", in.Ceiling, "")
			row(in.Senders, "HTTP intake", in.HTTP, fmt.Sprintf("%.3f", in.Ratio))
		}
		tw.Flush()
		fmt.Fprintln(w)
	}
	d := r.Drain
	fmt.Fprintf(w, "DRAIN: %d events over %d customers, stored with %s; fake Stripe latency %s, client limit %.0f req/s, %d workers (batch %d)\n",
		d.Events, d.Customers, d.StoredVia, time.Duration(d.LatencyMs*float64(time.Millisecond)), d.RateLimit, d.Workers, d.Batch)
	fmt.Fprintf(w, "  queue empty after %.2f s: %d API requests = %.1f req/s = %.1f%% of the %.0f req/s limit\n",
		d.Seconds, d.APIRequests, d.APIRequestsPerSec, d.LimitShare*100, d.RateLimit)
	fmt.Fprintf(w, "  %d reconciles = %.1f reconciles/s (each costs %.1f requests, so the limit allows at most %.1f/s)\n",
		d.Reconciles, d.ReconcilesPerSec, d.RequestsPerReconcile, d.MaxReconcilesPerSec)
	fmt.Fprintf(w, "  %d provider fetches for %d customers = %.2f per customer; %d answers 429; %d connections opened to the fake\n",
		d.Fetches, d.Customers, d.FetchesPerCustomer, d.RateLimited, d.Connections)
	fmt.Fprintf(w, "  events: %d applied, %d pending; setup: seeding the fake %.1f s, storing events %.1f s\n",
		d.EventsApplied, d.EventsPending, d.SeedSeconds, d.StoreSeconds)
	l := d.Live
	fmt.Fprintf(w, "  live: %d more events posted through the HTTP intake by %d senders, each customer's burst back to back,\n", l.Events, l.Senders)
	fmt.Fprintf(w, "    while the workers ran (woken after each delivery): posted in %.2f s, queue empty after %.2f s;\n", l.PostSeconds, l.Seconds)
	fmt.Fprintf(w, "    %d fetches for %d customers = %.2f per customer (%d customers fetched more than once)\n\n",
		l.Fetches, l.Customers, l.FetchesPerCustomer, l.Refetched)

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TARGET\tMEASURED\tTARGET\tRESULT\tBASELINE (same run)")
	for _, t := range r.Targets {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", t.Name, t.formatValue(), t.Target, t.Verdict, t.Baseline)
	}
	tw.Flush()
	if r.Missed > 0 {
		fmt.Fprintf(w, "\nMISS: %d of %d targets missed (a measurement: the exit status is 0 anyway)\n", r.Missed, len(r.Targets))
	} else {
		fmt.Fprintf(w, "\nall %d targets met\n", len(r.Targets))
	}
}

func (t benchTarget) formatValue() string {
	switch t.Unit {
	case "ms":
		return fmt.Sprintf("%.1f ms", t.Value)
	case "share":
		return fmt.Sprintf("%.1f%%", t.Value*100)
	default:
		return fmt.Sprintf("%.3f", t.Value)
	}
}

// ---- intake ----

// benchIntake1 is the intake at one sender count.
type benchIntake1 struct {
	Senders      int           `json:"senders"`
	Rounds       int           `json:"rounds"`
	Deliveries   int           `json:"deliveries"`    // per path and round, timed
	UniqueEvents int           `json:"unique_events"` // per path and round
	Copies       int           `json:"copies"`        // per path and round
	HTTP         benchLatency  `json:"http"`
	Ceiling      benchLatency  `json:"ceiling"`
	Ratio        float64       `json:"ratio"` // HTTP deliveries/s over ceiling deliveries/s
	RoundRatios  []float64     `json:"round_ratios"`
	Check        benchIntakeOK `json:"check"`
}

// benchIntakeOK compares what was sent with what the database holds, over
// every round and both paths (warm-up deliveries included).
type benchIntakeOK struct {
	SentDeliveries   int `json:"sent_deliveries"`
	SentUniqueEvents int `json:"sent_unique_events"`
	StoredEvents     int `json:"stored_events"`
	Receipts         int `json:"receipts"`
	SeenCountSum     int `json:"seen_count_sum"`
}

// benchLatency is one path's figures over all its rounds.
type benchLatency struct {
	Deliveries int     `json:"deliveries"`
	Seconds    float64 `json:"seconds"`
	PerSec     float64 `json:"deliveries_per_sec"`
	P50Ms      float64 `json:"p50_ms"`
	P99Ms      float64 `json:"p99_ms"`
	MaxMs      float64 `json:"max_ms"`
	// ProcessCPUus is this process's CPU time (user+system: senders,
	// HTTP server, pgx) per delivery, in microseconds.
	ProcessCPUus float64 `json:"process_cpu_us_per_delivery"`
	// MachineBusy is the share of all CPUs busy during the timed runs
	// (PostgreSQL included); 0 where /proc/stat is unreadable.
	MachineBusy float64 `json:"machine_busy"`
}

func latencyOf(lat []time.Duration, elapsed time.Duration, cpu benchCPU) benchLatency {
	slices.Sort(lat)
	pct := func(q float64) float64 {
		if len(lat) == 0 {
			return 0
		}
		i := int(math.Ceil(q*float64(len(lat)))) - 1
		return benchRound(float64(lat[max(i, 0)])/float64(time.Millisecond), 2)
	}
	l := benchLatency{Deliveries: len(lat), Seconds: benchRound(elapsed.Seconds(), 3), P50Ms: pct(0.5), P99Ms: pct(0.99), MaxMs: pct(1)}
	if elapsed > 0 {
		l.PerSec = benchRound(float64(len(lat))/elapsed.Seconds(), 1)
	}
	if len(lat) > 0 {
		l.ProcessCPUus = benchRound(float64(cpu.process)/float64(time.Microsecond)/float64(len(lat)), 1)
	}
	if cpu.total > 0 {
		l.MachineBusy = benchRound(float64(cpu.busy)/float64(cpu.total), 3)
	}
	return l
}

// benchCPU is CPU time spent: by this process, and by the whole machine
// (busy and total jiffies from /proc/stat).
type benchCPU struct {
	process     time.Duration
	busy, total uint64
}

func benchCPUNow() benchCPU {
	var c benchCPU
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		c.process = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return c
	}
	line, _, _ := strings.Cut(string(b), "\n")
	fields := strings.Fields(line)
	if len(fields) < 5 || fields[0] != "cpu" {
		return c
	}
	for i, f := range fields[1:] {
		n, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return benchCPU{process: c.process}
		}
		if i >= 8 { // guest time is already counted in user time
			break
		}
		c.total += n
		if i != 3 && i != 4 { // idle, iowait
			c.busy += n
		}
	}
	return c
}

func (c benchCPU) sub(o benchCPU) benchCPU {
	return benchCPU{c.process - o.process, c.busy - o.busy, c.total - o.total}
}

func (c benchCPU) add(o benchCPU) benchCPU {
	return benchCPU{c.process + o.process, c.busy + o.busy, c.total + o.total}
}

// benchDelivery is one delivery, ready for both paths: signed for HTTP and
// already verified for the direct call, so neither timed loop prepares
// anything.
type benchDelivery struct {
	body     []byte
	header   string
	delivery reconcile.Delivery
}

// benchPlan returns n deliveries with ids under prefix: 70% distinct events
// and 30% copies of one of them (Stripe re-signs every copy), shuffled, so a
// copy may race its original.
func benchPlan(prefix string, n int, seed uint64, verifier *stripe.Verifier) ([]benchDelivery, int, error) {
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	copies := int(math.Round(float64(n) * benchCopyShare))
	unique := n - copies
	bodies := make([][]byte, 0, n)
	for i := range unique {
		bodies = append(bodies, benchEventBody(fmt.Sprintf("evt_%s_%06d", prefix, i),
			fmt.Sprintf("cus_bench_%04d", rng.IntN(benchIntakeCustomers)), i))
	}
	for range copies {
		bodies = append(bodies, bodies[rng.IntN(unique)])
	}
	rng.Shuffle(len(bodies), func(i, j int) { bodies[i], bodies[j] = bodies[j], bodies[i] })
	out := make([]benchDelivery, len(bodies))
	now := time.Now()
	for i, body := range bodies {
		header := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: benchSecret, Timestamp: now}).Header
		d, err := verifier.Verify(http.Header{"Stripe-Signature": {header}}, body)
		if err != nil {
			return nil, 0, fmt.Errorf("bench delivery does not verify: %w", err)
		}
		d.RemoteAddr = "127.0.0.1:40000" // the intake stores the sender's address too
		out[i] = benchDelivery{body: body, header: header, delivery: d}
	}
	return out, unique, nil
}

var benchEventTypes = []struct{ typ, object string }{
	{"customer.subscription.updated", "subscription"},
	{"invoice.paid", "invoice"},
	{"customer.subscription.created", "subscription"},
	{"invoice.payment_succeeded", "invoice"},
	{"customer.updated", "customer"},
}

// benchEventBody is a Stripe-shaped event of about 1.3 KB (real ones are
// 1-5 KB; the body is stored byte for byte).
func benchEventBody(id, customer string, n int) []byte {
	et := benchEventTypes[n%len(benchEventTypes)]
	objID, cust := fmt.Sprintf("%s_%s", et.object[:3], id[4:]), fmt.Sprintf("%q", customer)
	if et.object == "customer" {
		objID = customer
		cust = "null"
	}
	now := time.Now().Unix()
	return fmt.Appendf(nil, `{"id":%q,"object":"event","api_version":"2025-08-27.basil","created":%d,"type":%q,`+
		`"livemode":false,"pending_webhooks":1,"request":{"id":"req_%s","idempotency_key":"%s-idem"},`+
		`"data":{"object":{"id":%q,"object":%q,"customer":%s,"status":"active","cancel_at_period_end":false,`+
		`"collection_method":"charge_automatically","currency":"usd","created":%d,"livemode":false,`+
		`"items":{"object":"list","data":[{"id":"si_%s","object":"subscription_item","quantity":1,`+
		`"current_period_start":%d,"current_period_end":%d,"price":{"id":"price_pro","object":"price",`+
		`"lookup_key":"pro","unit_amount":2000,"currency":"usd","type":"recurring","active":true,`+
		`"recurring":{"interval":"month","interval_count":1,"usage_type":"licensed"}}}],"has_more":false,"total_count":1},`+
		`"metadata":{"user_id":"user_%s","source":"billsync bench"}},`+
		`"previous_attributes":{"items":{"data":[{"price":{"id":"price_free","lookup_key":"free","unit_amount":0}}]}}}}`,
		id, now, et.typ, id[4:], id[4:], objID, et.object, cust, now, id[4:], now, now+30*86400, customer)
}

// benchIntake measures, at each sender count, the HTTP intake against the
// same store transaction called directly, in alternating rounds.
func benchIntake(ctx context.Context, pool *pgxpool.Pool, o benchOptions, logger *slog.Logger) ([]benchIntake1, error) {
	st := store.New(pool)
	verifier, err := stripe.NewVerifier([]string{benchSecret}, 0)
	if err != nil {
		return nil, err
	}
	post, stopHTTP, err := benchHTTPIntake(st, verifier)
	if err != nil {
		return nil, err
	}
	defer stopHTTP()
	direct := func(ctx context.Context, d benchDelivery) error {
		_, err := st.StoreDelivery(ctx, d.delivery)
		return err
	}
	paths := map[string]func(context.Context, benchDelivery) error{"ceiling": direct, "http": post}

	var results []benchIntake1
	phase := 0
	for _, senders := range o.Senders {
		res := benchIntake1{Senders: senders, Rounds: o.Rounds, Deliveries: o.IntakeDeliveries}
		before, err := st.Stats(ctx)
		if err != nil {
			return nil, err
		}
		lat := map[string][]time.Duration{}
		elapsed := map[string]time.Duration{}
		cpu := map[string]benchCPU{}
		for r := range o.Rounds {
			order := []string{"ceiling", "http"}
			if r%2 == 1 {
				order = []string{"http", "ceiling"}
			}
			perSec := map[string]float64{}
			for _, path := range order {
				phase++
				prefix := fmt.Sprintf("%s%d", path[:1], phase)
				// Warm-up: connections (HTTP and pool) opened, caches
				// filled; stored but not timed.
				warm, warmUnique, err := benchPlan(prefix+"w", max(4*senders, 20), uint64(phase)<<1, verifier)
				if err != nil {
					return nil, err
				}
				if _, _, err := benchSend(ctx, senders, len(warm), func(ctx context.Context, i int) error { return paths[path](ctx, warm[i]) }); err != nil {
					return nil, fmt.Errorf("intake warm-up (%s, %d senders): %w", path, senders, err)
				}
				plan, unique, err := benchPlan(prefix, o.IntakeDeliveries, uint64(phase)<<1|1, verifier)
				if err != nil {
					return nil, err
				}
				cpu0 := benchCPUNow()
				l, took, err := benchSend(ctx, senders, len(plan), func(ctx context.Context, i int) error { return paths[path](ctx, plan[i]) })
				if err != nil {
					return nil, fmt.Errorf("intake (%s, %d senders): %w", path, senders, err)
				}
				cpu[path] = cpu[path].add(benchCPUNow().sub(cpu0))
				lat[path] = append(lat[path], l...)
				elapsed[path] += took
				perSec[path] = float64(len(l)) / took.Seconds()
				res.UniqueEvents, res.Copies = unique, len(plan)-unique
				res.Check.SentDeliveries += len(warm) + len(plan)
				res.Check.SentUniqueEvents += warmUnique + unique
				logger.Info("bench intake", slog.Int("senders", senders), slog.Int("round", r+1), slog.String("path", path),
					slog.Float64("deliveries_per_sec", benchRound(perSec[path], 1)))
			}
			res.RoundRatios = append(res.RoundRatios, benchRound(perSec["http"]/perSec["ceiling"], 3))
		}
		res.HTTP = latencyOf(lat["http"], elapsed["http"], cpu["http"])
		res.Ceiling = latencyOf(lat["ceiling"], elapsed["ceiling"], cpu["ceiling"])
		res.Ratio = benchRound(res.HTTP.PerSec/res.Ceiling.PerSec, 3)

		after, err := st.Stats(ctx)
		if err != nil {
			return nil, err
		}
		res.Check.StoredEvents = after.Events - before.Events
		res.Check.Receipts = after.Receipts - before.Receipts
		res.Check.SeenCountSum = after.SeenCountSum - before.SeenCountSum
		if c := res.Check; c.StoredEvents != c.SentUniqueEvents || c.Receipts != c.SentDeliveries || c.SeenCountSum != c.SentDeliveries {
			return nil, fmt.Errorf("intake at %d senders lost work: sent %d deliveries of %d events, stored %d events, %d receipts, seen_count sum %d",
				senders, c.SentDeliveries, c.SentUniqueEvents, c.StoredEvents, c.Receipts, c.SeenCountSum)
		}
		results = append(results, res)
	}
	return results, nil
}

// benchHTTPIntake serves billsync's intake on a loopback port and returns
// a function that posts a delivery to it as Stripe would (its own
// keep-alive connection per sender) and fails on any answer but 200.
func benchHTTPIntake(st *store.Store, verifier *stripe.Verifier) (post func(context.Context, benchDelivery) error, stop func(), err error) {
	// The server logs every delivery at info, as in production; the
	// formatting is part of the cost, the output is not wanted.
	srvLogger := slog.New(slog.NewTextHandler(io.Discard, nil))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, fmt.Errorf("bench intake listener: %w", err)
	}
	hs := &http.Server{
		Handler:           server.New(server.Config{Logger: srvLogger, Inbox: st, Verifiers: []server.Verifier{verifier}}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	go hs.Serve(ln) //nolint:errcheck // ends with Close
	endpoint := "http://" + ln.Addr().String() + "/webhooks/stripe"
	transport := &http.Transport{MaxIdleConns: 512, MaxIdleConnsPerHost: 512, IdleConnTimeout: time.Minute, DisableCompression: true}
	client := &http.Client{Transport: transport, Timeout: time.Minute}
	post = func(ctx context.Context, d benchDelivery) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(d.body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Stripe-Signature", d.header)
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("intake answered %d: %s", resp.StatusCode, bytes.TrimSpace(body))
		}
		return nil
	}
	stop = func() {
		transport.CloseIdleConnections()
		hs.Close() //nolint:errcheck // bench teardown: every request has been answered
	}
	return post, stop, nil
}

// benchSend calls send for 0..n-1 from senders goroutines and returns each
// call's latency and the wall time from the first start to the last answer.
// Any failure fails the run: a bench that loses deliveries measures nothing.
func benchSend(ctx context.Context, senders, n int, send func(ctx context.Context, i int) error) ([]time.Duration, time.Duration, error) {
	var (
		next     atomic.Int64
		mu       sync.Mutex
		all      = make([]time.Duration, 0, n)
		failed   int
		firstErr error
		wg       sync.WaitGroup
	)
	start := time.Now()
	for range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := make([]time.Duration, 0, n/senders+1)
			var errs int
			var err1 error
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					break
				}
				t0 := time.Now()
				if err := send(ctx, i); err != nil {
					errs++
					err1 = cmp.Or(err1, err)
					continue
				}
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			all = append(all, mine...)
			failed += errs
			if firstErr == nil {
				firstErr = err1
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	took := time.Since(start)
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	if failed > 0 {
		return nil, 0, fmt.Errorf("%d of %d calls failed, first: %w", failed, n, firstErr)
	}
	return all, took, nil
}

// ---- drain ----

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
func benchDrain(ctx context.Context, pool *pgxpool.Pool, plans *reconcile.Plans, o benchOptions, logger *slog.Logger) (benchDrainRes, error) {
	res := benchDrainRes{
		Events: o.DrainEvents, Customers: o.Customers, StoredVia: "store.StoreDelivery (no HTTP)",
		LatencyMs: float64(o.Latency) / float64(time.Millisecond), RateLimit: o.RateLimit,
		Workers: o.Workers, Batch: o.Batch, Outcomes: map[string]int{},
	}
	st := store.New(pool)

	fake := stripemock.New(stripemock.Options{})
	defer fake.Close()
	for _, p := range defaultMockPrices {
		fake.AddPrice(p.id, p.lookupKey, p.amount)
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
	queued, err := st.QueueLength(ctx)
	if err != nil {
		return res, err
	}
	if queued != len(customers) {
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
	worker := reconcile.NewWorker(reconcile.WorkerConfig{
		Name: "bench", Store: st, Providers: []reconcile.Provider{provider}, Plans: plans,
		Logger:      slog.New(slog.NewTextHandler(io.Discard, nil)), // as in production, minus the output
		Concurrency: o.Workers, Batch: o.Batch,
		OnOutcome: func(_ reconcile.Job, out reconcile.Outcome) {
			outcomesMu.Lock()
			res.Outcomes[string(out.Result)]++
			outcomesMu.Unlock()
		},
	})

	reqs0, limited0, conns0 := counted.requests.Load(), counted.limited.Load(), counted.conns.Load()
	runCtx, stopWorkers := context.WithCancel(ctx)
	done := make(chan struct{})
	start := time.Now()
	go func() { defer close(done); _ = worker.Run(runCtx) }()
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
	worker := reconcile.NewWorker(reconcile.WorkerConfig{
		Name: "bench-live", Store: st, Providers: []reconcile.Provider{provider}, Plans: plans,
		Logger: quiet, Concurrency: o.Workers, Batch: o.Batch,
	})
	runCtx, stopWorkers := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = worker.Run(runCtx) }()
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
			n, err := st.QueueLength(ctx)
			if err != nil {
				return 0, err
			}
			if n == 0 {
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
