package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/billsync/billsync/app"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store"
)

// defaultRetention is how long handled events (with their receipts), the
// reconcile log and the app's delivered changes are kept by default: a
// quarter of support history. Expired console sessions go whatever it is.
const defaultRetention = "90d"

// retentionFlag is a -older-than value: a Go duration, or whole days
// ("90d"). envErr is why its environment variable's value was refused;
// the flag, when given, replaces it.
type retentionFlag struct {
	d      time.Duration
	envErr error
}

// String writes whole days as days, as they are given ("90d"): flag's
// help shows it as the default, so it reads like the documented one.
func (r *retentionFlag) String() string {
	const day = 24 * time.Hour
	if r.d%day == 0 {
		return strconv.FormatInt(int64(r.d/day), 10) + "d"
	}
	return r.d.String()
}

func (r *retentionFlag) Set(v string) error {
	d, err := parseAge(v)
	r.d, r.envErr = d, nil
	return err
}

// fromEnv takes the default from the environment's value, keeping why it
// is wrong for the configuration's check.
func (r *retentionFlag) fromEnv(v string) {
	r.d, r.envErr = parseAge(v)
}

// parseAge reads "90d" (days) or a Go duration ("2160h").
func parseAge(v string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(v, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 0 || n > 100*365 {
			return 0, fmt.Errorf("%q: want whole days like 90d, or a duration like 2160h", v)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("%q: want whole days like 90d, or a duration like 2160h", v)
	}
	return d, nil
}

func runPrune(ctx context.Context, args []string, stdout io.Writer, logger *slog.Logger) error {
	fs := flag.NewFlagSet("prune", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `usage: billsync prune [flags]

Deletes what billsync no longer needs, in batches of short transactions
that skip rows in use: handled (applied or ignored) events last seen
before -older-than, with their payloads and receipts; reconcile log rows
and the app's changes (every delivery of theirs finished, every endpoint
past them) written before it; and expired console sessions. Pending and
dead events, the queue, accounts, the ledger and sweep runs are never
deleted. -older-than below %s is refused:
a provider may still retry such an event (Stripe for 3 days, Kinde within
KINDE_REPLAY_WINDOW), and its copy must be recognised. One prune runs at a
time across replicas. With -sizes it deletes nothing: it prints each
table's rows and bytes instead. See docs/retention.md.

`, reconcile.MinRetention)
		fs.PrintDefaults()
	}
	var cfg config
	cfg.bindCommon(fs, os.Getenv)
	var r reconcile.Retention
	age := retentionFlag{}
	if err := age.Set(cmp.Or(os.Getenv("BILLSYNC_PRUNE_OLDER_THAN"), defaultRetention)); err != nil {
		return fmt.Errorf("%w: BILLSYNC_PRUNE_OLDER_THAN %w", errUsage, err)
	}
	fs.Var(&age, "older-than", "delete handled events, log rows and delivered account changes older than this: days (90d) or a duration (env BILLSYNC_PRUNE_OLDER_THAN)")
	fs.IntVar(&r.Batch, "batch", reconcile.DefaultPruneBatch, "rows one statement deletes (each batch is its own short transaction)")
	sizes := fs.Bool("sizes", false, "only report, delete nothing: each table's rows (counted; ~ marks PostgreSQL's estimate for a large table) and bytes (pg_total_relation_size)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *sizes {
		return reportSizes(ctx, fs, cfg, stdout, logger)
	}
	r.OlderThan = age.d
	if err := r.Validate(); err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	st, closeDB, err := openDatabase(ctx, cfg, logger)
	if err != nil {
		return err
	}
	defer closeDB()
	if err := prepareSchema(ctx, st, true, logger); err != nil {
		return err
	}
	p, err := st.Prune(ctx, r)
	printPruned(stdout, p)
	if err != nil {
		return err
	}
	if *sizes {
		return printSizes(ctx, stdout, st)
	}
	return nil
}

// reportSizes is prune -sizes: a report only reads, so it prunes nothing,
// and a prune flag given with it is refused rather than ignored (a
// "prune --older-than 90d -sizes" once pruned, then reported).
func reportSizes(ctx context.Context, fs *flag.FlagSet, cfg config, stdout io.Writer, logger *slog.Logger) error {
	var pruneFlags []string
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "older-than" || f.Name == "batch" {
			pruneFlags = append(pruneFlags, "-"+f.Name)
		}
	})
	if len(pruneFlags) > 0 {
		return fmt.Errorf("%w: -sizes only reports and deletes nothing: run prune with %s, and prune -sizes alone",
			errUsage, strings.Join(pruneFlags, " "))
	}
	st, closeDB, err := openDatabase(ctx, cfg, logger)
	if err != nil {
		return err
	}
	defer closeDB()
	return printSizes(ctx, stdout, st)
}

func printPruned(w io.Writer, p reconcile.Pruned) {
	fmt.Fprintf(w, "pruned before %s: %d events, %d receipts, %d reconcile log rows, %d app changes, %d samples, %d connected accounts' sweep runs, %d expired sessions (%d batches, at most %d rows each)\n",
		p.Cutoff.UTC().Format(time.RFC3339), p.Events, p.Receipts, p.LogRows, p.Changes, p.Samples, p.SweepRuns, p.Sessions, p.Batches, p.MaxInBatch)
}

// printSizes prints each table's rows and bytes. A row count is exact
// unless marked ~ (PostgreSQL's estimate, as of the table's last ANALYZE);
// a large table never analyzed has no figure.
func printSizes(ctx context.Context, w io.Writer, st *store.Store) error {
	sizes, err := st.TableSizes(ctx)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "table\trows\tbytes\tbytes/row\t")
	estimated := false
	for _, s := range sizes {
		rows := strconv.FormatInt(s.Rows, 10)
		switch {
		case s.Exact:
		case s.Rows < 0:
			rows, estimated = "not analyzed", true
		default:
			rows, estimated = "~"+rows, true
		}
		per := "-"
		if s.Rows > 0 {
			per = strconv.FormatInt(s.Bytes/s.Rows, 10)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t\n", s.Table, rows, s.Bytes, per)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if estimated {
		fmt.Fprintln(w, "rows are counted; ~ is PostgreSQL's estimate for a large table, as of its last ANALYZE (not analyzed: none yet)")
	}
	return nil
}

// parsePruneSchedule reads -prune-schedule: a cron spec, or off (nil).
func parsePruneSchedule(spec string) (cron.Schedule, error) {
	s, err := app.ParseSchedule(spec)
	if err != nil {
		return nil, fmt.Errorf("BILLSYNC_PRUNE_SCHEDULE %q: want a five-field cron spec like \"30 4 * * *\" (UTC), or off: %w", spec, err)
	}
	return s, nil
}
