package stripe_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v82"

	stripemock "github.com/billsync/billsync/mocks/stripe"
)

var t0 = time.Date(2026, 1, 10, 12, 0, 0, 0, time.UTC)

// stoppedFake is a fake on a clock that moves only with Advance.
// Its events list keeps every event (unless opts says otherwise): these
// tests advance the clock by months and read the history.
func stoppedFake(t *testing.T, opts stripemock.Options) *fake {
	t.Helper()
	opts.Clock = stripemock.NewStoppedClock(t0)
	opts.EventsKept = cmp.Or(opts.EventsKept, -1)
	return newFake(t, opts)
}

// eventTypes lists the fake's events for object id (or all with id ""),
// oldest first.
func (f *fake) eventTypes(t *testing.T, id string) []string {
	t.Helper()
	var types []string
	for e, err := range f.sc.V1Events.List(context.Background(), &stripe.EventListParams{}) {
		require.NoError(t, err)
		if id == "" || e.Data.Object["id"] == id || e.Data.Object["subscription"] == id ||
			path(e.Data.Object, "parent", "subscription_details", "subscription") == id {
			types = append(types, string(e.Type))
		}
	}
	slices.Reverse(types)
	return types
}

func (f *fake) control(t *testing.T, path, body string) {
	t.Helper()
	resp, err := http.Post(f.URL+path, "application/json", bytes.NewBufferString(body))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, path)
}

func (f *fake) getSub(t *testing.T, id string) *stripe.Subscription {
	t.Helper()
	sub, err := f.sc.V1Subscriptions.Retrieve(context.Background(), id, nil)
	require.NoError(t, err)
	return sub
}

func TestDeleteCustomerCancelsItsSubscriptions(t *testing.T) {
	t.Parallel()
	f := newFake(t, stripemock.Options{})
	ctx := context.Background()
	cust := f.customer(t)
	a := f.subscribe(t, cust.ID, "price_pro")
	b := f.subscribe(t, cust.ID, "price_team")

	deleted, err := f.sc.V1Customers.Delete(ctx, cust.ID, nil)
	require.NoError(t, err)
	require.True(t, deleted.Deleted)

	for _, id := range []string{a.ID, b.ID} {
		sub := f.getSub(t, id)
		require.Equal(t, stripe.SubscriptionStatusCanceled, sub.Status)
		require.NotZero(t, sub.EndedAt)
	}
	// Retrieve answers 200 with the deleted stub, not 404.
	resp, body := f.do(t, http.MethodGet, "/v1/customers/"+cust.ID, nil, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, map[string]any{"id": cust.ID, "object": "customer", "deleted": true}, body)
	got, err := f.sc.V1Customers.Retrieve(ctx, cust.ID, nil)
	require.NoError(t, err)
	require.True(t, got.Deleted)

	// A customer that never existed is still 404 resource_missing.
	resp, body = f.do(t, http.MethodGet, "/v1/customers/cus_never", nil, nil)
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	require.Equal(t, "resource_missing", path(body, "error", "code"))
	// Deleting twice, or writing to it, answers like an unknown id.
	resp, _ = f.do(t, http.MethodDelete, "/v1/customers/"+cust.ID, nil, nil)
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	resp, _ = f.do(t, http.MethodPost, "/v1/subscriptions", url.Values{"customer": {cust.ID}, "items[0][price]": {"price_pro"}}, nil)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	_, list := f.do(t, http.MethodGet, "/v1/customers", nil, nil)
	require.Empty(t, list["data"], "a deleted customer is not listed")

	types := f.eventTypes(t, "")
	require.Equal(t, []string{"customer.subscription.deleted", "customer.subscription.deleted", "customer.deleted"}, types[len(types)-3:])
	var ev stripe.Event
	for e, err := range f.sc.V1Events.List(ctx, &stripe.EventListParams{Type: stripe.String("customer.deleted")}) {
		require.NoError(t, err)
		ev = *e
	}
	require.Equal(t, cust.ID, ev.Data.Object["id"])
	require.Equal(t, "ada@example.com", ev.Data.Object["email"], "the event carries the customer as it was")
}

