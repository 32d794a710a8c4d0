package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/billsync/billsync/app"
	"github.com/billsync/billsync/providers/stripe"
	"github.com/billsync/billsync/reconcile"
)

// errStripeCheck: `stripe check` found something to fix (exit 1).
var errStripeCheck = errors.New("stripe check found problems")

func runStripe(ctx context.Context, args []string, stdout io.Writer, logger *slog.Logger) error {
	usage := `usage: billsync stripe setup --url https://<host>/webhooks/stripe
       billsync stripe check [--url https://<host>/webhooks/stripe]

setup creates the Stripe webhook endpoint at the URL (or updates the one
already there) subscribed to exactly the event types billsync acts on, with
the API version billsync pins, and prints its signing secret once (Stripe
answers it on creation only: put it in STRIPE_WEBHOOK_SECRET).

check reports, and exits 1 on any problem: whether the key can read
customers, subscriptions, events and webhook endpoints (a restricted key
missing a permission is named); whether the endpoint (STRIPE_WEBHOOK_ENDPOINT_ID,
else the one at --url, else every endpoint whose URL ends in
/webhooks/stripe) exists, is enabled, subscribes to every needed type and
pins billsync's API version; the plans check (billsync plans check); and,
with DATABASE_URL set, the read budget: the reads every replica recorded
over Stripe's rolling 30 days, their pace, and whether it stays within the
read allocation (-stripe-read-allocation, or derived from the transactions
billsync stored; docs/stripe-budget.md).

Reads STRIPE_API_KEY (or STRIPE_API_KEY_FILE), STRIPE_API_URL,
BILLSYNC_PLANS and DATABASE_URL.`
	if len(args) == 0 || (args[0] != "setup" && args[0] != "check") {
		fmt.Fprintln(os.Stderr, usage)
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
			return flag.ErrHelp
		}
		return fmt.Errorf("%w: billsync stripe setup|check", errUsage)
	}
	fs := flag.NewFlagSet("stripe "+args[0], flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprintln(fs.Output(), usage); fs.PrintDefaults() }
	var cfg config
	cfg.bindReconcile(fs, os.Getenv)
	cfg.bindCommon(fs, os.Getenv)
	endpointURL := fs.String("url", "", "the webhook endpoint's URL, https://<host>/webhooks/stripe")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if err := cfg.requireStripeKey(os.Getenv, ""); err != nil {
		return err
	}
	client, err := app.NewStripeClient(cfg.Config, nil, logger, nil)
	if err != nil {
		return err
	}
	if args[0] == "setup" {
		if *endpointURL == "" {
			return fmt.Errorf("%w: stripe setup needs --url https://<host>/webhooks/stripe", errUsage)
		}
		return stripeSetup(ctx, client, *endpointURL, stdout)
	}
	if cfg.DatabaseURL == "" {
		fmt.Fprintln(stdout, "skip the read budget: DATABASE_URL is unset (billsync records its reads in its database)")
		return stripeCheck(ctx, client, cfg, *endpointURL, os.Getenv("STRIPE_WEBHOOK_ENDPOINT_ID"), nil, stdout)
	}
	st, closeDB, err := openDatabase(ctx, cfg, logger)
	if err != nil {
		return err
	}
	defer closeDB()
	// The check's own reads count toward the allocation like any command's.
	spending, stopSpending, err := app.SpendStripe(ctx, st, client, false, nil, logger)
	if err != nil {
		return err
	}
	defer stopSpending()
	return stripeCheck(ctx, client, cfg, *endpointURL, os.Getenv("STRIPE_WEBHOOK_ENDPOINT_ID"), spending, stdout)
}

func stripeSetup(ctx context.Context, client *stripe.Client, endpointURL string, w io.Writer) error {
	ep, created, err := client.SetupEndpoint(ctx, endpointURL)
	if err != nil {
		return err
	}
	if created {
		fmt.Fprintf(w, "created webhook endpoint %s for %s (API version %s, %d event types)\n", ep.ID, ep.URL, ep.APIVersion, len(ep.EnabledEvents))
		fmt.Fprintf(w, "signing secret (shown once; set STRIPE_WEBHOOK_SECRET to it): %s\n", ep.Secret)
	} else {
		fmt.Fprintf(w, "updated webhook endpoint %s for %s: %d event types, enabled; its signing secret is unchanged (Stripe shows it only at creation)\n",
			ep.ID, ep.URL, len(ep.EnabledEvents))
		if ep.APIVersion != "" && ep.APIVersion != stripe.APIVersion {
			fmt.Fprintf(w, "note: it was created with API version %s, not billsync's %s, and Stripe cannot change that; billsync reads either, or delete the endpoint and run setup again for a new one\n",
				ep.APIVersion, stripe.APIVersion)
		}
	}
	fmt.Fprintf(w, "set STRIPE_WEBHOOK_ENDPOINT_ID=%s so the events feed reads its status\n", ep.ID)
	return nil
}

