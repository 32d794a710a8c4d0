package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/billsync/billsync/reconcile"
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
	err = withBenchDatabase(ctx, dbURL, fmt.Sprintf("billsync_bench_%d_intake", stamp), o.PoolConns, logger, func(st *store.Store) error {
		var err error
		rep.Intake, err = benchIntake(ctx, st, o, logger)
		return err
	})
	if err != nil {
		return err
	}
	err = withBenchDatabase(ctx, dbURL, fmt.Sprintf("billsync_bench_%d_drain", stamp), o.PoolConns, logger, func(st *store.Store) error {
		var err error
		rep.Drain, err = benchDrain(ctx, st, plans, o, logger)
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
func withBenchDatabase(ctx context.Context, dbURL, name string, conns int, logger *slog.Logger, fn func(*store.Store) error) error {
	// The pool serve would have, on the new database: the pool size
	// changes both paths' latency under many senders.
	st, drop, err := store.CreateDatabase(ctx, dbURL, name, store.Options{MaxConns: int32(conns)})
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
	if _, err := st.Migrate(ctx); err != nil {
		return fmt.Errorf("migrate bench database %s: %w", name, err)
	}
	return fn(st)
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