func TestCustomerEvents(t *testing.T) {
	t.Parallel()
	f := newFake(t, stripemock.Options{})
	cust := f.customer(t)
	_, err := f.sc.V1Customers.Update(context.Background(), cust.ID, &stripe.CustomerUpdateParams{Email: stripe.String("b@example.com")})
	require.NoError(t, err)
	_, err = f.sc.V1Customers.Update(context.Background(), cust.ID, &stripe.CustomerUpdateParams{Email: stripe.String("b@example.com")})
	require.NoError(t, err)
	require.Equal(t, []string{"customer.created", "customer.updated"}, f.eventTypes(t, cust.ID), "an update that changes nothing sends nothing")
	_, list := f.do(t, http.MethodGet, "/v1/events", url.Values{"type": {"customer.updated"}}, nil)
	require.Equal(t, "ada@example.com", path(list, "data", 0, "data", "previous_attributes", "email"))
	require.Equal(t, "b@example.com", path(list, "data", 0, "data", "object", "email"))
}

// TestFailingRenewal walks a renewal whose card declines through the
// account's dunning setting, on the fake clock.
func TestFailingRenewal(t *testing.T) {
	t.Parallel()
	day := 24 * time.Hour
	for _, tc := range []struct {
		name   string
		final  string
		fixAt  int // fix the card before this retry (0 = never)
		status []string
		events []string
	}{
		{"ThenUnpaid", "unpaid", 0,
			[]string{"past_due", "past_due", "unpaid"},
			[]string{"customer.subscription.updated", "invoice.payment_failed", "customer.subscription.updated",
				"invoice.payment_failed", "invoice.payment_failed", "customer.subscription.updated"}},
		{"ThenCanceled", "canceled", 0,
			[]string{"past_due", "past_due", "canceled"},
			[]string{"customer.subscription.updated", "invoice.payment_failed", "customer.subscription.updated",
				"invoice.payment_failed", "invoice.payment_failed", "customer.subscription.deleted"}},
		{"RetrySucceeds", "unpaid", 1,
			[]string{"past_due", "active", "active"},
			[]string{"customer.subscription.updated", "invoice.payment_failed", "customer.subscription.updated",
				"invoice.paid", "customer.subscription.updated"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := stoppedFake(t, stripemock.Options{Dunning: stripemock.Dunning{Retries: []time.Duration{3 * day, 5 * day}, Final: tc.final}})
			cust := f.customer(t)
			sub := f.subscribe(t, cust.ID, "price_pro")
			end := sub.Items.Data[0].CurrentPeriodEnd
			f.control(t, "/_mock/customers/"+cust.ID+"/card", `{"fails":true}`)

			f.Clock().Advance(time.Unix(end, 0).Sub(t0) + time.Hour)
			got := f.getSub(t, sub.ID)
			require.Equal(t, stripe.SubscriptionStatus(tc.status[0]), got.Status)
			require.Equal(t, end, got.Items.Data[0].CurrentPeriodStart, "the new period is open though unpaid")
			inv, err := f.sc.V1Invoices.Retrieve(context.Background(), got.LatestInvoice.ID, nil)
			require.NoError(t, err)
			require.Equal(t, stripe.InvoiceStatusOpen, inv.Status)
			require.Equal(t, int64(1), inv.AttemptCount)
			require.Equal(t, int64(0), inv.AmountPaid)
			require.Equal(t, end+int64(3*day/time.Second), inv.NextPaymentAttempt)

			if tc.fixAt == 1 {
				require.NoError(t, f.SetCardFails(cust.ID, false))
			}
			f.Clock().Advance(3 * day)
			require.Equal(t, stripe.SubscriptionStatus(tc.status[1]), f.getSub(t, sub.ID).Status)
			f.Clock().Advance(5 * day)
			require.Equal(t, stripe.SubscriptionStatus(tc.status[2]), f.getSub(t, sub.ID).Status)

			types := f.eventTypes(t, sub.ID)
			require.Equal(t, tc.events, types[2:], "after customer.subscription.created and the first invoice.paid")
			if tc.final == "canceled" {
				require.Equal(t, "payment_failed", string(f.getSub(t, sub.ID).CancellationDetails.Reason))
			}
		})
	}

	t.Run("PayAfterUnpaid", func(t *testing.T) {
		t.Parallel()
		f := stoppedFake(t, stripemock.Options{Dunning: stripemock.Dunning{Retries: []time.Duration{}, Final: "unpaid"}})
		cust := f.customer(t)
		sub := f.subscribe(t, cust.ID, "price_pro")
		require.NoError(t, f.SetCardFails(cust.ID, true))
		f.Clock().Advance(32 * day)
		got := f.getSub(t, sub.ID)
		require.Equal(t, stripe.SubscriptionStatusUnpaid, got.Status, "no retries: unpaid at the first failure")

		_, err := f.sc.V1Invoices.Pay(context.Background(), got.LatestInvoice.ID, nil)
		var se *stripe.Error
		require.ErrorAs(t, err, &se)
		require.Equal(t, http.StatusPaymentRequired, se.HTTPStatusCode)
		require.Equal(t, stripe.ErrorCodeCardDeclined, se.Code)

		require.NoError(t, f.SetCardFails(cust.ID, false))
		inv, err := f.sc.V1Invoices.Pay(context.Background(), got.LatestInvoice.ID, nil)
		require.NoError(t, err)
		require.Equal(t, stripe.InvoiceStatusPaid, inv.Status)
		require.Equal(t, int64(3), inv.AttemptCount)
		require.Equal(t, stripe.SubscriptionStatusActive, f.getSub(t, sub.ID).Status)
		types := f.eventTypes(t, sub.ID)
		require.Equal(t, []string{"invoice.payment_failed", "invoice.paid", "customer.subscription.updated"}, types[len(types)-3:])
	})

	t.Run("FirstPaymentFails", func(t *testing.T) {
		t.Parallel()
		f := stoppedFake(t, stripemock.Options{})
		cust := f.customer(t)
		require.NoError(t, f.SetCardFails(cust.ID, true))
		sub := f.subscribe(t, cust.ID, "price_pro")
		require.Equal(t, stripe.SubscriptionStatusIncomplete, sub.Status)
		f.Clock().Advance(24 * time.Hour)
		require.Equal(t, stripe.SubscriptionStatusIncompleteExpired, f.getSub(t, sub.ID).Status)
	})
}