// stripeCheck reports what check finds; spending, when not nil, holds the
// read budget the database recorded (docs/stripe-budget.md).
func stripeCheck(ctx context.Context, client *stripe.Client, cfg config, endpointURL, endpointID string,
	spending *reconcile.Spending, w io.Writer) error {
	problems := 0
	report := func(ok bool, format string, args ...any) {
		mark := "ok  "
		if !ok {
			mark, problems = "FAIL", problems+1
		}
		fmt.Fprintf(w, "%s %s\n", mark, fmt.Sprintf(format, args...))
	}
	access := client.CheckAccess(ctx)
	for _, r := range []string{"customers", "subscriptions", "events", "webhook_endpoints"} {
		if err := access[r]; err != nil {
			report(false, "read %s: %v", r, err)
		} else {
			report(true, "the key can read %s", r)
		}
	}
	if access["webhook_endpoints"] == nil {
		eps, err := client.WebhookEndpoints(ctx)
		if err != nil {
			return err
		}
		var mine []stripe.EndpointInfo
		for _, ep := range eps {
			if (endpointID != "" && ep.ID == endpointID) ||
				(endpointID == "" && endpointURL != "" && ep.URL == endpointURL) ||
				(endpointID == "" && endpointURL == "" && strings.HasSuffix(strings.TrimRight(ep.URL, "/"), "/webhooks/stripe")) {
				mine = append(mine, ep)
			}
		}
		if len(mine) == 0 {
			report(false, "no webhook endpoint found (%s): run billsync stripe setup --url https://<host>/webhooks/stripe, or run on the events feed alone",
				endpointWanted(endpointID, endpointURL))
		}
		for _, ep := range mine {
			report(ep.Status == "enabled", "endpoint %s (%s) is %s", ep.ID, ep.URL, ep.Status)
			missing := ep.MissingTypes()
			report(len(missing) == 0, "endpoint %s subscribes to every event type billsync acts on%s", ep.ID, listed(" (missing: ", missing))
			report(ep.APIVersion == stripe.APIVersion, "endpoint %s pins API version %s (it has %q; billsync reads any, but setup pins %s)",
				ep.ID, stripe.APIVersion, ep.APIVersion, stripe.APIVersion)
		}
	}
	plans, err := loadPlans(cfg.PlansPath)
	if err != nil {
		return err
	}
	if access["customers"] == nil {
		prices, err := client.ActivePrices(ctx, plans.ReadsProductPlans())
		if err != nil {
			report(false, "list active prices: %v", err)
		} else {
			rep := checkPlans(plans, prices)
			report(len(rep.unmapped) == 0, "every one of %d active prices maps to a plan%s", len(prices), listed(" (unmapped: ", priceIDs(rep.unmapped)))
		}
	}
	if spending != nil {
		if v := spending.View(); !v.Reported {
			report(false, "read the read budget from the database: the first report failed (see the log)")
		} else {
			report(!v.Over(), "reads of the last %.3g days: %d, on pace for %.0f over 30 days, within the allocation of %.0f (%s)",
				v.Days(), v.Total, v.Projected, v.Allocation, allocationSource(cfg, v))
		}
	}
	if problems > 0 {
		return fmt.Errorf("%w: %d", errStripeCheck, problems)
	}
	fmt.Fprintln(w, "all checks passed")
	return nil
}

func endpointWanted(id, url string) string {
	switch {
	case id != "":
		return "STRIPE_WEBHOOK_ENDPOINT_ID=" + id
	case url != "":
		return "URL " + url
	}
	return "no URL ending in /webhooks/stripe"
}

func listed(prefix string, items []string) string {
	if len(items) == 0 {
		return ""
	}
	return prefix + strings.Join(items, ", ") + ")"
}

func priceIDs(prices []stripe.Price) []string {
	ids := make([]string, 0, len(prices))
	for _, p := range prices {
		ids = append(ids, p.ID)
	}
	return ids
}

// allocationSource says where the allocation comes from.
func allocationSource(cfg config, v reconcile.SpendView) string {
	if cfg.StripeReadAllocation > 0 {
		return "-stripe-read-allocation"
	}
	return fmt.Sprintf("max(%d, %d per transaction × %d transactions over 30 days); set -stripe-read-allocation to the figure Stripe gives the account",
		int(stripe.MinReadAllocation), int(stripe.ReadsPerTransaction), v.Transactions)
}
