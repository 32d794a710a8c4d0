package demo

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Print writes the scenario's story: the start, each delivery as both
// handlers saw it, and the final state.
func (r Result) Print(w io.Writer) error {
	fmt.Fprintf(w, "\nCustomer %s starts on Free. naive: %s/%d, billsync: %s/%d.\n", r.Customer,
		r.Start.Naive.Plan, r.Start.Naive.Balance, r.Start.Billsync.Plan, r.Start.Billsync.Balance)
	switch r.Provider {
	case "kinde":
		fmt.Fprintln(w, "At Kinde the customer moved to Pro: the Free agreement was cancelled, the plan changed to Pro, its payment succeeded.")
	default:
		fmt.Fprintln(w, "At Stripe the customer moved to Pro: the Free subscription was canceled, a Pro one created, its invoice paid.")
	}
	fmt.Fprintln(w, "The network now delivers the plan change 3×, the payment 5×, and the older cancellation once, last but two.")
	fmt.Fprintln(w, "Both processes are killed half way through the first plan change.")
	fmt.Fprintln(w)

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tdelivery\tnaive: answer\tplan\tbalance\tbillsync: answer\tplan\tbalance\twhat billsync did")
	for _, row := range r.Deliveries {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%s\t%s\t%d\t%s\n", row.N, label(row.Type), row.Naive.Answer, row.Naive.Plan,
			row.Naive.Balance, row.Billsync.Answer, row.Billsync.Plan, row.Billsync.Balance, row.Billsync.Outcome)
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	b := r.Billsync
	fmt.Fprintf(w, "\nFinal state\n  naive handler (foil): plan %s, balance %d\n", r.Naive.Plan, r.Naive.Balance)
	fmt.Fprintf(w, "  billsync:             plan %s, balance %d (%d events stored from %d deliveries; grants:", b.Plan, b.Balance, b.EventsStored, b.Deliveries)
	for _, g := range b.Grants {
		fmt.Fprintf(w, " %s +%d", g.Plan, g.Delta)
	}
	fmt.Fprintln(w, ")")
	fmt.Fprintln(w, "\nWhat the app was told")
	fmt.Fprintln(w, "  by an app hooked to the naive handler:")
	for _, t := range r.NaiveTold {
		fmt.Fprintf(w, "    plan %s → %s, balance %d → %d\n", t.Before.Plan, t.After.Plan, t.Before.Balance, t.After.Balance)
	}
	fmt.Fprintln(w, "  by billsync (signed webhook and change feed, once committed):")
	for _, t := range b.AppTold {
		fmt.Fprintf(w, "    #%d plan %s → %s, balance %d → %d (changed: %s)\n", t.Seq, t.Before.Plan, t.After.Plan,
			t.Before.Balance, t.After.Balance, strings.Join(t.Changed, ", "))
	}
	if b.Right {
		fmt.Fprintf(w, "  billsync is right: %s says Pro, and Pro's allowance is 500, granted once.\n", providerName(r.Provider))
	}
	return nil
}

func label(typ string) string {
	switch typ {
	case "customer.subscription.created", "customer.plan_changed":
		return "plan change (to Pro)"
	case "invoice.paid", "customer.payment_succeeded":
		return "payment"
	case "customer.subscription.deleted", "customer.agreement_cancelled":
		return "older cancellation"
	}
	return typ
}

func providerName(provider string) string {
	if provider == "kinde" {
		return "Kinde"
	}
	return "Stripe"
}

// PrintServing tells a person what to try while Serve runs.
func (wh Where) PrintServing(w io.Writer, customer string) {
	defer fmt.Fprintf(w, `
Support console: %s  (sign in with the admin token %s, made for this run)
Search for %s there to see the account, its ledger, its events and its history;
Resync shows what would change before it writes, Replay re-reads the customer.
`, wh.ConsoleURL, wh.ConsoleToken, customer)
	if wh.Provider == "kinde" {
		fmt.Fprintf(w, `
billsync keeps running, its worker live (Ctrl-C to stop; the demo database is dropped on exit).
Changes made at the fake Kinde now reach billsync as signed JWT webhooks. Try:
  curl -X PUT %[1]s/_mock/customers/%[2]s/agreements -d '{"agreements":[{"plan_code":"customer_team_plan"}]}'
  curl %[1]s/_mock/events -d '{"type":"customer.plan_changed","customer_id":"%[2]s"}'
  psql '%[3]s' -c 'SELECT customer_id, plan, status, period_start FROM accounts'
  psql '%[3]s' -c 'SELECT id, result, outcome FROM reconcile_log ORDER BY id'
  psql '%[3]s' -c 'SELECT type, seen_count, status, outcome FROM inbox_events'
billsync's intake: POST %[4]s/webhooks/kinde, health %[4]s/readyz; fake faults: %[1]s/_mock/faults
`, wh.FakeURL, customer, wh.DatabaseURL, wh.IntakeURL)
		return
	}
	fmt.Fprintf(w, `
billsync keeps running, its worker live (Ctrl-C to stop; the demo database is dropped on exit).
Changes made at the fake Stripe now reach billsync as signed webhooks. Try:
  curl -u %[2]s: %[1]s/v1/subscriptions -d customer=%[3]s -d 'items[0][price]=price_team'
  curl -u %[2]s: '%[1]s/v1/subscriptions?customer=%[3]s&status=all'
  psql '%[4]s' -c 'SELECT customer_id, plan, status, period_start FROM accounts'
  psql '%[4]s' -c 'SELECT id, result, outcome FROM reconcile_log ORDER BY id'
  psql '%[4]s' -c 'SELECT type, seen_count, status, outcome FROM inbox_events'
billsync's intake: POST %[5]s/webhooks/stripe, health %[5]s/readyz; fake faults: %[1]s/_mock/faults
`, wh.FakeURL, wh.APIKey, customer, wh.DatabaseURL, wh.IntakeURL)
}
