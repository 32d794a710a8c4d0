package stripe_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v82"

	stripemock "github.com/billsync/billsync/mocks/stripe"
)

func TestFaultDuplicateCopies(t *testing.T) {
	t.Parallel()
	f := newFake(t, stripemock.Options{Faults: stripemock.Faults{DuplicateCopies: 2}})
	rc := newReceiver(t)
	rc.register(f)
	f.subscribe(t, f.customer(t).ID, "price_pro")
	f.waitIdle(t)

	events, rejected := rc.received()
	require.Zero(t, rejected)
	byID := map[string]int{}
	for _, e := range events {
		byID[e.ID]++
	}
	require.Len(t, byID, 3, "three distinct events: customer.created, customer.subscription.created, invoice.paid")
	for id, n := range byID {
		require.Equal(t, 3, n, "event %s arrives 1+2 times", id)
	}
	require.Len(t, f.Deliveries(), 9)
}

func TestFaultReorderDelay(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t)
	// In a synctest bubble the delays and the spacing below are the bubble's
	// clock: seed 3 holds one delivery back ~320 ms longer than a later
	// one, whatever the machine's load.
	synctest.Test(t, func(t *testing.T) {
		f := newBubbleFake(t, stripemock.Options{Faults: stripemock.Faults{ReorderDelay: 400 * time.Millisecond, Seed: 3}},
			rc.srv.Config.Handler)
		rc.registerFor(t, f, "customer.subscription.created") // one event per request
		cust := f.create(t, "/v1/customers", url.Values{"email": {"ada@example.com"}})
		var created []string
		for range 6 {
			created = append(created, f.create(t, "/v1/subscriptions", url.Values{"customer": {cust}, "items[0][price]": {"price_pro"}}))
			// Spaced out so that, without the knob, deliveries keep their order.
			time.Sleep(20 * time.Millisecond)
		}
		require.NoError(t, f.WaitIdle(context.Background()))

		events, _ := rc.received()
		var arrived []string
		for _, e := range events {
			arrived = append(arrived, e.Data.Object["id"].(string))
		}
		require.ElementsMatch(t, created, arrived, "every event arrives once")
		require.NotEqual(t, created, arrived, "some arrive out of creation order")
	})
}

func TestFaultDropRate(t *testing.T) {
	t.Parallel()
	f := newFake(t, stripemock.Options{Faults: stripemock.Faults{DropRate: 1}})
	rc := newReceiver(t)
	rc.register(f)
	f.subscribe(t, f.customer(t).ID, "price_pro")
	f.waitIdle(t)

	events, _ := rc.received()
	require.Empty(t, events)
	deliveries := f.Deliveries()
	require.Len(t, deliveries, 3)
	for _, d := range deliveries {
		require.True(t, d.Dropped)
		require.Zero(t, d.StatusCode)
	}
}

func TestFault5xx(t *testing.T) {
	t.Parallel()
	f := newFake(t, stripemock.Options{Faults: stripemock.Faults{Error5xxRate: 1}})
	_, err := f.sc.V1Customers.Create(context.Background(), &stripe.CustomerCreateParams{Email: stripe.String("x@example.com")})
	var se *stripe.Error
	require.ErrorAs(t, err, &se)
	require.Equal(t, http.StatusInternalServerError, se.HTTPStatusCode)
	require.Equal(t, stripe.ErrorTypeAPI, se.Type)

	f.SetFaults(stripemock.Faults{})
	resp, list := f.do(t, http.MethodGet, "/v1/customers", nil, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Empty(t, list["data"], "a failed request changes nothing")
}

func TestFaultRateLimitRate(t *testing.T) {
	t.Parallel()
	f := newFake(t, stripemock.Options{Faults: stripemock.Faults{RateLimitRate: 1, RetryAfter: 3 * time.Second}})
	resp, body := f.do(t, http.MethodGet, "/v1/customers", nil, nil)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	require.Equal(t, "3", resp.Header.Get("Retry-After"))
	require.Equal(t, "rate_limit", path(body, "error", "code"))

	_, err := f.sc.V1Customers.Retrieve(context.Background(), "cus_any", nil)
	var se *stripe.Error
	require.ErrorAs(t, err, &se)
	require.Equal(t, http.StatusTooManyRequests, se.HTTPStatusCode)
	require.Equal(t, stripe.ErrorCodeRateLimit, se.Code)
}

func TestFaultLatency(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		f := newBubbleFake(t, stripemock.Options{Faults: stripemock.Faults{Latency: 120 * time.Millisecond}}, nil)
		start := time.Now()
		f.create(t, "/v1/customers", url.Values{"email": {"ada@example.com"}})
		require.Equal(t, 120*time.Millisecond, time.Since(start), "on the bubble's clock: the latency asked for, exactly")
	})
}

