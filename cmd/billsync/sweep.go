package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/billsync/billsync/app"
	"github.com/billsync/billsync/providers/stripe"
	"github.com/billsync/billsync/reconcile"
)

// defaultSweepSchedule is nightly at 03:00 UTC.
const defaultSweepSchedule = "0 3 * * *"

func runSweep(ctx context.Context, args []string, stdout io.Writer, logger *slog.Logger) error {
	fs := flag.NewFlagSet("sweep", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), `usage: billsync sweep [flags]

Runs one sweep of each configured provider now. Stripe: lists every
customer with their current subscriptions in bulk (100 customers a
request), applies each customer's state where billsync's account differs
(a dropped or failed webhook), and queues the accounts the listing did not
cover. Kinde lists no customer's state: the sweep finds every Kinde
customer (users with billing, then organisations), known to billsync or
not, and queues each for serve's workers, then every known account not
found, spaced by -kinde-sweep-pace so the workers' fetches for it keep to
half of -kinde-rate. One sweep of a provider runs at a time across replicas; a run
a crashed sweeper left resumes from its cursor. Uses serve's configuration
(DATABASE_URL, STRIPE_API_KEY, STRIPE_API_URL, KINDE_DOMAIN,
KINDE_CLIENT_ID, KINDE_CLIENT_SECRET, BILLSYNC_PLANS). A provider never
imported (no sweep or import of it ever succeeded) is imported instead:
the same listing, recorded as imported (see billsync import). With
-stripe-account acct_…, sweeps only that Stripe Connect account's customers, on
its behalf (a run, lease and cursor of its own; see docs/connect.md).
Exits non-zero when a sweep fails.`)
		fs.PrintDefaults()
	}
	return runListing(ctx, fs, args, stdout, logger, reconcile.RunSweep)
}

// runListing runs a run of kind (a sweep, an import) of each configured
// provider, or of -provider's, one after the other, and prints each
// report: billsync sweep and billsync import.
func runListing(ctx context.Context, fs *flag.FlagSet, args []string, stdout io.Writer, logger *slog.Logger, kind string) error {
	var cfg config
	cfg.bindCommon(fs, os.Getenv)
	cfg.bindReconcile(fs, os.Getenv) // the run's list calls take at most half of -stripe-rate
	cfg.bindSweep(fs)
	only := fs.String("provider", "", kind+" only this provider (stripe or kinde); default every configured one")
	account := fs.String("stripe-account", "", kind+" only this Stripe Connect account's customers (acct_…; needs -stripe-connect)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *account != "" {
		*only = stripe.Provider
	}
	sup, closeSupport, err := openSupport(ctx, cfg, logger)
	if err != nil {
		return err
	}
	defer closeSupport()
	p := newProgress(stdout)
	sweepers, err := sup.providers.Sweepers(sup.st, sup.plans, logger, sup.cfg.Config, *only, app.SweepHooks{OnPage: p.page})
	if err != nil {
		return err
	}
	if *account != "" {
		sweeperOf := app.AccountSweeper(sup.cfg.Config, sup.providers, sweepers)
		if sweeperOf == nil {
			return fmt.Errorf("-stripe-account %s: %w", *account, reconcile.ErrNoAccountSweeps)
		}
		sw, err := sweeperOf(*account)
		if err != nil {
			return fmt.Errorf("-stripe-account: %w", err)
		}
		sweepers = []*reconcile.Sweeper{sw}
	}
	var errs []error
	for _, sweeper := range sweepers {
		rep, err := sweeper.RunKind(ctx, kind)
		p.done()
		if errors.Is(err, reconcile.ErrSweepRunning) {
			errs = append(errs, fmt.Errorf("%w (another replica or command holds the sweep lock: a sweep or an import)", err))
			continue
		}
		if kind == reconcile.RunSweep && rep.Run.Kind == reconcile.RunImport && rep.Run.ID != 0 {
			why := "never imported: this sweep ran as its import (see docs/import.md)"
			if rep.Run.Resumed {
				why = "an import was left running: this sweep resumed it"
			}
			fmt.Fprintf(stdout, "%s %s\n", sweepName(sweeper), why)
		}
		printSweepReport(stdout, sweepName(sweeper), rep, err)
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// sweepName names the sweeper's provider, and its Stripe Connect account
// when it sweeps one ("stripe acct_X").
func sweepName(s *reconcile.Sweeper) string {
	if s.Account() == "" {
		return s.Provider()
	}
	return s.Provider() + " " + s.Account()
}

// progress prints a sweep's progress: one line rewritten in place on a
// terminal, else a plain line every tenth page (a million customers
// are ten thousand pages). It never repeats the summary that follows: off
// a terminal the first line comes after ten pages, not after the first
// (a sweep of one page printed its figures twice), and on a terminal the
// line is erased when the sweep ends.
type progress struct {
	w     io.Writer
	tty   bool
	pages int
	begin time.Time
}

func newProgress(w io.Writer) *progress {
	p := &progress{w: w, begin: time.Now()}
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			p.tty = true
		}
	}
	return p
}

