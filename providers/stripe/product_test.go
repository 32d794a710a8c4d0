package stripe_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	stripemock "github.com/billsync/billsync/mocks/stripe"
	"github.com/billsync/billsync/reconcile"
)

// TestProductPlans: with ProductPlans on, a read gives each item's
// product and the plan its metadata names, reading each product once
// (then from the cache, for Fetch and the sweep's listing alike); with it
// off, a reconcile reads what it always did and no product.
func TestProductPlans(t *testing.T) {
	f := newFake(t, stripemock.Options{}, nil)
	f.SetProductMetadata("prod_price_pro", map[string]string{reconcile.ProductPlanKey: "pro", "other": "x"})
	ada := f.customer(t, map[string]string{"user_id": "u1"})
	f.subscribe(t, ada, "price_pro")
	bob := f.customer(t, map[string]string{"user_id": "u2"})
	f.subscribe(t, bob, "price_pro")
	f.subscribe(t, bob, "price_team") // a product with no metadata
	ctx := context.Background()

	cfg := testConfig(f.URL)
	cfg.ProductPlans = true
	on := f.h.NewStripeClient(cfg)
	on.TakeReads()
	snap, err := on.Fetch(ctx, ada)
	require.NoError(t, err)
	it := snap.Subscriptions[0].Items[0]
	require.Equal(t, "prod_price_pro", it.Product)
	require.Equal(t, "pro", it.ProductPlan)
	require.Equal(t, map[string]int64{"GET /v1/customers/{id}": 1, "GET /v1/products/{id}": 1}, on.TakeReads(),
		"the first read of a product costs one more read")

	snap, err = on.Fetch(ctx, bob)
	require.NoError(t, err)
	plans := map[string]string{}
	for _, sub := range snap.Subscriptions {
		plans[sub.Items[0].Product] = sub.Items[0].ProductPlan
	}
	require.Equal(t, map[string]string{"prod_price_pro": "pro", "prod_price_team": ""}, plans)
	require.Equal(t, map[string]int64{"GET /v1/customers/{id}": 1, "GET /v1/products/{id}": 1}, on.TakeReads(),
		"pro's product comes from the cache; team's is read once")

	snaps, _, _, err := on.ListPage(ctx, "")
	require.NoError(t, err)
	require.Len(t, snaps, 2)
	for _, s := range snaps {
		for _, sub := range s.Subscriptions {
			require.NotEmpty(t, sub.Items[0].Product)
		}
	}
	require.Equal(t, map[string]int64{"GET /v1/customers": 1}, on.TakeReads(), "the listing reads every product from the cache")

	off := f.h.NewStripeClient(testConfig(f.URL))
	off.TakeReads()
	snap, err = off.Fetch(ctx, ada)
	require.NoError(t, err)
	require.Equal(t, reconcile.Item{PriceRefs: []string{"pro", "price_pro"}, Quantity: 1,
		PeriodStart: it.PeriodStart, PeriodEnd: it.PeriodEnd}, snap.Subscriptions[0].Items[0])
	require.Equal(t, map[string]int64{"GET /v1/customers/{id}": 1}, off.TakeReads(), "no product read without ProductPlans")
}
