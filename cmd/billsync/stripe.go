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
	usage := `usage: billsync stripe setup --url https://<host>/webhooks/stripe [--connect]
       billsync stripe check [--url https://<host>/webhooks/stripe]

setup creates the Stripe webhook endpoint at the URL (or updates the one
already there) subscribed to exactly the event types billsync acts on, with
the API version billsync pins, and a thin event destination at the same URL
for the event Stripe sends when it failed to create events
(v2.core.health.event_generation_failure.resolved; one already there is
reused, the type added if it lacks it). It prints each new signing secret
once (Stripe answers it on creation only) and the STRIPE_WEBHOOK_SECRET
that holds both, comma-separated. With --connect (Stripe Connect,
docs/connect.md) it also sets up the Connect endpoint at the URL + /connect
(connect=true: every connected account's events, and their authorisations)
and prints its STRIPE_CONNECT_WEBHOOK_SECRET.

check reports, and exits 1 on any problem: whether the key can read
customers, subscriptions, events and webhook endpoints (a restricted key
missing a permission is named); whether the endpoint (STRIPE_WEBHOOK_ENDPOINT_ID,
else the one at --url, else every endpoint whose URL ends in
/webhooks/stripe) exists, is enabled, subscribes to every needed type and
pins billsync's API version; whether a thin event destination (at --url,
else at a URL ending in /webhooks/stripe) exists, is enabled and subscribes
to v2.core.health.event_generation_failure.resolved; the plans check (billsync plans check); and,
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
	connect := fs.Bool("connect", false, "setup: also the Stripe Connect endpoint, at the URL + /connect")
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
		if err := stripeSetup(ctx, client, *endpointURL, stdout); err != nil || !*connect {
			return err
		}
		return stripeSetupConnect(ctx, client, strings.TrimRight(*endpointURL, "/")+"/connect", stdout)
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
		fmt.Fprintf(w, "its signing secret (shown once): %s\n", ep.Secret)
	} else {
		fmt.Fprintf(w, "updated webhook endpoint %s for %s: %d event types, enabled; its signing secret is unchanged (Stripe shows it only at creation)\n",
			ep.ID, ep.URL, len(ep.EnabledEvents))
		if ep.APIVersion != "" && ep.APIVersion != stripe.APIVersion {
			fmt.Fprintf(w, "note: it was created with API version %s, not billsync's %s, and Stripe cannot change that; billsync reads either, or delete the endpoint and run setup again for a new one\n",
				ep.APIVersion, stripe.APIVersion)
		}
	}
	// The endpoint's secret is printed before the destination is asked
	// for: a key that may not manage destinations still leaves it known.
	dest, destCreated, err := client.SetupDestination(ctx, endpointURL)
	if err != nil {
		return fmt.Errorf("the webhook endpoint is set up; the event destination is not: %w", err)
	}
	if destCreated {
		fmt.Fprintf(w, "created event destination %s for %s (thin events: %s)\n", dest.ID, dest.WebhookEndpoint.URL, strings.Join(dest.EnabledEvents, ", "))
		fmt.Fprintf(w, "its signing secret (shown once): %s\n", dest.WebhookEndpoint.SigningSecret)
	} else {
		fmt.Fprintf(w, "event destination %s for %s subscribes to %s, enabled; its signing secret is unchanged\n",
			dest.ID, dest.WebhookEndpoint.URL, strings.Join(stripe.ThinTypes, ", "))
	}
	// Both sign deliveries to the one URL: the intake tries every secret.
	epSecret, destSecret := "<the endpoint's secret>", "<the destination's secret>"
	if created {
		epSecret = ep.Secret
	}
	if destCreated {
		destSecret = dest.WebhookEndpoint.SigningSecret
	}
	if created || destCreated {
		fmt.Fprintf(w, "set STRIPE_WEBHOOK_SECRET=%s,%s (both secrets, comma-separated)\n", epSecret, destSecret)
	}
	fmt.Fprintf(w, "set STRIPE_WEBHOOK_ENDPOINT_ID=%s so the events feed reads its status\n", ep.ID)
	return nil
}

// stripeSetupConnect sets up the Connect endpoint at endpointURL.
func stripeSetupConnect(ctx context.Context, client *stripe.Client, endpointURL string, w io.Writer) error {
	ep, created, err := client.SetupConnectEndpoint(ctx, endpointURL)
	if err != nil {
		return fmt.Errorf("the platform's endpoint is set up; the Connect endpoint is not: %w", err)
	}
	if !created {
		fmt.Fprintf(w, "updated Connect endpoint %s for %s: %d event types, enabled; its signing secret is unchanged\n", ep.ID, ep.URL, len(ep.EnabledEvents))
		return nil
	}
	fmt.Fprintf(w, "created Connect endpoint %s for %s (%d event types, the connected accounts' events)\n", ep.ID, ep.URL, len(ep.EnabledEvents))
	fmt.Fprintf(w, "set STRIPE_CONNECT_WEBHOOK_SECRET=%s (shown once) and -stripe-connect all or listed\n", ep.Secret)
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
	checkDestination(ctx, client, endpointURL, report)
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
		// Reads on behalf of connected accounts have an allocation of
		// their own (docs/connect.md): said when there are any, or Connect
		// is on.
		if v := spending.View(); v.Reported && (cfg.StripeConnect.Enabled() || v.Connect.Total > 0 || v.Connect.Transactions > 0) {
			report(!v.ConnectOver(), "reads on behalf of connected accounts of the last %.3g days: %d, on pace for %.0f over 30 days, within their allocation of %.0f (max(%d, %d per transaction × %d connected accounts' transactions over 30 days))",
				v.Days(), v.Connect.Total, v.Connect.Projected, v.Connect.Allocation,
				int(stripe.MinReadAllocation), int(stripe.ReadsPerTransaction), v.Connect.Transactions)
		}
	}
	if problems > 0 {
		return fmt.Errorf("%w: %d", errStripeCheck, problems)
	}
	fmt.Fprintln(w, "all checks passed")
	return nil
}

// checkDestination reports the thin event destinations at endpointURL
// (else at every URL ending in /webhooks/stripe): one must exist, be
// enabled and subscribe to every stripe.ThinTypes.
func checkDestination(ctx context.Context, client *stripe.Client, endpointURL string, report func(bool, string, ...any)) {
	all, err := client.EventDestinations(ctx)
	if err != nil {
		report(false, "list event destinations: %v", err)
		return
	}
	var mine []stripe.DestinationInfo
	for _, d := range all {
		at := d.WebhookEndpoint.URL
		if d.Thin() && ((endpointURL != "" && at == endpointURL) ||
			(endpointURL == "" && strings.HasSuffix(strings.TrimRight(at, "/"), "/webhooks/stripe"))) {
			mine = append(mine, d)
		}
	}
	if len(mine) == 0 {
		where := "at a URL ending in /webhooks/stripe"
		if endpointURL != "" {
			where = "at " + endpointURL
		}
		report(false, "no thin event destination %s: billsync never hears of events Stripe failed to create (%s); run billsync stripe setup --url https://<host>/webhooks/stripe",
			where, stripe.HealthEventResolved)
	}
	for _, d := range mine {
		report(d.Status == "enabled", "event destination %s (%s) is %s", d.ID, d.WebhookEndpoint.URL, d.Status)
		missing := d.MissingTypes()
		report(len(missing) == 0, "event destination %s subscribes to %s%s", d.ID, strings.Join(stripe.ThinTypes, ", "), listed(" (missing: ", missing))
	}
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
