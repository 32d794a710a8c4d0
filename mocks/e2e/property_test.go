package e2e_test

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	stripeapi "github.com/stripe/stripe-go/v82"
	"pgregory.net/rapid"

	stripemock "github.com/billsync/billsync/mocks/stripe"
	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/providers/stripe"
	"github.com/billsync/billsync/reconcile"
)

// TestPropertyConvergesToStripe: random changes at the fake Stripe (plan
// changes, second subscriptions, add-ons a plan does not map (as
// subscriptions of their own and as items of another), trials,
// cards that decline so renewals fail and go past_due, then paid or
// canceled by the dunning schedule, deleted customers, and the clock moving
// on by days so periods renew and trials end), with deliveries copied,
// reordered and dropped (all but each customer's last), interleaved with
// workers draining at random moments while the provider fails. After a
// final drain every account must be what the rules say for Stripe's final
// state (an independent model of the plan and status, and Decide itself
// finding nothing left to do), every event must be answered, an unpaid
// period must hold no grant, and every period's grants must top up, never
// add up.
func TestPropertyConvergesToStripe(t *testing.T) {
	setDefaultChecks(24) // each check builds a database and a fake Stripe: ~1 s under -race
	rapid.Check(t, func(rt *rapid.T) {
		var teardown []func()
		defer func() {
			for _, f := range slices.Backward(teardown) {
				f()
			}
		}()
		// The fake's clock moves only when told, a second per step (days
		// when a step says so), so the same draws give the same timestamps
		// and periods: rapid can replay and shrink a failure.
		clock := stripemock.NewStoppedClock(time.Date(2026, 11, 2, 10, 0, 0, 0, time.UTC))
		dunning := stripemock.Dunning{Retries: []time.Duration{3 * day, 5 * day},
			Final: rapid.SampledFrom([]string{"canceled", "unpaid"}).Draw(rt, "dunningFinal")}
		h := newHarnessWith(t, func(f func()) { teardown = append(teardown, f) }, testenv.Stripe,
			testenv.Options{Stripe: testenv.StripeOptions{Fake: stripemock.Options{Clock: clock, Dunning: dunning}}})
		h = h.in(rt) // from here on a failure belongs to this check: rapid shrinks it
		// The provider fails too: the client retries at once, and a fetch
		// that still fails is retried by the worker after 1 ms.
		flaky := h.NewStripeClient(stripe.Config{RetryMax: 3})
		w := h.Worker(reconcile.WorkerConfig{Providers: []reconcile.Provider{flaky},
			Backoff: []time.Duration{time.Millisecond, time.Millisecond, time.Millisecond, time.Millisecond, time.Millisecond}})
		failRate := rapid.Float64Range(0, 0.3).Draw(rt, "error5xx")
		h.Stripe.Fake.SetFaults(stripemock.Faults{
			DuplicateCopies: rapid.IntRange(0, 2).Draw(rt, "copies"),
			ReorderDelay:    time.Duration(rapid.IntRange(0, 20).Draw(rt, "reorderMs")) * time.Millisecond,
			DropRate:        rapid.Float64Range(0, 0.6).Draw(rt, "drop"),
			Seed:            rapid.Int64().Draw(rt, "seed"),
		})
		n := rapid.IntRange(1, 3).Draw(rt, "customers")
		ids := make([]string, n)
		deleted := make([]bool, n)
		for i := range ids {
			ids[i] = h.Customer(fmt.Sprintf("u%d", i))
		}
		// price_legacy maps to no plan: an add-on, ignored while another
		// current subscription maps, and an ignored reconcile while none does.
		prices := []string{"price_free", "price_pro", "price_team", "price_legacy"}
		ops := []string{"subscribe", "subscribe", "cancel", "change", "change", "addOn", "card",
			"renewalFails", "renewalFails", "renewalFails", "advance", "pay", "pay", "delete"}
		ctx := context.Background()
		steps := rapid.IntRange(1, 12).Draw(rt, "steps")
		for range steps {
			clock.Advance(time.Second)
			c := rapid.IntRange(0, n-1).Draw(rt, "customer")
			op := rapid.SampledFrom(ops).Draw(rt, "op")
			live := currentSubs(rt, h, ids[c])
			switch {
			case op == "advance":
				// Periods renew (failing where the card declines), trials
				// end, dunning retries run out: 31 days cross a renewal,
				// a few more stay within the retries or run past them.
				clock.Advance(time.Duration(rapid.SampledFrom([]int{1, 3, 9, 31}).Draw(rt, "days")) * day)
			case deleted[c]:
				// Nothing more happens to a deleted customer.
			case op == "subscribe" || len(live) == 0:
				params := &stripeapi.SubscriptionCreateParams{Customer: stripeapi.String(ids[c]),
					Items: []*stripeapi.SubscriptionCreateItemParams{{Price: stripeapi.String(rapid.SampledFrom(prices).Draw(rt, "price"))}}}
				if rapid.IntRange(0, 3).Draw(rt, "trial") == 0 {
					params.TrialPeriodDays = stripeapi.Int64(int64(rapid.IntRange(1, 20).Draw(rt, "trialDays")))
				}
				_, err := h.Stripe.API.V1Subscriptions.Create(ctx, params)
				require.NoError(rt, err)
			case op == "cancel":
				h.Cancel(live[rapid.IntRange(0, len(live)-1).Draw(rt, "cancel")])
			case op == "change":
				h.ChangePrice(live[rapid.IntRange(0, len(live)-1).Draw(rt, "change")], rapid.SampledFrom(prices).Draw(rt, "to"))
			case op == "renewalFails":
				// The card declines and the clock crosses a renewal: every
				// subscription of this customer that renews goes past_due.
				require.NoError(rt, h.Stripe.Fake.SetCardFails(ids[c], true))
				clock.Advance(31 * day)
			case op == "addOn":
				// An add-on item (a price no plan maps) on a current
				// subscription, invoiced at once.
				sub := live[rapid.IntRange(0, len(live)-1).Draw(rt, "addTo")]
				if slices.ContainsFunc(sub.Items.Data, func(it *stripeapi.SubscriptionItem) bool { return it.Price.ID == "price_legacy" }) {
					break // Stripe refuses a price twice on one subscription
				}
				_, err := h.Stripe.API.V1Subscriptions.Update(ctx, sub.ID, &stripeapi.SubscriptionUpdateParams{
					Items: []*stripeapi.SubscriptionUpdateItemParams{{Price: stripeapi.String("price_legacy")}}})
				require.NoError(rt, err)
			case op == "card":
				require.NoError(rt, h.Stripe.Fake.SetCardFails(ids[c], rapid.Bool().Draw(rt, "cardFails")))
			case op == "pay":
				// The customer fixes the card (or not) and pays an open
				// invoice by hand (declined while the card fails).
				require.NoError(rt, h.Stripe.Fake.SetCardFails(ids[c], rapid.IntRange(0, 3).Draw(rt, "stillFails") == 0))
				sub := live[rapid.IntRange(0, len(live)-1).Draw(rt, "pay")]
				if sub.LatestInvoice != nil && sub.LatestInvoice.Status == stripeapi.InvoiceStatusOpen {
					_, _ = h.Stripe.API.V1Invoices.Pay(ctx, sub.LatestInvoice.ID, nil) // a decline is an answer too
				}
			case op == "delete":
				_, err := h.Stripe.API.V1Customers.Delete(ctx, ids[c], nil)
				require.NoError(rt, err)
				deleted[c] = true
			}
			if rapid.Bool().Draw(rt, "drainNow") {
				h.Delivered()
				h.DrainAll(w, failRate)
			}
		}
		// Each customer's last change is never dropped. A customer left
		// without a subscription keeping a mapped plan subscribes to free:
		// an account whose prices all map to no plan stays as it was, which
		// no model of Stripe's state can say. A deleted customer cannot be
		// changed any more; the sweep queues it (it is no longer in
		// Stripe's customer list), as the sweep tests check.
		f := h.Stripe.Fake.Faults()
		f.DropRate = 0
		h.Stripe.Fake.SetFaults(f)
		for c, cus := range ids {
			switch want := expectedState(rt, h, cus); {
			case deleted[c]:
				require.NoError(rt, h.Store.Enqueue(ctx, "stripe", cus, reconcile.TriggerSweep))
			case want.sub != nil && want.plan != "":
				_, err := h.Stripe.API.V1Subscriptions.Update(ctx, want.sub.ID,
					&stripeapi.SubscriptionUpdateParams{Metadata: map[string]string{"touched": "yes"}})
				require.NoError(rt, err)
			default:
				h.Subscribe(cus, "price_free")
			}
		}
		h.Delivered()
		h.DrainAll(w, failRate)

		for c, cus := range ids {
			want := expectedState(rt, h, cus)
			s := h.state(cus)
			require.Equal(rt, want.plan, s.Plan, "customer %d", c)
			require.Equal(rt, want.status, s.Status, "customer %d", c)
			require.Zero(rt, s.Events["pending"], "customer %d: events left pending", c)
			require.Equal(rt, h.largestGrant(cus), s.Balance, "customer %d: grants must top up, never add up", c)
			h.requireTopUpsOnly(cus)
			plan, _ := h.Plans.Named(want.plan)
			if want.waiting() {
				require.NotContains(rt, h.grantedPeriods(cus), want.itemStart(),
					"customer %d: a period whose renewal is not paid is granted nothing", c)
			} else {
				require.GreaterOrEqual(rt, s.Balance, plan.Allowance, "customer %d: the current plan's allowance is granted", c)
			}
			// Decide, given the account and Stripe's final state, finds
			// nothing left to write or grant.
			cur := h.account(cus)
			snap, err := h.Stripe.Client.Fetch(ctx, cus)
			require.NoError(rt, err)
			ch := reconcile.Decide(cur, snap, h.Plans, cur.ObservedAt.Add(time.Millisecond))
			require.Equal(rt, reconcile.ResultUnchanged, ch.Result, "customer %d: %s", c, ch.Outcome)
			if ch.Grant != nil {
				require.Zero(rt, ch.Grant.TopUp(s.Balance), "customer %d: a grant is missing", c)
			}
		}
	})
}