func TestTrialThenActive(t *testing.T) {
	t.Parallel()
	f := stoppedFake(t, stripemock.Options{})
	cust := f.customer(t)
	sub, err := f.sc.V1Subscriptions.Create(context.Background(), &stripe.SubscriptionCreateParams{
		Customer: stripe.String(cust.ID), TrialPeriodDays: stripe.Int64(14),
		Items: []*stripe.SubscriptionCreateItemParams{{Price: stripe.String("price_pro")}},
	})
	require.NoError(t, err)
	trialEnd := t0.Add(14 * 24 * time.Hour).Unix()
	require.Equal(t, stripe.SubscriptionStatusTrialing, sub.Status)
	require.Equal(t, trialEnd, sub.TrialEnd)
	require.Equal(t, t0.Unix(), sub.TrialStart)
	require.Equal(t, trialEnd, sub.Items.Data[0].CurrentPeriodEnd)
	inv, err := f.sc.V1Invoices.Retrieve(context.Background(), sub.LatestInvoice.ID, nil)
	require.NoError(t, err)
	require.Equal(t, int64(0), inv.Total, "the trial's invoice is $0")
	require.Equal(t, stripe.InvoiceStatusPaid, inv.Status)

	f.Clock().Advance(15 * 24 * time.Hour)
	got := f.getSub(t, sub.ID)
	require.Equal(t, stripe.SubscriptionStatusActive, got.Status)
	require.Equal(t, trialEnd, got.Items.Data[0].CurrentPeriodStart)
	require.Equal(t, time.Unix(trialEnd, 0).UTC().AddDate(0, 1, 0).Unix(), got.Items.Data[0].CurrentPeriodEnd)
	require.Equal(t, trialEnd, got.BillingCycleAnchor)
	inv, err = f.sc.V1Invoices.Retrieve(context.Background(), got.LatestInvoice.ID, nil)
	require.NoError(t, err)
	require.Equal(t, int64(2000), inv.AmountPaid)
	require.Equal(t, []string{"customer.subscription.created", "invoice.paid", "customer.subscription.trial_will_end",
		"customer.subscription.updated", "invoice.paid"}, f.eventTypes(t, sub.ID))
	_, list := f.do(t, http.MethodGet, "/v1/events", url.Values{"type": {"customer.subscription.trial_will_end"}}, nil)
	require.EqualValues(t, trialEnd-3*24*3600, path(list, "data", 0, "created"), "three days before the trial ends")
	_, list = f.do(t, http.MethodGet, "/v1/events", url.Values{"type": {"customer.subscription.updated"}}, nil)
	require.Equal(t, "trialing", path(list, "data", 0, "data", "previous_attributes", "status"))

	// trial_end as a timestamp works too; one in the past is refused.
	resp, body := f.do(t, http.MethodPost, "/v1/subscriptions", url.Values{"customer": {cust.ID},
		"items[0][price]": {"price_pro"}, "trial_end": {strconv.FormatInt(f.Clock().Now().Add(48*time.Hour).Unix(), 10)}}, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "trialing", body["status"])
	resp, _ = f.do(t, http.MethodPost, "/v1/subscriptions", url.Values{"customer": {cust.ID},
		"items[0][price]": {"price_pro"}, "trial_end": {"1000"}}, nil)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
}

