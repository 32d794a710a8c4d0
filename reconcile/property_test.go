package reconcile_test

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
	"github.com/billsync/billsync/providers/stripe"
	"github.com/billsync/billsync/reconcile"
)

// TestPropertyConvergesToStripe: random plan changes at the fake Stripe,
// with deliveries copied, reordered and dropped (all but each customer's
// last), interleaved with workers draining at random moments. After a final
// drain every account must equal Stripe's final state, every event must be
// answered, and the ledger must hold exactly what the top-up rule allows.
func TestPropertyConvergesToStripe(t *testing.T) {
	setDefaultChecks(12) // each check builds a database and a fake Stripe
	rapid.Check(t, func(rt *rapid.T) {
		var teardown []func()
		defer func() {
			for _, f := range slices.Backward(teardown) {
				f()
			}
		}()
		// The fake's clock moves only when told, a second per step, so the
		// same draws give the same timestamps and periods: rapid can replay
		// and shrink a failure.
		clock := stripemock.NewStoppedClock(time.Date(2026, 11, 2, 10, 0, 0, 0, time.UTC))
		h := newHarnessWith(t, func(f func()) { teardown = append(teardown, f) }, stripemock.Options{Clock: clock})
		h.t = rt // from here on a failure belongs to this check: rapid shrinks it
		// The provider fails too: the client retries at once, and a fetch
		// that still fails is retried by the worker after 1 ms.
		flaky := h.newClient(stripe.Config{RetryMax: 3})
		w := h.worker(reconcile.WorkerConfig{Providers: []reconcile.Provider{flaky},
			Backoff: []time.Duration{time.Millisecond, time.Millisecond, time.Millisecond, time.Millisecond, time.Millisecond}})
		failRate := rapid.Float64Range(0, 0.3).Draw(rt, "error5xx")
		h.fake.SetFaults(stripemock.Faults{
			DuplicateCopies: rapid.IntRange(0, 2).Draw(rt, "copies"),
			ReorderDelay:    time.Duration(rapid.IntRange(0, 20).Draw(rt, "reorderMs")) * time.Millisecond,
			DropRate:        rapid.Float64Range(0, 0.6).Draw(rt, "drop"),
			Seed:            rapid.Int64().Draw(rt, "seed"),
		})
		n := rapid.IntRange(1, 3).Draw(rt, "customers")
		ids := make([]string, n)
		subs := make([][]*stripeapi.Subscription, n)
		for i := range ids {
			ids[i] = h.customer(fmt.Sprintf("u%d", i))
		}
		// price_legacy maps to no plan: an add-on, ignored while another
		// current subscription maps, and an ignored reconcile while none does.
		prices := []string{"price_free", "price_pro", "price_team", "price_legacy"}
		steps := rapid.IntRange(1, 12).Draw(rt, "steps")
		for range steps {
			clock.Advance(time.Second)
			c := rapid.IntRange(0, n-1).Draw(rt, "customer")
			live := liveSubs(subs[c])
			switch op := rapid.IntRange(0, 3).Draw(rt, "op"); {
			case op == 0 || len(live) == 0:
				subs[c] = append(subs[c], h.subscribe(ids[c], rapid.SampledFrom(prices).Draw(rt, "price")))
			case op == 1:
				sub := live[rapid.IntRange(0, len(live)-1).Draw(rt, "cancel")]
				h.cancel(sub)
				sub.Status = "canceled"
			default:
				h.changePrice(live[rapid.IntRange(0, len(live)-1).Draw(rt, "change")], rapid.SampledFrom(prices).Draw(rt, "to"))
			}
			if rapid.Bool().Draw(rt, "drainNow") {
				h.delivered()
				drainAll(rt, h, w, failRate)
			}
		}
		// Each customer's last change is never dropped. A customer left with
		// only the add-on subscribes to free: an account whose prices all map
		// to no plan stays as it was, which no model of Stripe's state can say.
		f := h.fake.Faults()
		f.DropRate = 0
		h.fake.SetFaults(f)
		for c := range ids {
			if live := liveSubs(subs[c]); len(live) > 0 && expectedPlan(rt, h, ids[c]) != "" {
				_, err := h.sc.V1Subscriptions.Update(context.Background(), live[0].ID,
					&stripeapi.SubscriptionUpdateParams{Metadata: map[string]string{"touched": "yes"}})
				require.NoError(rt, err)
			} else {
				subs[c] = append(subs[c], h.subscribe(ids[c], "price_free"))
			}
		}
		h.delivered()
		drainAll(rt, h, w, failRate)

		for c, cus := range ids {
			want := expectedPlan(rt, h, cus)
			s := h.state(cus)
			require.Equal(rt, want, s.Plan, "customer %d", c)
			require.Zero(rt, s.Events["pending"], "customer %d: events left pending", c)
			require.Equal(rt, h.largestGrant(cus), s.Balance, "customer %d: grants must top up, never add up", c)
			plan, _ := h.plans.Named(want)
			require.GreaterOrEqual(rt, s.Balance, plan.Allowance, "customer %d: the current plan's allowance is granted", c)
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

// drainAll drains until no customer is queued while the provider's API
// fails at failRate (only while draining: the test's own calls must land),
// riding out jobs that a failed fetch put into (short) backoff.
func drainAll(t testingT, h *harness, w *reconcile.Worker, failRate float64) {
	t.Helper()
	f := h.fake.Faults()
	f.Error5xxRate = failRate
	h.fake.SetFaults(f)
	defer func() {
		f.Error5xxRate = 0
		h.fake.SetFaults(f)
	}()
	for range 1000 {
		drain(t, w)
		var queued int
		require.NoError(t, h.st.Pool().QueryRow(context.Background(),
			`SELECT count(*) FROM reconcile_queue WHERE status = 'pending'`).Scan(&queued))
		if queued == 0 {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Errorf("the queue never drained")
	t.FailNow()
}

// liveSubs returns the subscriptions not canceled, newest first.
func liveSubs(subs []*stripeapi.Subscription) []*stripeapi.Subscription {
	var live []*stripeapi.Subscription
	for _, s := range subs {
		if s.Status != "canceled" {
			live = append(live, s)
		}
	}
	slices.Reverse(live)
	return live
}

// expectedPlan asks the fake, not billsync, what the customer's plan is:
// the best plan any item of an active subscription maps to (the example
// plans have no rank: the larger allowance), else the default; "" when
// active subscriptions exist but none of their prices maps.
func expectedPlan(t testingT, h *harness, customerID string) string {
	t.Helper()
	var best *reconcile.Plan
	active := false
	for sub, err := range h.sc.V1Subscriptions.List(context.Background(), &stripeapi.SubscriptionListParams{
		Customer: stripeapi.String(customerID), Status: stripeapi.String("all")}) {
		require.NoError(t, err)
		if sub.Status != "active" {
			continue
		}
		active = true
		for _, it := range sub.Items.Data {
			p, ok := h.plans.ForPrice("stripe", []string{it.Price.LookupKey})
			if ok && (best == nil || p.Allowance > best.Allowance) {
				best = &p
			}
		}
	}
	switch {
	case best != nil:
		return cmp.Or(best.Name, "?")
	case active:
		return ""
	}
	return h.plans.Default().Name
}