func (p *progress) page(run reconcile.SweepRun) {
	p.pages++
	line := fmt.Sprintf("%s %d: %d customers seen, %d %s, %d failed (%s)",
		cmp.Or(run.Kind, reconcile.RunSweep), run.ID, run.Seen, run.Healed, changedWord(run.Kind), run.Failed, time.Since(p.begin).Round(time.Second))
	if run.Progress > 0 { // -1: the lister cannot tell
		line += fmt.Sprintf(", about %d%% listed", int(run.Progress*100))
	}
	switch {
	case p.tty:
		fmt.Fprintf(p.w, "\r\033[K%s", line)
	case p.pages%10 == 0:
		fmt.Fprintln(p.w, line)
	}
}

func (p *progress) done() {
	if p.tty && p.pages > 0 {
		fmt.Fprint(p.w, "\r\033[K")
	}
}

func printSweepReport(w io.Writer, provider string, rep reconcile.SweepReport, err error) {
	r := rep.Run
	status := "succeeded"
	if err != nil {
		status = "FAILED: " + err.Error()
	}
	resumed := ""
	if r.Resumed {
		resumed = " (resumed)"
	}
	kind := cmp.Or(r.Kind, reconcile.RunSweep)
	fmt.Fprintf(w, "%s %s %d%s %s\n", provider, kind, r.ID, resumed, status)
	if rep.Finding {
		// Found, not listed: serve's workers fetch and apply each.
		fmt.Fprintf(w, "  found %d customers in %d pages; queued %d for serve's workers (the found, then the known accounts not found), %s\n",
			r.Seen, rep.Calls, rep.Enqueued, rep.Took.Round(time.Millisecond))
	} else {
		fmt.Fprintf(w, "  seen %d, %s %d, failed %d, queued %d not listed, %d list calls, %s\n",
			r.Seen, changedWord(kind), r.Healed, r.Failed, rep.Enqueued, rep.Calls, rep.Took.Round(time.Millisecond))
	}
	if kind == reconcile.RunImport && rep.Calls == 0 {
		fmt.Fprintln(w, "  no bulk listing: every known account was queued for serve's workers, as a sweep does")
	}
	for _, h := range rep.Healed {
		fmt.Fprintf(w, "  healed %s: %s → %s (%s; cause: %s)\n", h.CustomerID,
			reconcile.DescribeAccount(h.Before), reconcile.DescribeAccount(h.After), h.Outcome, h.Cause)
	}
	if kind == reconcile.RunSweep && r.Healed > len(rep.Healed) {
		fmt.Fprintf(w, "  … and %d more healed (each logged)\n", r.Healed-len(rep.Healed))
	}
}

// changedWord names what a run of kind did to the accounts it wrote.
func changedWord(kind string) string {
	if kind == reconcile.RunImport {
		return "imported"
	}
	return "healed"
}

// parseSweepSchedule validates a -sweep-schedule: a standard five-field
// cron spec in UTC, or "off".
func parseSweepSchedule(spec string) (cron.Schedule, error) {
	s, err := app.ParseSchedule(spec)
	if err == nil && spec == "" {
		err = errors.New("empty spec string")
	}
	if err != nil {
		return nil, fmt.Errorf("BILLSYNC_SWEEP_SCHEDULE %q: want a five-field cron spec like %q (UTC), or off: %w", spec, defaultSweepSchedule, err)
	}
	return s, nil
}