// setDefaultChecks lowers rapid's default of 100 checks unless -rapid.checks
// was given.
func setDefaultChecks(n int) {
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "rapid.checks" })
	if !given {
		_ = flag.Set("rapid.checks", fmt.Sprint(n))
	}
}

// currentSubs returns the customer's subscriptions that have not ended
// (canceled, incomplete_expired) at the fake, newest first, with their
// latest invoice.
func currentSubs(t testingT, h *harness, customerID string) []*stripeapi.Subscription {
	t.Helper()
	params := &stripeapi.SubscriptionListParams{Customer: stripeapi.String(customerID), Status: stripeapi.String("all")}
	params.AddExpand("data.latest_invoice")
	var out []*stripeapi.Subscription
	for sub, err := range h.Stripe.API.V1Subscriptions.List(context.Background(), params) {
		require.NoError(t, err)
		if sub.Status != stripeapi.SubscriptionStatusCanceled && sub.Status != stripeapi.SubscriptionStatusIncompleteExpired {
			out = append(out, sub)
		}
	}
	return out
}

// modelState is what the rules say a customer's account is, worked out
// from the fake's state without billsync's code.
type modelState struct {
	plan, status string
	sub          *stripeapi.Subscription     // the deciding subscription; nil on the default plan
	item         *stripeapi.SubscriptionItem // its item whose price chose the plan
}

