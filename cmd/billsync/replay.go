package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"

	"github.com/billsync/billsync/reconcile"
)

func runReplay(ctx context.Context, args []string, stdout io.Writer, logger *slog.Logger) error {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), `usage: billsync replay [flags] EVENT_ID

Reconciles a stored event's customer again, now (trigger replay), and says
what happened. EVENT_ID is billsync's event id (digits) or the provider's
event id. Replaying is harmless: the payload is never applied, the
customer's current state is read from the provider, and every write is
keyed or guarded, so replaying an applied event changes nothing and says
"no change". Configuration as for resync.`)
		fs.PrintDefaults()
	}
	var cfg config
	cfg.bindCommon(fs, os.Getenv)
	cfg.bindReconcile(fs, os.Getenv)
	provider := fs.String("provider", "stripe", "the provider of a provider event id")
	dryRun := fs.Bool("dry-run", false, "show what would change, write nothing")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return fmt.Errorf("%w: replay: want one EVENT_ID", errUsage)
	}
	sup, closeDB, err := openSupport(ctx, cfg, logger)
	if err != nil {
		return err
	}
	defer closeDB()
	ev, err := findEvent(ctx, sup, *provider, fs.Arg(0))
	if err != nil {
		return err
	}
	if ev.CustomerID == "" {
		return fmt.Errorf("event %d (%s %s) names no customer, so there is nothing to replay; it is %s: %s",
			ev.ID, ev.Provider, ev.Type, ev.Status, ev.Outcome)
	}
	fmt.Fprintf(stdout, "replaying event %d (%s %s, %s, seen %d×): %s\n", ev.ID, ev.Provider, ev.Type, ev.Status, ev.SeenCount, orDash(ev.Outcome))
	return sup.reconcileNow(ctx, reconcile.Request{Provider: ev.Provider, CustomerID: ev.CustomerID,
		Trigger: reconcile.TriggerReplay, Actor: cliActor(), DryRun: *dryRun}, stdout)
}

// findEvent looks ref up as billsync's id (digits), else as the
// provider's event id or dedupe key.
func findEvent(ctx context.Context, sup *support, provider, ref string) (reconcile.StoredEvent, error) {
	var ev reconcile.StoredEvent
	var err error
	if id, perr := strconv.ParseInt(ref, 10, 64); perr == nil {
		ev, err = sup.st.Event(ctx, id)
	} else {
		ev, err = sup.st.EventByKey(ctx, provider, ref)
	}
	if errors.Is(err, reconcile.ErrNotFound) {
		return ev, fmt.Errorf("no stored event %q (billsync's id, or the %s event id): %w", ref, provider, reconcile.ErrNotFound)
	}
	return ev, err
}
