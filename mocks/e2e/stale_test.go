package e2e_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	stripemock "github.com/billsync/billsync/mocks/stripe"
	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/reconcile"
)

func TestExpectationContradicts(t *testing.T) {
	snap := reconcile.Snapshot{Subscriptions: []reconcile.Subscription{{ID: "sub_1", Status: "active",
		Items: []reconcile.Item{{PriceRefs: []string{"pro", "price_pro"}}, {PriceRefs: []string{"price_addon"}}}}}}
	for name, tc := range map[string]struct {
		expect *reconcile.Expectation
		snap   reconcile.Snapshot
		want   bool
	}{
		"no expectation":          {nil, snap, false},
		"agrees":                  {&reconcile.Expectation{SubscriptionID: "sub_1", Status: "active", Prices: []string{"price_pro", "price_addon"}}, snap, false},
		"price not yet there":     {&reconcile.Expectation{SubscriptionID: "sub_1", Status: "active", Prices: []string{"price_team"}}, snap, true},
		"status differs":          {&reconcile.Expectation{SubscriptionID: "sub_1", Status: "past_due"}, snap, true},
		"subscription not there":  {&reconcile.Expectation{SubscriptionID: "sub_2", Status: "active"}, snap, true},
		"ended and gone":          {&reconcile.Expectation{SubscriptionID: "sub_2", Status: "canceled"}, snap, false},
		"ended but still listed":  {&reconcile.Expectation{SubscriptionID: "sub_1", Status: "canceled"}, snap, true},
		"customer deleted":        {&reconcile.Expectation{SubscriptionID: "sub_1", Status: "active"}, reconcile.Snapshot{Deleted: true}, false},
		"no status, prices agree": {&reconcile.Expectation{SubscriptionID: "sub_1", Prices: []string{"price_pro"}}, snap, false},
	} {
		t.Run(name, func(t *testing.T) {
			why, got := tc.expect.Contradicts(tc.snap)
			require.Equal(t, tc.want, got, why)
			if got {
				require.NotEmpty(t, why)
			}
		})
	}
}

// TestStaleReadIsReadAgain: right after a plan change the provider's API
// still answers with the old state (the fake's stale-read fault), while the
// webhook already names the new price. The worker sees the contradiction,
// reads again after the recheck delay, and applies the new plan; with
// rechecks off it applies the stale read and the account stays wrong.
func TestStaleReadIsReadAgain(t *testing.T) {
	t.Parallel()
	const lag = 4 * time.Second
	for name, tc := range map[string]struct {
		delay   time.Duration
		plan    string
		recheck string
	}{
		"recheck":    {lag + time.Second, "team", reconcile.RecheckAgreed},
		"no recheck": {-1, "pro", ""},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, testenv.Stripe, testenv.Options{})
			cus := h.Customer("user_stale")
			sub := h.Subscribe(cus, "price_pro")
			h.Delivered()
			w := h.Worker(reconcile.WorkerConfig{RecheckDelay: tc.delay})
			drain(t, w)
			require.Equal(t, "pro", h.state(cus).Plan)
			h.TakeOutcomes()

			h.Stripe.Fake.SetFaults(stripemock.Faults{StaleReads: lag})
			h.ChangePrice(sub, "price_team")
			h.Delivered()
			drain(t, w)
			require.Equal(t, tc.plan, h.state(cus).Plan)
			var rechecks []string
			for _, o := range h.TakeOutcomes() {
				rechecks = append(rechecks, o.Recheck)
			}
			require.Equal(t, []string{tc.recheck}, rechecks)
		})
	}
}
