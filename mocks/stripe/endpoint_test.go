package stripe_test

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v82"

	stripemock "github.com/billsync/billsync/mocks/stripe"
)

// TestWebhookEndpointsAsStripe: stripe-go creates, retrieves, lists and
// updates endpoints at the fake; the secret comes only with the create; a
// disabled endpoint (by update, or by Stripe after failures) reads status
// disabled and is sent nothing.
func TestWebhookEndpointsAsStripe(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := stoppedFake(t, stripemock.Options{DeliveryAttempts: 1})
	rc := newReceiver(t)
	ep, err := f.sc.V1WebhookEndpoints.Create(ctx, &stripe.WebhookEndpointCreateParams{
		URL: stripe.String(rc.srv.URL + "/webhooks/stripe"), EnabledEvents: []*string{stripe.String("customer.subscription.created")},
		APIVersion: stripe.String("2024-06-20")})
	require.NoError(t, err)
	require.Regexp(t, `^we_`, ep.ID)
	require.Regexp(t, `^whsec_`, ep.Secret)
	require.Equal(t, "enabled", ep.Status)

	got, err := f.sc.V1WebhookEndpoints.Retrieve(ctx, ep.ID, nil)
	require.NoError(t, err)
	require.Empty(t, got.Secret, "the secret is answered on create only")
	require.Equal(t, "2024-06-20", got.APIVersion)
	require.Equal(t, []string{"customer.subscription.created"}, got.EnabledEvents)

	upd, err := f.sc.V1WebhookEndpoints.Update(ctx, ep.ID, &stripe.WebhookEndpointUpdateParams{
		EnabledEvents: []*string{stripe.String("invoice.paid"), stripe.String("customer.subscription.*")}, Disabled: stripe.Bool(true)})
	require.NoError(t, err)
	require.Equal(t, "disabled", upd.Status)
	require.Equal(t, []string{"invoice.paid", "customer.subscription.*"}, upd.EnabledEvents)
	require.Equal(t, "2024-06-20", upd.APIVersion, "fixed at creation")

	rc.mu.Lock()
	rc.secret = ep.Secret
	rc.mu.Unlock()
	f.subscribe(t, f.customer(t).ID, "price_pro")
	f.waitIdle(t)
	got2, rejected := rc.received()
	require.Empty(t, got2, "a disabled endpoint is sent nothing")
	require.Zero(t, rejected)

	_, err = f.sc.V1WebhookEndpoints.Update(ctx, ep.ID, &stripe.WebhookEndpointUpdateParams{Disabled: stripe.Bool(false)})
	require.NoError(t, err)
	require.True(t, f.DisableWebhookEndpoint(ep.ID))
	var statuses []string
	for e, err := range f.sc.V1WebhookEndpoints.List(ctx, &stripe.WebhookEndpointListParams{}) {
		require.NoError(t, err)
		statuses = append(statuses, e.ID+" "+e.Status)
	}
	require.Equal(t, []string{ep.ID + " disabled"}, statuses)

	_, err = f.sc.V1WebhookEndpoints.Retrieve(ctx, "we_nope", nil)
	var se *stripe.Error
	require.ErrorAs(t, err, &se)
	require.Equal(t, http.StatusNotFound, se.HTTPStatusCode)
	resp, _ := f.do(t, http.MethodPost, "/v1/webhook_endpoints/"+ep.ID, url.Values{"api_version": {"2025-01-27.acacia"}}, driverKey)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, "api_version cannot change")
}

// TestEventsListLagAndRetention: with a list lag an event is listed only
// that long after its creation (by the fake's clock), though retrieved at
// once; events older than 30 days are not listed; types[] takes at most 20.
func TestEventsListLagAndRetention(t *testing.T) {
	t.Parallel()
	f := stoppedFake(t, stripemock.Options{EventsKept: stripemock.EventsKept})
	old := f.customer(t) // customer.created at t0
	f.Clock().Advance(31 * 24 * time.Hour)
	f.SetEventListLag(10 * time.Second)
	fresh := f.customer(t)
	types := func() []string {
		_, list := f.do(t, http.MethodGet, "/v1/events", url.Values{"types[0]": {"customer.created"}}, nil)
		var out []string
		for _, e := range list["data"].([]any) {
			out = append(out, path(e, "data", "object", "id").(string))
		}
		return out
	}
	require.Empty(t, types(), "the new event is not listed yet; the old one is past 30 days")
	f.Clock().Advance(9 * time.Second)
	require.Empty(t, types())
	f.Clock().Advance(time.Second)
	require.Equal(t, []string{fresh.ID}, types())
	_ = old

	q := url.Values{}
	for i := range 21 {
		q.Set("types["+strconv.Itoa(i)+"]", "customer.created")
	}
	resp, _ := f.do(t, http.MethodGet, "/v1/events", q, nil)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
}

// TestFeedControlEndpoints: the list lag and a Stripe-side disable are
// knobs of the control API too (billsync mock).
func TestFeedControlEndpoints(t *testing.T) {
	t.Parallel()
	f := newFake(t, stripemock.Options{})
	post := func(path, body string) int {
		resp, err := http.Post(f.URL+path, "application/json", strings.NewReader(body))
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusOK, post("/_mock/events/list_lag", `{"seconds": 3600}`))
	require.Equal(t, http.StatusBadRequest, post("/_mock/events/list_lag", `{"seconds": -1}`))
	f.customer(t)
	_, list := f.do(t, http.MethodGet, "/v1/events", nil, nil)
	require.Empty(t, list["data"], "listed an hour after creation")
	f.Clock().Advance(time.Hour)
	_, list = f.do(t, http.MethodGet, "/v1/events", nil, nil)
	require.Len(t, list["data"], 1)

	f.AddWebhookEndpoint("http://127.0.0.1:9/hook")
	id := f.WebhookEndpointIDs()[0]
	require.Equal(t, http.StatusNotFound, post("/_mock/webhook_endpoints/we_nope/disable", ``))
	require.Equal(t, http.StatusOK, post("/_mock/webhook_endpoints/"+id+"/disable", ``))
	ep, err := f.sc.V1WebhookEndpoints.Retrieve(context.Background(), id, nil)
	require.NoError(t, err)
	require.Equal(t, "disabled", ep.Status)
}
