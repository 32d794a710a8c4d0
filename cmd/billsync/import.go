package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"

	"github.com/billsync/billsync/reconcile"
)

func runImport(ctx context.Context, args []string, stdout io.Writer, logger *slog.Logger) error {
	fs := flag.NewFlagSet("import", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), `usage: billsync import [flags]

Imports each configured provider's customers now (serve does it by itself
at start for a provider never imported; see docs/import.md). Stripe: lists
every customer with their current subscriptions in bulk (100 customers a
request) and writes each account through the same decision as a
reconcile, recorded as imported (trigger import), not as drift. Kinde
lists no customer's state: its import finds every Kinde customer (users
with billing, 100 a request; organisations, one request each) and queues
each, known to billsync or not, for serve's workers (trigger import,
spaced by -kinde-sweep-pace), then every known account not found. An
import takes the sweep's
lease: one sweep or import of a provider runs at a time across replicas
(when one runs elsewhere it says so and exits non-zero), and a run
stopped or killed resumes from its cursor. Progress is logged every few
seconds; a summary is printed at the end. Uses serve's configuration
(DATABASE_URL, STRIPE_API_KEY, STRIPE_API_URL, KINDE_DOMAIN,
KINDE_CLIENT_ID, KINDE_CLIENT_SECRET, BILLSYNC_PLANS). Exits non-zero when
an import fails.`)
		fs.PrintDefaults()
	}
	return runListing(ctx, fs, args, stdout, logger, reconcile.RunImport)
}
