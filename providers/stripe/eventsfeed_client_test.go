package stripe_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/providers/stripe"
	"github.com/billsync/billsync/reconcile"
)

// TestListEventsPagesTheFeedTypes: ListEvents lists, 100 a page and newest
// first, the events of the feed's types created since the bound, and
// pages to the end.
func TestListEventsPagesTheFeedTypes(t *testing.T) {
	ctx := context.Background()
	h := testenv.ForTest(t, testenv.Stripe, testenv.Options{})
	since := h.Stripe.Fake.Clock().Now()
	want := map[string]bool{}
	for range 60 {
		cus, err := h.Stripe.Customer(ctx, "")
		require.NoError(t, err)
		_, err = h.Stripe.Subscribe(ctx, cus, "price_pro") // subscription.created, invoice.paid, …
		require.NoError(t, err)
		want[cus] = true
	}
	seen, pages, after := map[string]int{}, 0, ""
	var last time.Time
	for {
		page, err := h.Stripe.Client.ListEvents(ctx, since, after)
		require.NoError(t, err)
		pages++
		require.LessOrEqual(t, len(page.Events), 100)
		for _, e := range page.Events {
			require.NotContains(t, []string{"customer.created", "invoice.created", "invoice.finalized"}, e.Event.Type, "not a feed type")
			require.Empty(t, e.Event.IgnoreReason)
			if !last.IsZero() {
				require.False(t, e.Event.Time.After(last), "newest first")
			}
			last = e.Event.Time
			seen[e.Event.CustomerID]++
		}
		if after = page.Next; after == "" {
			break
		}
	}
	require.Greater(t, pages, 1)
	for cus := range want {
		require.Positive(t, seen[cus], cus)
	}
	page, err := h.Stripe.Client.ListEvents(ctx, h.Stripe.Fake.Clock().Now().Add(time.Hour), "")
	require.NoError(t, err)
	require.Empty(t, page.Events, "nothing created after the bound")
}

// TestWebhookEndpointStatus: the endpoint is read by id, or found by its
// URL; a disabled one reads so; none is ErrNotFound.
func TestWebhookEndpointStatus(t *testing.T) {
	ctx := context.Background()
	h := testenv.ForTest(t, testenv.Stripe, testenv.Options{})
	byURL := stripe.Endpoint{Client: h.Stripe.Client}
	_, _, err := byURL.WebhookEndpoint(ctx)
	require.ErrorIs(t, err, reconcile.ErrNotFound)

	h.Stripe.Fake.AddWebhookEndpoint("https://elsewhere.example/hooks")
	h.Stripe.Fake.AddWebhookEndpoint("https://billing.example/webhooks/stripe")
	ids := h.Stripe.Fake.WebhookEndpointIDs()
	id, enabled, err := byURL.WebhookEndpoint(ctx)
	require.NoError(t, err)
	require.Equal(t, ids[1], id)
	require.True(t, enabled)

	require.True(t, h.Stripe.Fake.DisableWebhookEndpoint(ids[1]))
	id, enabled, err = byURL.WebhookEndpoint(ctx)
	require.NoError(t, err)
	require.Equal(t, ids[1], id)
	require.False(t, enabled)

	id, enabled, err = stripe.Endpoint{Client: h.Stripe.Client, ID: ids[0]}.WebhookEndpoint(ctx)
	require.NoError(t, err)
	require.Equal(t, ids[0], id)
	require.True(t, enabled)
	_, _, err = stripe.Endpoint{Client: h.Stripe.Client, ID: "we_missing"}.WebhookEndpoint(ctx)
	require.ErrorIs(t, err, reconcile.ErrNotFound)
}
