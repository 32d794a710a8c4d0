// Command billsync keeps an app's billing state equal to what its billing
// provider says. See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	// The container image is FROM scratch: no /etc/ssl, no OS trust store.
	// This bundles Mozilla's roots (as curated by the Go team), used only
	// when the system has none, so the same static binary reaches Stripe
	// and Kinde over TLS in the image and on any host.
	_ "golang.org/x/crypto/x509roots/fallback"
)

// command is one subcommand: run gets the arguments after its name.
type command struct {
	name, summary string
	run           func(ctx context.Context, args []string, stdout io.Writer, logger *slog.Logger) error
}

func commands() []command {
	return []command{
		{"demo", "play the seed scenario (copies, a late event, a crash) through billsync and a naive handler", runDemo},
		{"serve", "verify and store webhooks, and reconcile customers against the provider (embedded PostgreSQL when DATABASE_URL is unset)", runServe},
		{"sweep", "run one sweep now: list every customer with their subscriptions in bulk and heal accounts that drifted from the provider", runSweep},
		{"import", "import each provider's customers now (serve does it at start when a provider was never imported); resumable, one at a time across replicas", runImport},
		{"migrate", "apply pending database migrations and exit", runMigrate},
		{"resync", "reconcile one customer now (by customer, account, user or email); --dry-run shows the diff", runResync},
		{"replay", "reconcile a stored event's customer again, now; harmless by design", runReplay},
		{"plans", "check the plans file against the provider: 'plans check' lists active prices no plan maps", runPlans},
		{"stripe", "'stripe setup --url …' creates or updates the webhook endpoint; 'stripe check' checks the key, the endpoint and the plans", runStripe},
		{"prune", "delete what is older than -older-than (default 90d), in small batches: handled events and their receipts, reconcile log rows, delivered account changes, expired console sessions", runPrune},
		{"mock", "run the fake Stripe and the fake Kinde (real wire protocols, signed webhooks, fault knobs)", runMock},
		{"healthcheck", "ask a running serve's /readyz; exit 0 when ready (for orchestrators without HTTP probes)", runHealthcheck},
		{"bench", "measure intake, drain, latency, sweep, heal and idle cost against baselines measured in the same run", runBench},
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(exitCode(err, os.Stderr))
}

// exitCode says how run's err ends the process, and what it says first on
// stderr: nothing for success or help; 2 for a usage error, with its reason
// (a bare errUsage has had its usage printed already); 1 for the rest.
func exitCode(err error, stderr io.Writer) int {
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		if err != errUsage { //nolint:errorlint // a bare errUsage says nothing more
			fmt.Fprintln(stderr, "billsync:", strings.TrimPrefix(err.Error(), errUsage.Error()+": "))
		}
		return 2
	default:
		fmt.Fprintln(stderr, "billsync:", err)
		return 1
	}
}

var errUsage = errors.New("usage")

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	logger, err := newLogger(stderr, os.Getenv)
	if err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return errUsage
		}
		return nil
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(ctx, args[1:], stdout, logger)
		}
	}
	fmt.Fprintf(stderr, "billsync: unknown command %q\n\n", args[0])
	usage(stderr)
	return errUsage // said above
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: billsync <command> [flags]\n\ncommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-11s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'billsync <command> --help' for a command's flags.")
}

// newLogger returns billsync's one logger: text for people (the default),
// or JSON lines for log aggregators (BILLSYNC_LOG_FORMAT=json), at
// BILLSYNC_LOG_LEVEL (default info).
func newLogger(w io.Writer, getenv func(string) string) (*slog.Logger, error) {
	level := slog.LevelInfo
	if v := getenv("BILLSYNC_LOG_LEVEL"); v != "" {
		if err := level.UnmarshalText([]byte(v)); err != nil {
			return nil, fmt.Errorf("BILLSYNC_LOG_LEVEL %q: want debug, info, warn or error", v)
		}
	}
	opts := &slog.HandlerOptions{Level: level}
	switch f := getenv("BILLSYNC_LOG_FORMAT"); f {
	case "", "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	default:
		return nil, fmt.Errorf("BILLSYNC_LOG_FORMAT %q: want text or json", f)
	}
}
