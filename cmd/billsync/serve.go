package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/billsync/billsync/app"
)

func runServe(ctx context.Context, args []string, stdout io.Writer, logger *slog.Logger) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), `usage: billsync serve [flags]

Verifies webhooks and stores them in PostgreSQL before answering 200, and
runs the workers that reconcile each signalled customer against its
provider's API. Stripe is on with STRIPE_WEBHOOK_SECRET and STRIPE_API_KEY,
or with STRIPE_API_KEY alone on the events feed (webhook-free; see
docs/events-feed.md); Kinde with KINDE_DOMAIN, KINDE_CLIENT_ID and
KINDE_CLIENT_SECRET; at least one must be. With STRIPE_API_KEY, one replica
also lists Stripe's events every -events-poll as a second signal. Each
secret also as *_FILE; see docs/configuration.md.`)
		fs.PrintDefaults()
	}
	var cfg config
	cfg.bindServe(fs, os.Getenv)
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg.ownsCluster = true
	if err := errors.Join(cfg.loadSecrets(os.Getenv), cfg.validateServe()); err != nil {
		return fmt.Errorf("configuration:\n%w", err)
	}
	plans, err := loadPlans(cfg.PlansPath)
	if err != nil {
		return err
	}
	st, closeDB, err := openDatabase(ctx, cfg, logger)
	if err != nil {
		return err
	}
	defer closeDB()
	if err := prepareSchema(ctx, st, cfg.NoMigrate, logger); err != nil {
		return err
	}
	a, err := app.New(ctx, cfg.app(), app.Parts{Store: st, Plans: plans, Logger: logger, Stdout: stdout})
	if err != nil {
		return err
	}
	return a.Run(ctx)
}
