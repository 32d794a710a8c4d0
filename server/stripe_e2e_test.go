package server_test

import (
	"context"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
	stripeapi "github.com/stripe/stripe-go/v82"

	stripemock "github.com/billsync/billsync/mocks/stripe"
	"github.com/billsync/billsync/providers/stripe"
	"github.com/billsync/billsync/server"
	"github.com/billsync/billsync/store/storetest"
)

// TestFakeStripeDeliversToIntake: a subscription change made through the
// real stripe-go client at the fake Stripe produces signed deliveries that
// billsync's intake verifies and stores.
func TestFakeStripeDeliversToIntake(t *testing.T) {
	ctx := context.Background()
	st := storetest.NewStore(t)
	pool := st.Pool()
	fake := stripemock.New(stripemock.Options{})
	t.Cleanup(fake.Close)
	fakeHTTP := httptest.NewServer(fake)
	t.Cleanup(fakeHTTP.Close)
	fake.AddPrice("price_free", "free", 0)
	fake.AddPrice("price_pro", "pro", 2000)

	// billsync knows the endpoint's secret only after registering it.
	var intake *server.Server
	intakeHTTP := httptest.NewServer(httpHandlerFunc(func() *server.Server { return intake }))
	t.Cleanup(intakeHTTP.Close)
	secret := fake.AddWebhookEndpoint(intakeHTTP.URL + "/webhooks/stripe")
	v, err := stripe.NewVerifier([]string{secret}, 0)
	require.NoError(t, err)
	intake = server.New(server.Config{Inbox: st, Verifiers: []server.Verifier{v}})

	sc := stripeapi.NewClient(stripemock.DefaultAPIKey, stripeapi.WithBackends(stripeapi.NewBackendsWithConfig(&stripeapi.BackendConfig{
		URL: stripeapi.String(fakeHTTP.URL), MaxNetworkRetries: stripeapi.Int64(0),
		LeveledLogger: &stripeapi.LeveledLogger{Level: stripeapi.LevelNull},
	})))
	cus, err := sc.V1Customers.Create(ctx, &stripeapi.CustomerCreateParams{Metadata: map[string]string{"user_id": "u1"}})
	require.NoError(t, err)
	sub, err := sc.V1Subscriptions.Create(ctx, &stripeapi.SubscriptionCreateParams{
		Customer: stripeapi.String(cus.ID),
		Items:    []*stripeapi.SubscriptionCreateItemParams{{Price: stripeapi.String("price_free")}},
	})
	require.NoError(t, err)
	_, err = sc.V1Subscriptions.Update(ctx, sub.ID, &stripeapi.SubscriptionUpdateParams{
		Items: []*stripeapi.SubscriptionUpdateItemParams{{ID: stripeapi.String(sub.Items.Data[0].ID), Price: stripeapi.String("price_pro")}},
	})
	require.NoError(t, err)
	require.NoError(t, fake.WaitIdle(ctx))

	for _, d := range fake.Deliveries() {
		require.Equal(t, 200, d.StatusCode, "delivery of %s %s", d.EventType, d.EventID)
	}
	rows, err := pool.Query(ctx, `SELECT type FROM inbox_events WHERE customer_id = $1 ORDER BY type`, cus.ID)
	require.NoError(t, err)
	var types []string
	for rows.Next() {
		var typ string
		require.NoError(t, rows.Scan(&typ))
		types = append(types, typ)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"customer.subscription.created", "customer.subscription.updated", "invoice.paid"}, types)
	require.Equal(t, 1, rowCounts(t, pool)["reconcile_queue"])
}
