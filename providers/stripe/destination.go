package stripe

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// ThinTypes are the thin event types billsync's event destination
// subscribes to: only HealthEventResolved, which reaches no webhook
// endpoint and no events list, only an event destination with thin
// payloads. The thin events of v1 resources (v1.customer.subscription.…)
// are left out on purpose: every such change also creates its snapshot
// event, which the webhook endpoint (FeedTypes) and the events feed bring
// already, and a thin one would cost one more read to find its customer.
var ThinTypes = []string{HealthEventResolved}

// DestinationInfo is what billsync reads of a Stripe event destination
// (API v2, /v2/core/event_destinations).
type DestinationInfo struct {
	ID            string   `json:"id"`
	Name          string   `json:"name"`
	Type          string   `json:"type"`          // webhook_endpoint or amazon_eventbridge
	EventPayload  string   `json:"event_payload"` // thin or snapshot
	Status        string   `json:"status"`        // enabled or disabled
	EnabledEvents []string `json:"enabled_events"`
	// WebhookEndpoint's URL is answered when the request includes it
	// (billsync's always do); its SigningSecret on creation only.
	WebhookEndpoint struct {
		URL           string `json:"url"`
		SigningSecret string `json:"signing_secret"`
	} `json:"webhook_endpoint"`
}

// Thin reports whether the destination sends thin events to a webhook
// endpoint: the kind billsync's intake receives HealthEventResolved by.
func (d DestinationInfo) Thin() bool {
	return d.Type == "webhook_endpoint" && d.EventPayload == "thin"
}

// MissingTypes returns the ThinTypes the destination's enabled_events do
// not cover ("*" and prefix wildcards cover their types).
func (d DestinationInfo) MissingTypes() []string { return uncovered(d.EnabledEvents, ThinTypes) }

// maxDestinationPages bounds a listing: an account has a handful of
// destinations (Stripe allows 16 webhook endpoints).
const maxDestinationPages = 20

// EventDestinations lists the account's event destinations (snapshot
// webhook endpoints among them), each with its webhook endpoint's URL.
func (c *Client) EventDestinations(ctx context.Context) ([]DestinationInfo, error) {
	const path = "/v2/core/event_destinations"
	q := url.Values{"limit": {"20"}, "include[0]": {"webhook_endpoint.url"}}
	var all []DestinationInfo
	for range maxDestinationPages {
		body, err := c.get(ctx, path, q)
		var ae *apiError
		switch {
		case errors.As(err, &ae) && (ae.Status == http.StatusForbidden || ae.Type == "permission_error"):
			return nil, fmt.Errorf("%w to list event destinations: %s", ErrPermission, ae)
		case err != nil:
			return nil, fail("list event destinations", err)
		}
		var page struct {
			Data        []DestinationInfo `json:"data"`
			NextPageURL *string           `json:"next_page_url"`
		}
		if err := json.Unmarshal(body, &page); err != nil {
			return nil, fmt.Errorf("stripe list event destinations: unreadable page: %w", err)
		}
		all = append(all, page.Data...)
		if page.NextPageURL == nil || *page.NextPageURL == "" {
			return all, nil
		}
		// Follow the next page on Stripe's own host and path only.
		next, err := url.Parse(*page.NextPageURL)
		if err != nil || next.IsAbs() || next.Path != path {
			return nil, fmt.Errorf("stripe list event destinations: unexpected next_page_url %q", *page.NextPageURL)
		}
		q = next.Query()
	}
	return nil, fmt.Errorf("stripe list event destinations: more than %d pages", maxDestinationPages)
}

// SetupDestination makes a thin event destination at endpointURL
// subscribe to every ThinType, enabled. It reuses the first thin webhook
// destination already at that URL, adding the types it misses to those it
// has (and enabling it); else it creates one, whose signing secret Stripe
// answers this once (in WebhookEndpoint.SigningSecret).
func (c *Client) SetupDestination(ctx context.Context, endpointURL string) (d DestinationInfo, created bool, err error) {
	if err := checkEndpointURL(endpointURL); err != nil {
		return DestinationInfo{}, false, err
	}
	all, err := c.EventDestinations(ctx)
	if err != nil {
		return DestinationInfo{}, false, err
	}
	i := slices.IndexFunc(all, func(d DestinationInfo) bool { return d.Thin() && d.WebhookEndpoint.URL == endpointURL })
	if i < 0 {
		d, err = c.postDestination(ctx, "/v2/core/event_destinations", "create event destination", map[string]any{
			"name":           "billsync",
			"description":    "billsync: events Stripe failed to create (" + HealthEventResolved + ")",
			"type":           "webhook_endpoint",
			"event_payload":  "thin",
			"enabled_events": ThinTypes,
			"webhook_endpoint": map[string]string{
				"url": endpointURL,
			},
			"include": []string{"webhook_endpoint.url", "webhook_endpoint.signing_secret"},
		})
		return d, err == nil, err
	}
	d = all[i]
	path := "/v2/core/event_destinations/" + url.PathEscape(d.ID)
	if missing := d.MissingTypes(); len(missing) > 0 {
		// An update replaces the whole list: keep what the owner added.
		events := append(slices.Clone(d.EnabledEvents), missing...)
		if d, err = c.postDestination(ctx, path, "update event destination "+d.ID, map[string]any{
			"enabled_events": events, "include": []string{"webhook_endpoint.url"},
		}); err != nil {
			return DestinationInfo{}, false, err
		}
	}
	if d.Status == "disabled" {
		at := d.WebhookEndpoint.URL
		if d, err = c.postDestination(ctx, path+"/enable", "enable event destination "+d.ID, nil); err != nil {
			return DestinationInfo{}, false, err
		}
		d.WebhookEndpoint.URL = at // the enable answer includes no URL
	}
	return d, false, nil
}

// postDestination sends an API v2 POST (a JSON body, not a form) with an
// Idempotency-Key and reads the destination it answers.
func (c *Client) postDestination(ctx context.Context, path, op string, body map[string]any) (DestinationInfo, error) {
	if body == nil {
		body = map[string]any{} // "{}", not "null": a request with no parameters
	}
	raw, err := json.Marshal(body)
	if err != nil {
		return DestinationInfo{}, fmt.Errorf("stripe %s: %w", op, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.baseURL+path, bytes.NewReader(raw))
	if err != nil {
		return DestinationInfo{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", idempotencyKey())
	answer, err := c.do(req)
	if err != nil {
		return DestinationInfo{}, fail(op, err)
	}
	var d DestinationInfo
	if err := json.Unmarshal(answer, &d); err != nil {
		return DestinationInfo{}, fmt.Errorf("stripe %s: unreadable answer: %w", op, err)
	}
	return d, nil
}

// uncovered returns the wanted types that no pattern of enabled covers:
// "*", the type itself, or a prefix wildcard like "invoice.*".
func uncovered(enabled, wanted []string) []string {
	var missing []string
	for _, typ := range wanted {
		if !slices.ContainsFunc(enabled, func(pattern string) bool {
			prefix, wild := strings.CutSuffix(pattern, "*")
			return pattern == typ || (wild && strings.HasPrefix(typ, prefix))
		}) {
			missing = append(missing, typ)
		}
	}
	return missing
}

func checkEndpointURL(endpointURL string) error {
	if u, err := url.Parse(endpointURL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return fmt.Errorf("endpoint URL %q: want an absolute http(s) URL like https://billing.example.com/webhooks/stripe", endpointURL)
	}
	return nil
}
