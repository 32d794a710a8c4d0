package stripe

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
)

// EndpointInfo is what billsync reads of a Stripe webhook endpoint.
type EndpointInfo struct {
	ID            string   `json:"id"`
	URL           string   `json:"url"`
	Status        string   `json:"status"` // enabled or disabled
	APIVersion    string   `json:"api_version"`
	EnabledEvents []string `json:"enabled_events"`
	// Secret is answered on creation only.
	Secret string `json:"secret"`
}

// MissingTypes returns the FeedTypes the endpoint's enabled_events do not
// cover ("*" and prefix wildcards like "invoice.*" cover their types).
func (e EndpointInfo) MissingTypes() []string { return uncovered(e.EnabledEvents, FeedTypes) }

// WebhookEndpoints lists the account's webhook endpoints (one page of
// 100, Stripe's most; an account has a handful).
func (c *Client) WebhookEndpoints(ctx context.Context) ([]EndpointInfo, error) {
	body, err := c.get(ctx, "/v1/webhook_endpoints", url.Values{"limit": {strconv.Itoa(listPageSize)}})
	if err != nil {
		return nil, fail("list webhook endpoints", err)
	}
	var page struct {
		Data []EndpointInfo `json:"data"`
	}
	if err := json.Unmarshal(body, &page); err != nil {
		return nil, fmt.Errorf("stripe list webhook endpoints: unreadable page: %w", err)
	}
	return page.Data, nil
}

// SetupEndpoint makes the webhook endpoint at endpointURL subscribe to
// exactly FeedTypes, enabled: it updates the endpoint already at that URL
// (its api_version cannot change after creation; the caller reports a
// mismatch), else creates one pinned to APIVersion, whose Secret Stripe
// answers this once.
func (c *Client) SetupEndpoint(ctx context.Context, endpointURL string) (ep EndpointInfo, created bool, err error) {
	return c.setupEndpoint(ctx, endpointURL, FeedTypes, false)
}

// ConnectTypes are the event types a Connect endpoint adds to FeedTypes:
// a connected account authorising the platform, or withdrawing.
var ConnectTypes = []string{eventAuthorized, eventDeauthorized}

// SetupConnectEndpoint is SetupEndpoint for the Connect endpoint
// (connect=true: sent every connected account's events, with their own
// signing secret) at endpointURL, subscribed to FeedTypes and
// ConnectTypes (docs/connect.md).
func (c *Client) SetupConnectEndpoint(ctx context.Context, endpointURL string) (ep EndpointInfo, created bool, err error) {
	return c.setupEndpoint(ctx, endpointURL, append(slices.Clone(FeedTypes), ConnectTypes...), true)
}

func (c *Client) setupEndpoint(ctx context.Context, endpointURL string, types []string, connect bool) (ep EndpointInfo, created bool, err error) {
	if err := checkEndpointURL(endpointURL); err != nil {
		return EndpointInfo{}, false, err
	}
	eps, err := c.WebhookEndpoints(ctx)
	if err != nil {
		return EndpointInfo{}, false, err
	}
	form := url.Values{}
	for i, t := range types {
		form.Set("enabled_events["+strconv.Itoa(i)+"]", t)
	}
	path, op := "/v1/webhook_endpoints", "create webhook endpoint"
	if i := slices.IndexFunc(eps, func(e EndpointInfo) bool { return e.URL == endpointURL }); i >= 0 {
		path, op = "/v1/webhook_endpoints/"+url.PathEscape(eps[i].ID), "update webhook endpoint "+eps[i].ID
		form.Set("disabled", "false")
	} else {
		form.Set("url", endpointURL)
		form.Set("api_version", APIVersion)
		form.Set("description", "billsync")
		if connect {
			form.Set("connect", "true")
			form.Set("description", "billsync (Stripe Connect)")
		}
		created = true
	}
	body, err := c.post(ctx, path, form, idempotencyKey())
	if err != nil {
		return EndpointInfo{}, false, fail(op, err)
	}
	if err := json.Unmarshal(body, &ep); err != nil {
		return EndpointInfo{}, false, fmt.Errorf("stripe %s: unreadable answer: %w", op, err)
	}
	return ep, created, nil
}

func idempotencyKey() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return "billsync-" + hex.EncodeToString(b)
}

// ErrPermission: the key may not read that resource (a restricted key
// without the permission; Stripe answers 403).
var ErrPermission = errors.New("the API key lacks the permission")

// CheckAccess reads one of each resource billsync reads (customers,
// subscriptions, events, webhook endpoints) and returns each one's
// problem: ErrPermission for a key that may not read it, another error
// when Stripe could not be asked. An empty map: every read works.
func (c *Client) CheckAccess(ctx context.Context) map[string]error {
	problems := map[string]error{}
	for _, r := range []string{"customers", "subscriptions", "events", "webhook_endpoints"} {
		_, err := c.get(ctx, "/v1/"+r, url.Values{"limit": {"1"}})
		var ae *apiError
		switch {
		case err == nil:
		case errors.As(err, &ae) && (ae.Status == http.StatusForbidden || ae.Type == "permission_error"):
			problems[r] = fmt.Errorf("%w to read %s: %s", ErrPermission, r, ae)
		default:
			problems[r] = fail("read "+r, err)
		}
	}
	return problems
}
