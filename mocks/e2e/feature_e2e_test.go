package e2e_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	stripemock "github.com/billsync/billsync/mocks/stripe"
	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/providers/stripe"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store/storetest"
)

const summaryEvent = "entitlements.active_entitlement_summary.updated"

// TestStripeEntitlementRemoved: a feature Stripe grants is the account's
// after a reconcile (with its source); removed at Stripe, it is gone after
// the next reconcile, which the summary event alone triggers (no
// subscription changed, no other event was sent).
func TestStripeEntitlementRemoved(t *testing.T) {
	t.Parallel()
	st := storetest.NewStore(t)
	h := testenv.ForTest(t, testenv.Stripe, testenv.Options{Store: st,
		Stripe: testenv.StripeOptions{Client: stripe.Config{Entitlements: true}}})
	w := h.Worker(reconcile.WorkerConfig{Plans: testenv.FeaturePlans()})
	ctx := context.Background()

	cus := h.Customer("u1")
	h.Subscribe(cus, "price_pro")
	granted := h.Feature("price_pro", "seats-50")
	h.Feature("price_pro", "export")
	h.Delivered()
	h.DrainAll(w, 0)
	a, err := st.Account(ctx, "stripe", cus)
	require.NoError(t, err)
	require.Equal(t, []reconcile.Feature{
		{Key: "ai_credits", Type: reconcile.FeatureMetered, Limit: n(1000), Source: "plan:pro"},
		{Key: "export", Type: reconcile.FeatureBoolean, Source: "plan:pro"},
		{Key: "seats", Type: reconcile.FeatureLimit, Limit: n(50), Source: "stripe:seats-50"},
	}, a.Features)
	h.TakeOutcomes()
	stored := len(storetest.CustomerEvents(t, st, "stripe", cus))

	h.Revoke("price_pro", granted)
	h.Delivered()
	events := storetest.CustomerEvents(t, st, "stripe", cus)
	require.Len(t, events, stored+1, "one new event")
	require.Equal(t, summaryEvent, events[len(events)-1].Type)
	require.Equal(t, reconcile.EventPending, events[len(events)-1].Status)

	h.DrainAll(w, 0)
	outcomes := h.TakeOutcomes()
	require.Len(t, outcomes, 1, "the summary event triggered one reconcile")
	require.Equal(t, reconcile.ResultApplied, outcomes[0].Result)
	require.Contains(t, outcomes[0].Text, "feature seats now 5 from plan:pro")
	a, err = st.Account(ctx, "stripe", cus)
	require.NoError(t, err)
	seats, _ := reconcile.FeatureNamed(a.Features, "seats")
	require.Equal(t, reconcile.Feature{Key: "seats", Type: reconcile.FeatureLimit, Limit: n(5), Source: "plan:pro"}, seats)
	require.Equal(t, reconcile.EventApplied, storetest.CustomerEvents(t, st, "stripe", cus)[stored].Status)
	require.Equal(t, []reconcile.Entitlement{{Provider: "stripe", Key: "export"}}, a.Entitlements, "seats-50 is gone, export stays")
}

// TestSweepRestoresALostMeterGrant: the sweep's check that an account is
// already right counts every meter apart: an account whose default grant
// is in place but whose meter's grant is lost is healed, one that lost its
// default grant but holds a larger meter grant too, and the others are
// left alone.
func TestSweepRestoresALostMeterGrant(t *testing.T) {
	t.Parallel()
	h, _ := newSweepHarness(t, stripemock.Options{}, false)
	h.Plans = testenv.FeaturePlans()
	customers, _ := h.subscribeMany(3, func(int) string { return "price_pro" })
	ctx := context.Background()
	_, err := h.sweeper(nil, nil).Run(ctx)
	require.NoError(t, err)
	rep, err := h.sweeper(nil, nil).Run(ctx)
	require.NoError(t, err)
	require.Zero(t, rep.Run.Healed, "every meter granted: nothing to heal")

	lost, err := h.Store.Account(ctx, stripe.Provider, customers[0])
	require.NoError(t, err)
	storetest.LoseMeter(t, h.Store, lost.ID, "ai_credits")
	lostDefault, err := h.Store.Account(ctx, stripe.Provider, customers[1])
	require.NoError(t, err)
	storetest.LoseMeter(t, h.Store, lostDefault.ID, "")
	rep, err = h.sweeper(nil, nil).Run(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, rep.Run.Healed)
	var healed []string
	for _, x := range rep.Healed {
		healed = append(healed, x.CustomerID)
	}
	require.ElementsMatch(t, customers[:2], healed)
	for _, c := range customers {
		a, err := h.Store.Account(ctx, stripe.Provider, c)
		require.NoError(t, err)
		require.Equal(t, map[string]storetest.MeterRows{"": {Grants: 1, Sum: 500}, "ai_credits": {Grants: 1, Sum: 1000}},
			storetest.Meters(t, h.Store, a.ID), c)
	}
}
