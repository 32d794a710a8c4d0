package server_test

import (
	"context"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/store/storetest"
)

// TestFakeStripeDeliversToIntake: a subscription change made through the
// real stripe-go client at the fake Stripe produces signed deliveries that
// billsync's intake verifies and stores.
func TestFakeStripeDeliversToIntake(t *testing.T) {
	ctx := context.Background()
	st := storetest.NewStore(t)
	h := testenv.ForTest(t, testenv.Stripe, testenv.Options{Store: st})

	cus, err := h.Stripe.Customer(ctx, "u1")
	require.NoError(t, err)
	sub, err := h.Stripe.Subscribe(ctx, cus, "price_free")
	require.NoError(t, err)
	require.NoError(t, h.Stripe.ChangePrice(ctx, sub, "price_pro"))
	require.NoError(t, h.WaitDelivered(ctx))

	for _, d := range h.Stripe.Fake.Deliveries() {
		require.Equal(t, 200, d.StatusCode, "delivery of %s %s", d.EventType, d.EventID)
	}
	var types []string
	for _, e := range storetest.CustomerEvents(t, st, "stripe", cus) {
		types = append(types, e.Type)
	}
	slices.Sort(types)
	// Stripe sends customer.created too, and the fake does since it learned customer.* events.
	require.Equal(t, []string{"customer.created", "customer.subscription.created", "customer.subscription.updated", "invoice.paid"}, types)
	require.Equal(t, 1, storetest.Counts(t, st)["reconcile_queue"])
}