// waiting reports whether the deciding subscription keeps its plan but
// its current period is not paid (the example policy: only active and
// trialing are paid up).
func (m modelState) waiting() bool {
	return m.sub != nil && m.sub.Status == stripeapi.SubscriptionStatusPastDue
}

func (m modelState) itemStart() time.Time { return time.Unix(m.item.CurrentPeriodStart, 0).UTC() }

// expectedState asks the fake, not billsync, what the customer's account
// should be under the example plans: a deleted customer is on the default
// plan with status deleted; otherwise the best plan any item of a
// subscription that keeps its plan (active, trialing, past_due) maps to
// (the example plans have no rank: the larger allowance; at a tie the
// newer subscription), with that subscription's status; plan "" when such
// subscriptions exist but none of their prices maps; else the default plan
// with the newest current subscription's status ("" without one).
func expectedState(t testingT, h *harness, customerID string) modelState {
	t.Helper()
	ctx := context.Background()
	cust, err := h.Stripe.API.V1Customers.Retrieve(ctx, customerID, nil)
	require.NoError(t, err)
	def := modelState{plan: h.Plans.Default().Name}
	if cust.Deleted {
		def.status = reconcile.StatusDeleted
		return def
	}
	var best modelState
	var bestPlan reconcile.Plan
	keeping := false
	subs := currentSubs(t, h, customerID)
	for _, sub := range subs {
		switch sub.Status {
		case stripeapi.SubscriptionStatusActive, stripeapi.SubscriptionStatusTrialing, stripeapi.SubscriptionStatusPastDue:
		default:
			continue
		}
		keeping = true
		for _, it := range sub.Items.Data {
			p, ok := h.Plans.ForPrice("stripe", "", []string{it.Price.LookupKey, it.Price.ID})
			if !ok {
				continue
			}
			if best.sub == nil || p.Allowance > bestPlan.Allowance ||
				(p.Allowance == bestPlan.Allowance && sub.Created > best.sub.Created) {
				best, bestPlan = modelState{plan: cmp.Or(p.Name, "?"), status: string(sub.Status), sub: sub, item: it}, p
			}
		}
	}
	switch {
	case best.sub != nil:
		return best
	case keeping:
		return modelState{}
	}
	// The newest current subscription names the status (the fake lists
	// newest first; several made in one second tie, as on Stripe).
	if len(subs) > 0 {
		newest := subs[0]
		for _, s := range subs[1:] {
			if s.Created > newest.Created {
				newest = s
			}
		}
		def.status = string(newest.Status)
	}
	return def
}

// grantedPeriods returns the period starts the customer's ledger holds a
// grant for.
func (h *harness) grantedPeriods(customerID string) []time.Time {
	h.t.Helper()
	var out []time.Time
	for _, g := range h.grants(customerID) {
		out = append(out, g.PeriodStart)
	}
	return out
}

// requireTopUpsOnly checks the top-up rule in every period of the
// customer's ledger: a period holds exactly the largest allowance among the
// plans granted in it, so no grant was ever added twice.
func (h *harness) requireTopUpsOnly(customerID string) {
	h.t.Helper()
	sum := map[time.Time]int64{}
	largest := map[time.Time]int64{}
	for _, g := range h.grants(customerID) {
		p, ok := h.Plans.Named(g.Plan)
		require.True(h.t, ok, g.Plan)
		sum[g.PeriodStart] += g.Delta
		largest[g.PeriodStart] = max(largest[g.PeriodStart], p.Allowance)
	}
	require.Equal(h.t, largest, sum, "customer %s: each period's grants sum to its largest allowance", customerID)
}
