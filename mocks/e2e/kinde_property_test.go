package e2e_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	kindemock "github.com/billsync/billsync/mocks/kinde"
	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/providers/kinde"
	"github.com/billsync/billsync/reconcile"
)

// TestPropertyConvergesToKinde is the Stripe property for Kinde: random
// plan changes at the fake Kinde (one agreement, two, or none), each
// followed by one of Kinde's billing webhooks, delivered with copies,
// reordered and dropped (any of them, the last included), workers
// draining at random moments while the Management API fails at random.
// Kinde has no bulk listing, so what the dropped webhooks missed is healed
// by a sweep at the end (every Kinde account queued, then reconciled).
// Then every account must equal the fake's agreements, every event must
// be answered, and the balance must be the largest plan granted this
// period (grants top up, never add up).
func TestPropertyConvergesToKinde(t *testing.T) {
	setDefaultChecks(12) // each check builds a database and a fake Kinde
	rapid.Check(t, func(rt *rapid.T) {
		var teardown []func()
		defer func() {
			for _, f := range slices.Backward(teardown) {
				f()
			}
		}()
		h := newKindeHarness(t, func(f func()) { teardown = append(teardown, f) }, kindeOptions{
			client: kinde.Config{RetryMax: 3},
		})
		h.harness = h.in(rt) // from here on a failure belongs to this check: rapid shrinks it
		w := h.Worker(reconcile.WorkerConfig{Name: "kinde-property",
			Backoff: []time.Duration{time.Millisecond, time.Millisecond, time.Millisecond, time.Millisecond, time.Millisecond}})
		failRate := rapid.Float64Range(0, 0.3).Draw(rt, "error5xx")
		faults := kindemock.Faults{
			DuplicateCopies: rapid.IntRange(0, 2).Draw(rt, "copies"),
			ReorderDelay:    time.Duration(rapid.IntRange(0, 20).Draw(rt, "reorderMs")) * time.Millisecond,
			DropRate:        rapid.Float64Range(0, 0.6).Draw(rt, "drop"),
			Seed:            rapid.Int64Range(1, 1<<62).Draw(rt, "seed"), // 0 would be a random seed: no replay
		}
		// Several customers and many steps per check: a check costs a
		// database and a fake, so each one should exercise a lot.
		n := rapid.IntRange(2, 5).Draw(rt, "customers")
		ids := make([]string, n)
		// Every customer is known to billsync once (its first webhook is
		// delivered): a customer billsync never heard of is no account to
		// sweep, since Kinde cannot list its customers.
		for i := range ids {
			ids[i] = fmt.Sprintf("customer_prop_%d", i)
			h.SetPlan(ids[i], testenv.FreePlan)
			h.Send("customer.plan_assigned", ids[i])
		}
		h.Delivered()
		h.Kinde.Fake.SetFaults(faults)

		codes := []string{testenv.FreePlan, testenv.ProPlan, testenv.TeamPlan}
		types := []string{"customer.plan_changed", "customer.plan_assigned", "customer.agreement_created",
			"customer.agreement_cancelled", "customer.payment_succeeded", "customer.payment_failed"}
		steps := rapid.IntRange(4, 24).Draw(rt, "steps")
		for range steps {
			c := ids[rapid.IntRange(0, n-1).Draw(rt, "customer")]
			var agreements []kindemock.Agreement
			for range rapid.IntRange(0, 2).Draw(rt, "agreements") {
				agreements = append(agreements, kindemock.Agreement{PlanCode: rapid.SampledFrom(codes).Draw(rt, "plan")})
			}
			h.Kinde.Fake.SetAgreements(c, agreements)
			h.Send(rapid.SampledFrom(types).Draw(rt, "type"), c)
			if rapid.Bool().Draw(rt, "drainNow") {
				h.Delivered()
				h.DrainAll(w, failRate)
			}
		}
		h.Delivered()
		h.DrainAll(w, failRate)

		sweeper, err := reconcile.NewSweeper(reconcile.SweeperConfig{Store: h.Store, Provider: kinde.Provider,
			Pace: time.Millisecond, Plans: h.Plans})
		require.NoError(rt, err)
		rep, err := sweeper.Run(context.Background())
		require.NoError(rt, err)
		require.Equal(rt, n, rep.Enqueued, "the sweep queues every Kinde account")
		h.DrainAll(w, failRate)

		for i, cus := range ids {
			want := kindeExpectedPlan(h, cus)
			s := h.state(cus)
			require.Equal(rt, want, s.Plan, "customer %d", i)
			require.Zero(rt, s.Events[string(reconcile.EventPending)], "customer %d: events left pending", i)
			require.Equal(rt, h.largestGrant(cus), s.Balance, "customer %d: grants must top up, never add up", i)
			plan, _ := h.Plans.Named(want)
			require.GreaterOrEqual(rt, s.Balance, plan.Allowance, "customer %d: the current plan's allowance is granted", i)
		}
	})
}

// kindeExpectedPlan asks the fake, not billsync: the best plan (the
// example plans have no rank: the larger allowance) among the customer's
// agreements, else the default.
func kindeExpectedPlan(h *kindeHarness, customer string) string {
	best := h.Plans.Default()
	found := false
	for _, a := range h.Kinde.Fake.Agreements(customer) {
		if p, ok := h.Plans.ForPrice(kinde.Provider, "", []string{a.PlanCode}); ok && (!found || p.Allowance > best.Allowance) {
			best, found = p, true
		}
	}
	return best.Name
}