// yearlyPrice creates a yearly price through the API.
func (f *fake) yearlyPrice(t *testing.T, amount int64) string {
	t.Helper()
	p, err := f.sc.V1Prices.Create(context.Background(), &stripe.PriceCreateParams{
		Currency: stripe.String("usd"), UnitAmount: stripe.Int64(amount), Product: stripe.String("prod_addon"),
		Recurring: &stripe.PriceCreateRecurringParams{Interval: stripe.String("year")},
	})
	require.NoError(t, err)
	return p.ID
}

func TestMixedIntervalsEachItemHasItsPeriod(t *testing.T) {
	t.Parallel()
	f := stoppedFake(t, stripemock.Options{})
	yearly := f.yearlyPrice(t, 12000)
	cust := f.customer(t)
	sub, err := f.sc.V1Subscriptions.Create(context.Background(), &stripe.SubscriptionCreateParams{
		Customer: stripe.String(cust.ID),
		Items:    []*stripe.SubscriptionCreateItemParams{{Price: stripe.String(yearly)}, {Price: stripe.String("price_pro")}},
	})
	require.NoError(t, err)
	year, month := sub.Items.Data[0], sub.Items.Data[1]
	require.Equal(t, t0.AddDate(1, 0, 0).Unix(), year.CurrentPeriodEnd)
	require.Equal(t, t0.AddDate(0, 1, 0).Unix(), month.CurrentPeriodEnd)

	f.Clock().Advance(32 * 24 * time.Hour)
	got := f.getSub(t, sub.ID)
	require.Equal(t, year.CurrentPeriodStart, got.Items.Data[0].CurrentPeriodStart, "the yearly item did not renew")
	require.Equal(t, year.CurrentPeriodEnd, got.Items.Data[0].CurrentPeriodEnd)
	require.Equal(t, month.CurrentPeriodEnd, got.Items.Data[1].CurrentPeriodStart, "the monthly item did")
	require.Equal(t, t0.AddDate(0, 2, 0).Unix(), got.Items.Data[1].CurrentPeriodEnd)
	inv, err := f.sc.V1Invoices.Retrieve(context.Background(), got.LatestInvoice.ID, nil)
	require.NoError(t, err)
	require.Len(t, inv.Lines.Data, 1, "only the renewed item is invoiced")
	require.Equal(t, int64(2000), inv.Total)

	// Adding an item of another interval gives it its own period from now,
	// invoiced at once.
	now := f.Clock().Now()
	sub2 := f.subscribe(t, cust.ID, "price_team")
	upd, err := f.sc.V1Subscriptions.Update(context.Background(), sub2.ID, &stripe.SubscriptionUpdateParams{
		Items: []*stripe.SubscriptionUpdateItemParams{{Price: stripe.String(yearly)}}})
	require.NoError(t, err)
	require.Len(t, upd.Items.Data, 2)
	require.Equal(t, now.Unix(), upd.Items.Data[1].CurrentPeriodStart)
	require.Equal(t, now.UTC().AddDate(1, 0, 0).Unix(), upd.Items.Data[1].CurrentPeriodEnd)
	inv, err = f.sc.V1Invoices.Retrieve(context.Background(), upd.LatestInvoice.ID, nil)
	require.NoError(t, err)
	require.Equal(t, "subscription_update", string(inv.BillingReason))
	require.Equal(t, int64(12000), inv.AmountPaid)
}

