package stripe_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v82"
	"github.com/stripe/stripe-go/v82/webhook"

	stripemock "github.com/billsync/billsync/mocks/stripe"
)

// TestEventDestinationsAPI: POST /v2/core/event_destinations takes JSON
// (a form is refused, so is an unknown field) and answers the signing
// secret only when included, on creation; the v2 list shows the v1
// endpoints too, as snapshot destinations, with URLs only when included;
// the v1 list does not show thin destinations; an update replaces
// enabled_events; and a thin destination made so receives thin events
// signed with its secret.
func TestEventDestinationsAPI(t *testing.T) {
	t.Parallel()
	f := newFake(t, stripemock.Options{})
	ctx := context.Background()

	var mu sync.Mutex
	var secret string
	var got []map[string]any
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		if err := webhook.ValidatePayload(body, r.Header.Get("Stripe-Signature"), secret); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		var m map[string]any
		_ = json.Unmarshal(body, &m)
		got = append(got, m)
	}))
	t.Cleanup(rc.Close)
	f.AddWebhookEndpoint("https://snapshot.example.com/hook")

	resp, _ := f.do(t, http.MethodPost, "/v2/core/event_destinations", url.Values{"name": {"x"}}, nil)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, "API v2 takes JSON, not a form")

	d, err := f.sc.V2CoreEventDestinations.Create(ctx, &stripe.V2CoreEventDestinationCreateParams{
		Name: stripe.String("billsync"), Type: stripe.String("webhook_endpoint"), EventPayload: stripe.String("thin"),
		EnabledEvents:   []*string{stripe.String("v1.customer.subscription.updated")},
		WebhookEndpoint: &stripe.V2CoreEventDestinationCreateWebhookEndpointParams{URL: stripe.String(rc.URL)},
		Include:         []*string{stripe.String("webhook_endpoint.signing_secret")},
	})
	require.NoError(t, err)
	require.Regexp(t, `^ed_`, d.ID)
	require.Regexp(t, `^whsec_`, d.WebhookEndpoint.SigningSecret)
	require.Empty(t, d.WebhookEndpoint.URL, "not included")
	mu.Lock()
	secret = d.WebhookEndpoint.SigningSecret
	mu.Unlock()

	var payloads []string
	var urls []string
	for ed, err := range f.sc.V2CoreEventDestinations.List(ctx, &stripe.V2CoreEventDestinationListParams{
		Include: []*string{stripe.String("webhook_endpoint.url")}}) {
		require.NoError(t, err)
		require.Empty(t, ed.WebhookEndpoint.SigningSecret, "answered on creation only")
		payloads, urls = append(payloads, string(ed.EventPayload)), append(urls, ed.WebhookEndpoint.URL)
	}
	require.Equal(t, []string{"thin", "snapshot"}, payloads, "newest first, the v1 endpoint among them")
	require.Equal(t, []string{rc.URL, "https://snapshot.example.com/hook"}, urls)
	require.Len(t, f.WebhookEndpointIDs(), 1)
	resp, list := f.do(t, http.MethodGet, "/v1/webhook_endpoints", nil, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Len(t, list["data"], 1, "the v1 list shows no thin destination")

	d, err = f.sc.V2CoreEventDestinations.Update(ctx, d.ID, &stripe.V2CoreEventDestinationUpdateParams{
		EnabledEvents: []*string{stripe.String("v1.customer.subscription.created"), stripe.String(stripemock.HealthEventResolved)}})
	require.NoError(t, err)
	require.Equal(t, []string{"v1.customer.subscription.created", stripemock.HealthEventResolved}, d.EnabledEvents)
	_, err = f.sc.V2CoreEventDestinations.Update(ctx, d.ID, &stripe.V2CoreEventDestinationUpdateParams{
		EnabledEvents: []*string{stripe.String("customer.subscription.created")}})
	require.Error(t, err, "a snapshot type on a thin destination")

	sub := f.subscribe(t, f.customer(t).ID, "price_pro")
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) > 0
	}, 10*time.Second, 10*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, "v2.core.event", got[0]["object"])
	require.Equal(t, "v1.customer.subscription.created", got[0]["type"])
	require.Equal(t, sub.ID, path(got[0], "related_object", "id"))
}
