package stripe_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v82"

	stripemock "github.com/billsync/billsync/mocks/stripe"
)

func TestSubscriptionUpdateSendsSignedEvent(t *testing.T) {
	t.Parallel()
	f := newFake(t, stripemock.Options{})
	rc := newReceiver(t)
	rc.register(f)
	forged := newReceiver(t) // verifies with the wrong secret: must reject everything
	f.AddWebhookEndpoint(forged.srv.URL)
	forged.mu.Lock()
	forged.secret = "whsec_not_the_right_one"
	forged.mu.Unlock()

	sub := f.subscribe(t, f.customer(t).ID, "price_free")
	_, err := f.sc.V1Subscriptions.Update(context.Background(), sub.ID, &stripe.SubscriptionUpdateParams{
		Items: []*stripe.SubscriptionUpdateItemParams{{ID: stripe.String(sub.Items.Data[0].ID), Price: stripe.String("price_pro")}},
	})
	require.NoError(t, err)
	f.waitIdle(t)

	events, rejected := rc.received()
	require.Zero(t, rejected, "every delivery verifies with stripe-go")
	require.Len(t, events, 4, "customer.created, created, invoice.paid, updated")
	updated := rc.ofType("customer.subscription.updated")
	require.Len(t, updated, 1)
	ev := updated[0]
	require.Equal(t, stripemock.DefaultAPIVersion, ev.APIVersion)
	require.Regexp(t, `^req_`, ev.Request.ID)

	var got stripe.Subscription
	require.NoError(t, json.Unmarshal(ev.Data.Raw, &got))
	require.Equal(t, sub.ID, got.ID)
	require.Equal(t, "price_pro", got.Items.Data[0].Price.ID)
	require.Equal(t, "pro", got.Items.Data[0].Price.LookupKey)
	require.Equal(t, "price_free", path(ev.Data.PreviousAttributes, "items", "data", 0, "price", "id"),
		"previous_attributes carries the old item")
	require.NotContains(t, ev.Data.PreviousAttributes, "status", "only changed fields")

	forgedEvents, forgedRejected := forged.received()
	require.Empty(t, forgedEvents)
	require.Equal(t, 12, forgedRejected, "a wrong secret fails verification: 4 events × 3 attempts (a 400 is retried)")

	firstTry := 0
	for _, d := range f.Deliveries() {
		if d.URL == rc.srv.URL {
			require.Equal(t, 1, d.Attempt, "accepted at once")
			require.Equal(t, http.StatusOK, d.StatusCode)
			firstTry++
		}
	}
	require.Equal(t, 4, firstTry)
}

