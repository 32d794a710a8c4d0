//go:build !release

package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/billsync/billsync/cmd/billsync/internal/bench"
)

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

// benchLatencies is the comma-separated -latency flag.
type benchLatencies []time.Duration

func (l *benchLatencies) String() string {
	parts := make([]string, len(*l))
	for i, d := range *l {
		parts[i] = d.String()
	}
	return strings.Join(parts, ",")
}

func (l *benchLatencies) Set(v string) error {
	*l = nil
	for _, f := range strings.Split(v, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(f))
		if err != nil {
			return fmt.Errorf("want latencies like 50ms,300ms: %w", err)
		}
		*l = append(*l, d)
	}
	return nil
}

// benchHidden are tuning flags kept out of --help: they change what is
// measured, so the figures would no longer be the issue's.
var benchHidden = map[string]bool{
	"senders": true, "intake-deliveries": true, "rounds": true, "drain-events": true,
	"customers": true, "workers": true, "batch": true, "latency": true, "rate": true, "operation-rate": true, "pool-conns": true,
	"sweep-accounts": true, "only": true, "cpuprofile": true, "sweep-parallel": true, "baseline-workers": true, "load-for": true,
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
The fake enforces Stripe's documented limits on a live key (100 req/s in
all, 25 req/s each API operation, 429 over them) and billsync's client
runs at serve's defaults for that key. drain, latency and sweep run at
50 ms and at 300 ms provider latency:

  drain   a burst of events over many customers, reconciled with serve's
          defaults; compared with what its two read operations allow
          (2 × 25 req/s), counting 429s, and with a worker bounded at 8
          in flight (serve's old fixed loops); then a second burst posted
          through the intake while the workers run
  latency deliveries posted through the intake at half of what the read
          operations allow for -load-for: webhook → applied p50/p99,
          compared with the provider's latency and with the 8-in-flight
          baseline
  sweep   first the import: every customer at the fake listed into an
          empty database (a run of kind import, as serve's first start
          runs it) at the list operation's 25 req/s; then every account
          re-read in bulk at the same rate, 1% of them drifted (plan
          changed, webhook lost). Each compared with the time its list
          calls need at that rate; the sweep also with the requests of
          reconciling each account one by one
  heal    plan changes at the fake timed until their accounts show them:
          by webhook (the baseline), then with every webhook dropped and
          the events feed alone, at the interval the read budget of an
          account at the 10,000-read floor gives (its times ÷ 100)
  idle    the events feed's reads over 30 days on an account where
          nothing happens, at serve's defaults and the 10,000-read floor;
          compared with the same feed without a read budget

  drift   only with -only drift (minutes of wall time): silent changes
          (no webhook, no event listed) timed until their accounts show
          them, by the nightly sweep alone (the sweep over 1,000 and
          10,000 accounts measured, the wait for it computed) and by the
          correctness sample at its default share (measured in compressed
          time at 1,000 accounts with a large read allocation); and the
          sample's reads at serve's defaults. Each figure says whether it
          was measured or computed. Run one latency at a time
          (-latency 50ms, then -latency 300ms) to keep a run near 4 min.

  connect only with -only connect (a few minutes): one round of every
          Stripe Connect account's events feed, as serve runs it
          (-stripe-connect all, a pool of 8), over 1,000 and 10,000
          accounts: 1,000 polls timed (the round over 10,000 computed
          from their rate), against the events list's 25 req/s and a
          pool of 1 measured in the same run; with the round the read
          budget allows (computed)

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
	bc := bench.Config{Logger: logger}
	asJSON := fs.Bool("json", false, "print the results as JSON instead of a table")
	fs.BoolVar(&bc.Full, "full", false, "the issue's sizes (senders 1, 8 and 32; 10,000 events over 1,000 customers; an import and a sweep of 100,000 accounts): a few minutes")
	fs.Var((*benchSenders)(&bc.Senders), "senders", "intake sender counts, comma-separated")
	fs.IntVar(&bc.IntakeDeliveries, "intake-deliveries", 0, "intake deliveries per path, round and sender count")
	fs.IntVar(&bc.Rounds, "rounds", 0, "intake rounds per sender count (paths alternate which goes first)")
	fs.IntVar(&bc.DrainEvents, "drain-events", 0, "drain: events to store before the workers start")
	fs.IntVar(&bc.Customers, "customers", 0, "drain: customers the events are spread over")
	fs.IntVar(&bc.SweepAccounts, "sweep-accounts", 0, "sweep: customers at the fake, imported, then swept with 1% of them drifted (default 20,000; 100,000 with -full)")
	fs.StringVar(&bc.Only, "only", "", "run one part alone: intake, drain, latency, sweep, heal, idle, drift or connect")
	fs.DurationVar(&bc.LoadFor, "load-for", 0, "latency: how long the steady load (half the rate limit) is posted (default 10s, 30s with -full)")
	fs.StringVar(&bc.CPUProfile, "cpuprofile", "", "write the measured sweep's CPU profile to this file")
	fs.IntVar(&bc.SweepParallel, "sweep-parallel", 0, "sweep: list requests in flight (0: adapting, serve's default; 1: one page at a time)")
	fs.IntVar(&bc.Workers, "workers", 0, "drain and latency: the most fetches in flight (default: serve's -workers)")
	fs.IntVar(&bc.BaselineWorkers, "baseline-workers", 0, "drain: the baseline measured in the same run, a worker bounded at this many in flight (default 8: serve's old fixed loops; -1 skips it)")
	fs.IntVar(&bc.Batch, "batch", 0, "drain: claimed jobs kept waiting beyond those in flight, at least (default: the worker's, reconcile.DefaultBatch)")
	fs.IntVar(&bc.PoolConns, "pool-conns", 0, "database connections of the bench pools (default: as serve gets them)")
	fs.Var((*benchLatencies)(&bc.Latencies), "latency", "drain, latency and sweep: the latencies the fake adds to every API request, comma-separated, each a run (default 50ms,300ms)")
	fs.Float64Var(&bc.RateLimit, "rate", 0, "the Stripe account's global rate, requests per second, at the fake and in the client (default a live key's, 100)")
	fs.Float64Var(&bc.OperationRate, "operation-rate", 0, "each Stripe API operation's rate, requests per second, at the fake and in the client (default Stripe's 25)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: bench takes no arguments, got %q", errUsage, fs.Args())
	}
	if err := bc.Validate(); err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	// billsync's own footprint: its sweep in a process of its own. Not
	// from a test binary, which would run its tests instead.
	if self, err := os.Executable(); err == nil && !strings.HasSuffix(self, ".test") {
		bc.SweepCommand = []string{self, "sweep"}
	}
	bc.Database = "DATABASE_URL"
	if cfg.DatabaseURL == "" {
		bc.Database = "embedded PostgreSQL (durable: fsync and synchronous_commit on)"
	}

	dbURL, stopCluster, err := databaseURL(ctx, cfg, logger)
	if err != nil {
		return err
	}
	defer stopCluster()
	rep, err := bench.Run(ctx, dbURL, bc)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	rep.Print(stdout)
	return nil
}