func TestFaultRequestsPerSecond(t *testing.T) {
	t.Parallel()
	f := newFake(t, stripemock.Options{Faults: stripemock.Faults{RequestsPerSecond: 1}})
	codes := map[int]int{}
	var retryAfter string
	for range 20 {
		resp, _ := f.do(t, http.MethodGet, "/v1/customers", nil, nil)
		codes[resp.StatusCode]++
		if resp.StatusCode == http.StatusTooManyRequests {
			retryAfter = resp.Header.Get("Retry-After")
		}
	}
	require.Positive(t, codes[http.StatusOK], "the bucket admits the first request")
	require.Positive(t, codes[http.StatusTooManyRequests], "a burst beyond the limit gets 429s")
	require.Empty(t, retryAfter, "Stripe's 429s carry no Retry-After")
}

func TestControlFaultsRoundTrip(t *testing.T) {
	t.Parallel()
	f := newFake(t, stripemock.Options{})
	resp, err := http.Post(f.URL+"/_mock/faults", "application/json",
		bytes.NewBufferString(`{"duplicate_copies":2,"reorder_delay":"1.5s","drop_rate":0.25,"latency":0.01,"seed":9,
			"random_copies":3,"stale_reads":"2s","target_key":"sk_test_billsync"}`))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, stripemock.Faults{DuplicateCopies: 2, ReorderDelay: 1500 * time.Millisecond, DropRate: 0.25,
		Latency: 10 * time.Millisecond, Seed: 9, RandomCopies: 3, StaleReads: 2 * time.Second,
		TargetKey: stripemock.DefaultAPIKey}, f.Faults())

	resp, err = http.Get(f.URL + "/_mock/faults")
	require.NoError(t, err)
	var got stripemock.Faults
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&got))
	resp.Body.Close()
	require.Equal(t, f.Faults(), got)

	resp, err = http.Post(f.URL+"/_mock/faults", "application/json", bytes.NewBufferString(`{"drop_rate":2}`))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Equal(t, 0.25, f.Faults().DropRate, "an invalid update changes nothing")
}

func TestControlSetsStatus(t *testing.T) {
	t.Parallel()
	f := newFake(t, stripemock.Options{})
	rc := newReceiver(t)
	rc.register(f)
	sub := f.subscribe(t, f.customer(t).ID, "price_pro")
	resp, err := http.Post(f.URL+"/_mock/subscriptions/"+sub.ID+"/status", "application/json", bytes.NewBufferString(`{"status":"past_due"}`))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	got, err := f.sc.V1Subscriptions.Retrieve(context.Background(), sub.ID, nil)
	require.NoError(t, err)
	require.Equal(t, stripe.SubscriptionStatusPastDue, got.Status)
	f.waitIdle(t)
	updated := rc.ofType("customer.subscription.updated")
	require.Len(t, updated, 1)
	require.Equal(t, "active", updated[0].Data.PreviousAttributes["status"])
	require.Error(t, f.SetSubscriptionStatus(sub.ID, "sleeping"))
}

// TestControlBillingEndpoints: the card, dunning and event-destination
// controls reach the fake.
func TestControlBillingEndpoints(t *testing.T) {
	t.Parallel()
	f := stoppedFake(t, stripemock.Options{})
	post := func(path, body string) int {
		resp, err := http.Post(f.URL+path, "application/json", bytes.NewBufferString(body))
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusBadRequest, post("/_mock/dunning", `{"final":"forgotten"}`))
	require.Equal(t, http.StatusOK, post("/_mock/dunning", `{"retries":["1h"],"final":"unpaid"}`))
	rc := newRawReceiver(t, true)
	require.Equal(t, http.StatusBadRequest, post("/_mock/event_destinations", `{"url":"ftp://x"}`))
	resp, err := http.Post(f.URL+"/_mock/event_destinations", "application/json",
		bytes.NewBufferString(`{"url":"`+rc.srv.URL+`","types":["v1.invoice.payment_failed"]}`))
	require.NoError(t, err)
	var dest struct{ Secret string }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&dest))
	resp.Body.Close()
	require.Regexp(t, `^whsec_`, dest.Secret)
	require.Equal(t, http.StatusNotFound, post("/_mock/customers/cus_nope/card", `{"fails":true}`))

	cust := f.customer(t)
	sub := f.subscribe(t, cust.ID, "price_pro")
	require.Equal(t, http.StatusOK, post("/_mock/customers/"+cust.ID+"/card", `{"fails":true}`))
	f.Clock().Advance(32 * 24 * time.Hour) // renewal fails; the one retry an hour later fails too
	got, err := f.sc.V1Subscriptions.Retrieve(context.Background(), sub.ID, nil)
	require.NoError(t, err)
	require.Equal(t, stripe.SubscriptionStatusUnpaid, got.Status, "one retry, then unpaid")
	f.waitIdle(t)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	require.Len(t, rc.bodies, 2, "two thin invoice.payment_failed events, nothing else")
	thin, err := stripe.NewClient("sk_test_unused").ParseThinEvent(rc.bodies[0], rc.heads[0].Get("Stripe-Signature"), dest.Secret)
	require.NoError(t, err)
	require.Equal(t, "invoice", thin.RelatedObject.Type)
	require.Equal(t, got.LatestInvoice.ID, thin.RelatedObject.ID)
}