func TestEndpointAPIVersionShapesItsEvents(t *testing.T) {
	t.Parallel()
	f := newFake(t, stripemock.Options{})
	rc := newReceiver(t)
	resp, ep := f.do(t, http.MethodPost, "/v1/webhook_endpoints", url.Values{"url": {rc.srv.URL},
		"api_version": {"2024-06-20"}, "enabled_events[]": {"customer.subscription.created"}}, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Regexp(t, `^we_`, ep["id"])
	require.Regexp(t, `^whsec_`, ep["secret"])
	rc.mu.Lock()
	rc.secret = ep["secret"].(string)
	rc.mu.Unlock()

	sub := f.subscribe(t, f.customer(t).ID, "price_pro")
	f.waitIdle(t)
	events, rejected := rc.received()
	require.Zero(t, rejected)
	require.Len(t, events, 1, "only the enabled event type")
	ev := events[0]
	require.Equal(t, "customer.subscription.created", string(ev.Type))
	require.Equal(t, "2024-06-20", ev.APIVersion)
	require.EqualValues(t, sub.Items.Data[0].CurrentPeriodEnd, ev.Data.Object["current_period_end"], "old shape")
	require.False(t, has(path(ev.Data.Object, "items", "data", 0), "current_period_end"))
}

func TestClockAdvanceRenewsSubscriptions(t *testing.T) {
	t.Parallel()
	clock := stripemock.NewClock(time.Date(2025, 1, 31, 12, 0, 0, 0, time.UTC))
	f := newFake(t, stripemock.Options{Clock: clock})
	rc := newReceiver(t)
	rc.register(f)
	sub := f.subscribe(t, f.customer(t).ID, "price_pro")
	first := sub.Items.Data[0]
	require.Equal(t, time.Date(2025, 2, 28, 12, 0, 0, 0, time.UTC).Unix(), first.CurrentPeriodEnd,
		"a Jan 31 anchor ends on the last day of February")

	f.Clock().Advance(30 * 24 * time.Hour) // to Mar 2: one renewal
	renewed, err := f.sc.V1Subscriptions.Retrieve(context.Background(), sub.ID, nil)
	require.NoError(t, err)
	item := renewed.Items.Data[0]
	require.Equal(t, first.CurrentPeriodEnd, item.CurrentPeriodStart, "new period starts at the old end")
	require.Equal(t, time.Date(2025, 3, 31, 12, 0, 0, 0, time.UTC).Unix(), item.CurrentPeriodEnd)
	require.NotEqual(t, sub.LatestInvoice.ID, renewed.LatestInvoice.ID)

	f.waitIdle(t)
	paid := rc.ofType("invoice.paid")
	require.Len(t, paid, 2)
	var cycle stripe.Invoice
	for _, e := range paid {
		if e.Data.Object["billing_reason"] == "subscription_cycle" {
			require.NoError(t, json.Unmarshal(e.Data.Raw, &cycle))
		}
	}
	require.Equal(t, renewed.LatestInvoice.ID, cycle.ID)
	require.Equal(t, sub.ID, cycle.Parent.SubscriptionDetails.Subscription.ID)
	require.Equal(t, int64(2000), cycle.AmountPaid)
	require.Equal(t, item.CurrentPeriodStart, cycle.Lines.Data[0].Period.Start)
	require.Equal(t, item.CurrentPeriodEnd, cycle.Lines.Data[0].Period.End)
	updated := rc.ofType("customer.subscription.updated")
	require.Len(t, updated, 1)
	require.EqualValues(t, first.CurrentPeriodEnd, path(updated[0].Data.Object, "items", "data", 0, "current_period_start"))
	require.EqualValues(t, first.CurrentPeriodStart, path(updated[0].Data.PreviousAttributes, "items", "data", 0, "current_period_start"))

	// The control endpoint advances the same clock, 61 days to May 2: renewals
	// on Mar 31 and Apr 30.
	resp, err := http.Post(f.URL+"/_mock/clock/advance", "application/json", bytes.NewBufferString(`{"seconds": 5270400}`))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	renewed, err = f.sc.V1Subscriptions.Retrieve(context.Background(), sub.ID, nil)
	require.NoError(t, err)
	require.Equal(t, time.Date(2025, 4, 30, 12, 0, 0, 0, time.UTC).Unix(), renewed.Items.Data[0].CurrentPeriodStart)
	require.Equal(t, time.Date(2025, 5, 31, 12, 0, 0, 0, time.UTC).Unix(), renewed.Items.Data[0].CurrentPeriodEnd)
	f.waitIdle(t)
	require.Len(t, rc.ofType("invoice.paid"), 4)
}

func TestCancelAtPeriodEndEndsAtRenewal(t *testing.T) {
	t.Parallel()
	f := newFake(t, stripemock.Options{})
	rc := newReceiver(t)
	rc.register(f)
	sub := f.subscribe(t, f.customer(t).ID, "price_pro")
	_, err := f.sc.V1Subscriptions.Update(context.Background(), sub.ID, &stripe.SubscriptionUpdateParams{CancelAtPeriodEnd: stripe.Bool(true)})
	require.NoError(t, err)

	f.Clock().Advance(32 * 24 * time.Hour)
	got, err := f.sc.V1Subscriptions.Retrieve(context.Background(), sub.ID, nil)
	require.NoError(t, err)
	require.Equal(t, stripe.SubscriptionStatusCanceled, got.Status)
	require.Equal(t, sub.Items.Data[0].CurrentPeriodEnd, got.EndedAt)
	f.waitIdle(t)
	require.Len(t, rc.ofType("customer.subscription.deleted"), 1)
	require.Len(t, rc.ofType("invoice.paid"), 1, "no renewal invoice")
}

func TestFailedDeliveryIsRetried(t *testing.T) {
	t.Parallel()
	f := newFake(t, stripemock.Options{DeliveryAttempts: 3, RetryBackoff: 10 * time.Millisecond})
	rc := newReceiver(t)
	rc.status = http.StatusServiceUnavailable
	rc.register(f)
	f.subscribe(t, f.customer(t).ID, "price_pro")
	f.waitIdle(t)

	events, _ := rc.received()
	require.Len(t, events, 9, "3 events × 3 attempts")
	attempts := map[int]int{}
	for _, d := range f.Deliveries() {
		require.Equal(t, http.StatusServiceUnavailable, d.StatusCode)
		attempts[d.Attempt]++
	}
	require.Equal(t, map[int]int{1: 3, 2: 3, 3: 3}, attempts)
}
