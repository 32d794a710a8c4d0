//go:build !release

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

	"github.com/billsync/billsync/cmd/billsync/internal/demo"
)

func runDemo(ctx context.Context, args []string, stdout io.Writer, logger *slog.Logger) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), `usage: billsync demo [--provider stripe|kinde] [--connect] [flags]

Plays the seed scenario with no setup: nine deliveries of three events
(the Pro plan change three times, the payment five times, an older
cancellation that arrives last), with the process killed during the first
plan change. Each delivery goes to billsync and, side by side, to a naive
handler that applies each message as it arrives (the foil). billsync uses
the embedded PostgreSQL (a fresh database of its own) and an in-process fake
provider: Stripe (its events) or, with --provider kinde, Kinde (its signed
JWT webhooks customer.plan_changed, customer.payment_succeeded and
customer.agreement_cancelled). With --connect the Stripe scenario is
played on a Stripe Connect account: its events reach billsync through the
Connect endpoint, and billsync reads the customer on the account's behalf.
Without -once it then keeps serving and prints where to look.`)
		fs.PrintDefaults()
	}
	var cfg config
	cfg.bindCommon(fs, os.Getenv)
	provider := fs.String("provider", "stripe", "whose events the scenario plays: stripe or kinde")
	connect := fs.Bool("connect", false, "play the Stripe scenario on a connected account (Stripe Connect)")
	once := fs.Bool("once", false, "exit after the scenario: status 0 only if billsync ended right")
	asJSON := fs.Bool("json", false, "print the final state as JSON instead of tables")
	addr := fs.String("addr", os.Getenv("BILLSYNC_ADDR"), "where billsync listens for webhooks (default 127.0.0.1:8080; 127.0.0.1:0 with -once)")
	consoleAddr := fs.String("console-addr", os.Getenv("BILLSYNC_CONSOLE_ADDR"), "where the support console listens (default 127.0.0.1:8081; 127.0.0.1:0 with -once)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	dcfg := demo.Config{Addr: *addr, ConsoleAddr: cmp.Or(*consoleAddr, "127.0.0.1:8081"), Logger: logger, Provider: *provider, Connect: *connect}
	if *once {
		dcfg.Addr, dcfg.ConsoleAddr = cmp.Or(*addr, "127.0.0.1:0"), cmp.Or(*consoleAddr, "127.0.0.1:0")
	}
	if err := dcfg.Validate(); err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	// The demo's own story is on stdout; billsync's logs only say what went wrong.
	if os.Getenv("BILLSYNC_LOG_LEVEL") == "" {
		dcfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError + 1}))
	}

	if !*asJSON {
		fake := "Stripe"
		if *connect {
			fake = "Stripe with a connected account"
		}
		if *provider == "kinde" {
			fake = "Kinde"
		}
		fmt.Fprintf(stdout, "billsync demo: starting PostgreSQL, a fake %s and billsync…\n", fake)
	}
	dbURL, stopCluster, err := databaseURL(ctx, cfg, dcfg.Logger)
	if err != nil {
		return err
	}
	defer stopCluster()
	d, err := demo.Start(ctx, dbURL, dcfg)
	if err != nil {
		return err
	}
	defer d.Close()

	res, err := d.Play(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		err = json.NewEncoder(stdout).Encode(res)
	} else {
		err = res.Print(stdout)
	}
	if err != nil {
		return err
	}
	if !res.Billsync.Right {
		return errors.New("billsync did not end in the right state: this is a bug")
	}
	if *once {
		return nil
	}
	d.Where().PrintServing(stdout, res.Customer)
	d.Serve(ctx)
	return nil
}