func TestQuantities(t *testing.T) {
	t.Parallel()
	f := newFake(t, stripemock.Options{})
	cust := f.customer(t)
	resp, body := f.do(t, http.MethodPost, "/v1/subscriptions", url.Values{"customer": {cust.ID},
		"items[0][price]": {"price_pro"}, "items[0][quantity]": {"5"}, "expand[]": {"latest_invoice"}}, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.EqualValues(t, 5, path(body, "items", "data", 0, "quantity"))
	require.EqualValues(t, 10000, path(body, "latest_invoice", "total"))
	id, item := body["id"].(string), path(body, "items", "data", 0, "id").(string)

	resp, body = f.do(t, http.MethodPost, "/v1/subscriptions/"+id, url.Values{"items[0][id]": {item}, "items[0][quantity]": {"7"}}, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.EqualValues(t, 7, path(body, "items", "data", 0, "quantity"))
	require.Equal(t, item, path(body, "items", "data", 0, "id"))
	_, list := f.do(t, http.MethodGet, "/v1/events", url.Values{"type": {"customer.subscription.updated"}}, nil)
	require.EqualValues(t, 5, path(list, "data", 0, "data", "previous_attributes", "items", "data", 0, "quantity"))

	resp, _ = f.do(t, http.MethodPost, "/v1/subscriptions/"+id, url.Values{"items[0][id]": {item}, "items[0][quantity]": {"-1"}}, nil)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
}

func TestCancelAtUpdatable(t *testing.T) {
	t.Parallel()
	f := stoppedFake(t, stripemock.Options{})
	sub := f.subscribe(t, f.customer(t).ID, "price_pro")
	at := t0.Add(10 * 24 * time.Hour).Unix()
	resp, body := f.do(t, http.MethodPost, "/v1/subscriptions/"+sub.ID, url.Values{"cancel_at": {strconv.FormatInt(at, 10)}}, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.EqualValues(t, at, body["cancel_at"])
	require.Equal(t, false, body["cancel_at_period_end"], "inside the period: not at period end")

	// Cleared, then set again: only the last one counts.
	resp, body = f.do(t, http.MethodPost, "/v1/subscriptions/"+sub.ID, url.Values{"cancel_at": {""}}, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Nil(t, body["cancel_at"])
	f.Clock().Advance(11 * 24 * time.Hour)
	require.Equal(t, stripe.SubscriptionStatusActive, f.getSub(t, sub.ID).Status)

	at = f.Clock().Now().Add(24 * time.Hour).Unix()
	_, err := f.sc.V1Subscriptions.Update(context.Background(), sub.ID, &stripe.SubscriptionUpdateParams{CancelAt: stripe.Int64(at)})
	require.NoError(t, err)
	f.Clock().Advance(25 * time.Hour)
	got := f.getSub(t, sub.ID)
	require.Equal(t, stripe.SubscriptionStatusCanceled, got.Status)
	require.Equal(t, at, got.EndedAt)

	resp, _ = f.do(t, http.MethodPost, "/v1/subscriptions/"+f.subscribe(t, f.customer(t).ID, "price_pro").ID,
		url.Values{"cancel_at": {"12"}}, nil)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, "a past cancel_at is refused")
}

func TestPauseCollection(t *testing.T) {
	t.Parallel()
	f := stoppedFake(t, stripemock.Options{})
	sub := f.subscribe(t, f.customer(t).ID, "price_pro")
	resp, body := f.do(t, http.MethodPost, "/v1/subscriptions/"+sub.ID, url.Values{"pause_collection[behavior]": {"void"}}, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, map[string]any{"behavior": "void", "resumes_at": nil}, body["pause_collection"])
	require.Equal(t, "active", body["status"], "pausing collection does not change the status")

	f.Clock().Advance(32 * 24 * time.Hour)
	got := f.getSub(t, sub.ID)
	require.Equal(t, stripe.SubscriptionStatusActive, got.Status)
	require.Equal(t, stripe.SubscriptionPauseCollectionBehaviorVoid, got.PauseCollection.Behavior)
	inv, err := f.sc.V1Invoices.Retrieve(context.Background(), got.LatestInvoice.ID, nil)
	require.NoError(t, err)
	require.Equal(t, stripe.InvoiceStatusVoid, inv.Status, "the renewal invoice is voided, not charged")

	resp, body = f.do(t, http.MethodPost, "/v1/subscriptions/"+sub.ID, url.Values{"pause_collection": {""}}, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Nil(t, body["pause_collection"])
	_, list := f.do(t, http.MethodGet, "/v1/events", url.Values{"type": {"customer.subscription.updated"}}, nil)
	require.Equal(t, "void", path(list, "data", 0, "data", "previous_attributes", "pause_collection", "behavior"))

	resp, _ = f.do(t, http.MethodPost, "/v1/subscriptions/"+sub.ID, url.Values{"pause_collection[behavior]": {"nap"}}, nil)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)

	// resumes_at ends the pause on the fake clock.
	at := f.Clock().Now().Add(time.Hour).Unix()
	_, err = f.sc.V1Subscriptions.Update(context.Background(), sub.ID, &stripe.SubscriptionUpdateParams{
		PauseCollection: &stripe.SubscriptionUpdatePauseCollectionParams{Behavior: stripe.String("keep_as_draft"), ResumesAt: stripe.Int64(at)}})
	require.NoError(t, err)
	require.Equal(t, at, f.getSub(t, sub.ID).PauseCollection.ResumesAt)
	f.Clock().Advance(2 * time.Hour)
	require.Nil(t, f.getSub(t, sub.ID).PauseCollection)
}

func TestEventsFilters(t *testing.T) {
	t.Parallel()
	f := stoppedFake(t, stripemock.Options{DeliveryAttempts: 1})
	down := newReceiver(t)
	down.status = http.StatusServiceUnavailable
	cust := f.customer(t) // before any endpoint: delivered to nobody, so "successful"
	down.registerFor(t, f, "customer.subscription.created", "invoice.paid")
	f.Clock().Advance(time.Hour)
	sub := f.subscribe(t, cust.ID, "price_pro") // created + invoice.paid at t0+1h, never accepted
	f.waitIdle(t)

	ids := func(q url.Values) []string {
		_, list := f.do(t, http.MethodGet, "/v1/events", q, nil)
		var out []string
		for _, e := range list["data"].([]any) {
			out = append(out, path(e, "type").(string))
		}
		return out
	}
	after := strconv.FormatInt(t0.Unix(), 10)
	require.Equal(t, []string{"invoice.paid", "customer.subscription.created"}, ids(url.Values{"created[gt]": {after}}))
	require.Equal(t, []string{"customer.created"}, ids(url.Values{"created[lte]": {after}}))
	require.Equal(t, []string{"customer.created"}, ids(url.Values{"created": {after}}))
	require.Equal(t, []string{"invoice.paid", "customer.subscription.created", "customer.created"},
		ids(url.Values{"created[gte]": {after}, "created[lt]": {strconv.FormatInt(t0.Unix()+3601, 10)}}))
	require.Equal(t, []string{"customer.subscription.created"}, ids(url.Values{"type": {"customer.subscription.created"}}))
	require.Equal(t, []string{"invoice.paid", "customer.subscription.created"}, ids(url.Values{"delivery_success": {"false"}}))
	require.Equal(t, []string{"customer.created"}, ids(url.Values{"delivery_success": {"true"}}))
	_, list := f.do(t, http.MethodGet, "/v1/events", url.Values{"delivery_success": {"false"}}, nil)
	require.EqualValues(t, 1, path(list, "data", 0, "pending_webhooks"))

	resp, _ := f.do(t, http.MethodGet, "/v1/events", url.Values{"created[after]": {after}}, nil)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)

	// Once an endpoint accepts it, an event leaves delivery_success=false.
	up := newReceiver(t)
	up.registerFor(t, f, "customer.subscription.updated")
	_, err := f.sc.V1Subscriptions.Update(context.Background(), sub.ID, &stripe.SubscriptionUpdateParams{Metadata: map[string]string{"k": "v"}})
	require.NoError(t, err)
	f.waitIdle(t)
	require.Equal(t, []string{"invoice.paid", "customer.subscription.created"}, ids(url.Values{"delivery_success": {"false"}}),
		"the update went to the endpoint that accepts it, and only there")
	var got []string
	for e, err := range f.sc.V1Events.List(context.Background(), &stripe.EventListParams{DeliverySuccess: stripe.Bool(true)}) {
		require.NoError(t, err)
		got = append(got, string(e.Type))
	}
	require.Equal(t, []string{"customer.subscription.updated", "customer.created"}, got)
}

// rawJSON decodes body for the tests that look at every field.
func rawJSON(t *testing.T, body []byte) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(body, &m))
	return m
}
