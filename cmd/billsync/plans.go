package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"

	"github.com/billsync/billsync/app"
	"github.com/billsync/billsync/providers/stripe"
	"github.com/billsync/billsync/reconcile"
)

// readPlansFile returns the plans file at path, or the built-in example.
func readPlansFile(path string) ([]byte, error) {
	if path == "" {
		return reconcile.ExamplePlans, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("BILLSYNC_PLANS: %w", err)
	}
	return data, nil
}

// loadPlans reads the plans file at path, or the built-in example.
func loadPlans(path string) (*reconcile.Plans, error) {
	data, err := readPlansFile(path)
	if err != nil {
		return nil, err
	}
	plans, err := reconcile.ParsePlans(data)
	if err != nil {
		return nil, fmt.Errorf("BILLSYNC_PLANS %s: %w", path, err)
	}
	return plans, nil
}

// errUnmappedPrices makes `plans check` exit non-zero: an active price no
// plan maps would leave its subscribers' accounts ignored.
var errUnmappedPrices = errors.New("active Stripe prices map to no plan")

func runPlans(ctx context.Context, args []string, stdout io.Writer, logger *slog.Logger) error {
	fs := flag.NewFlagSet("plans check", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), `usage: billsync plans check [flags]

Lists the Stripe account's active prices (one API request per 100 prices)
and compares them with the plans file: prints every active price no plan
maps (by lookup key or price id) and every plan reference that matches no
active price. Exits non-zero when an active price is unmapped: its
subscribers' accounts would be ignored. Reads STRIPE_API_KEY (or
STRIPE_API_KEY_FILE), STRIPE_API_URL and BILLSYNC_PLANS.`)
		fs.PrintDefaults()
	}
	if len(args) == 0 || args[0] != "check" {
		fs.Usage()
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
			return flag.ErrHelp
		}
		return fmt.Errorf("%w: billsync plans check", errUsage)
	}
	var cfg config
	cfg.bindReconcile(fs, os.Getenv)
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if err := cfg.requireStripeKey(os.Getenv, ": plans check lists the account's prices"); err != nil {
		return err
	}
	plans, err := loadPlans(cfg.PlansPath)
	if err != nil {
		return err
	}
	client, err := app.NewStripeClient(cfg.Config, nil, logger, nil)
	if err != nil {
		return err
	}
	prices, err := client.ActivePrices(ctx, plans.ReadsProductPlans())
	if err != nil {
		return err
	}
	rep := checkPlans(plans, prices)
	rep.print(stdout)
	if len(rep.unmapped) > 0 {
		return fmt.Errorf("%w: %d of %d", errUnmappedPrices, len(rep.unmapped), len(prices))
	}
	return nil
}

// planRef is one Stripe reference a plan names.
type planRef struct{ plan, ref string }

// plansReport is what `plans check` found.
type plansReport struct {
	active   int
	unmapped []stripe.Price // active prices no plan maps
	stale    []planRef      // plan refs that match no active price
}

func checkPlans(plans *reconcile.Plans, prices []stripe.Price) plansReport {
	rep := plansReport{active: len(prices)}
	known := map[string]bool{}
	for _, p := range prices {
		if _, ok := plans.ForItem(stripe.Provider, "", p.Item()); !ok {
			rep.unmapped = append(rep.unmapped, p)
		}
		for _, r := range p.Refs() {
			known[r] = true
		}
	}
	for _, pl := range plans.List() {
		for _, ref := range pl.StripePrices {
			if !known[ref] {
				rep.stale = append(rep.stale, planRef{pl.Name, ref})
			}
		}
	}
	slices.SortFunc(rep.unmapped, func(a, b stripe.Price) int { return strings.Compare(a.ID, b.ID) })
	return rep
}

func (rep plansReport) print(w io.Writer) {
	fmt.Fprintf(w, "active Stripe prices: %d\n", rep.active)
	if len(rep.unmapped) == 0 {
		fmt.Fprintln(w, "every active price maps to a plan")
	} else {
		fmt.Fprintf(w, "active prices that map to no plan (%d): add their lookup key or id to a plan's stripe_prices\n", len(rep.unmapped))
		for _, p := range rep.unmapped {
			fmt.Fprintf(w, "  %s\n", p)
		}
	}
	if len(rep.stale) > 0 {
		fmt.Fprintf(w, "plan references that match no active price (%d): archived prices, or typos\n", len(rep.stale))
		for _, r := range rep.stale {
			fmt.Fprintf(w, "  plan %s: %s\n", r.plan, r.ref)
		}
	}
}
