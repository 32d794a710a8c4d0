package stripe

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/billsync/billsync/reconcile"
)

// FeedTypes are the event types the events feed lists (types[], at most 20
// by Stripe's rule): the ones among those relevant() accepts that tell of
// a change to a customer's plan, status, period or allowance. A test holds
// each to relevant(), so the intake and the feed cannot disagree; they are
// also the types `billsync stripe setup` subscribes an endpoint to.
var FeedTypes = []string{
	"checkout.session.completed",
	"customer.deleted",
	"customer.subscription.created",
	"customer.subscription.deleted",
	"customer.subscription.paused",
	"customer.subscription.pending_update_applied",
	"customer.subscription.pending_update_expired",
	"customer.subscription.resumed",
	"customer.subscription.trial_will_end",
	"customer.subscription.updated",
	"entitlements.active_entitlement_summary.updated",
	"invoice.paid",
	"invoice.payment_action_required",
	"invoice.payment_failed",
	"invoice.payment_succeeded",
}

var _ reconcile.EventSource = (*Client)(nil)

// ListEvents reads a page of GET /v1/events (100 a page, newest first) of
// the FeedTypes created at or after since, from page cursor after (an
// event id; "" the newest page). Each event is read by the webhook
// intake's own reader (parseEvent), so a listed event is stored exactly as
// its webhook would be. Only snapshot events are listed here: Stripe lists
// thin (v2) events at /v2/core/events, not on this list.
//
// Its requests take the client's shared rate limit only (not the sweep's
// listing share): one poll is a request or a few.
func (c *Client) ListEvents(ctx context.Context, since time.Time, after string) (reconcile.EventsFeedPage, error) {
	return c.listEvents(ctx, since, after, "")
}

// listEvents is ListEvents in ctx's account; account, when set, is the
// connected account ctx reads on behalf of (see ListConnectedEvents).
func (c *Client) listEvents(ctx context.Context, since time.Time, after, account string) (reconcile.EventsFeedPage, error) {
	q := url.Values{}
	q.Set("limit", strconv.Itoa(listPageSize))
	q.Set("created[gte]", strconv.FormatInt(since.Unix(), 10))
	for i, t := range FeedTypes {
		q.Set("types["+strconv.Itoa(i)+"]", t)
	}
	if after != "" {
		q.Set("starting_after", after)
	}
	op := "list events"
	body, err := c.get(ctx, "/v1/events", q)
	if err != nil {
		return reconcile.EventsFeedPage{}, fail(op, err)
	}
	page, err := readEventsPage(body, account)
	if err != nil {
		return reconcile.EventsFeedPage{}, fmt.Errorf("stripe %s: unreadable page: %w", op, err)
	}
	return page, nil
}

// ReadEventsPage reads a page of Stripe's events list: each entry through
// the intake's reader (an entry billsync cannot use comes back as an event
// to ignore, with the reason, as a webhook would), its pending_webhooks
// (Undelivered), and the next page's cursor (the last entry's id while
// has_more). An answer that is not a list page is an error.
func ReadEventsPage(body []byte) (reconcile.EventsFeedPage, error) {
	return readEventsPage(body, "")
}

// readEventsPage is ReadEventsPage of a listing on behalf of account ("":
// the platform's own): an entry that names no account is read as its.
func readEventsPage(body []byte, account string) (reconcile.EventsFeedPage, error) {
	entries, more, err := listPageOf[jsontext.Value](body)
	if err != nil {
		return reconcile.EventsFeedPage{}, err
	}
	page := reconcile.EventsFeedPage{Events: make([]reconcile.EventsFeedEvent, 0, len(entries))}
	lastID := ""
	for _, raw := range entries {
		// The event keeps its own bytes: the page's buffer is not reused,
		// but a stored payload must not hold the whole page alive.
		own := inAccount(bytes.Clone(raw), account)
		ev, _ := parseEvent(own)
		// Each field on its own: a mistyped one reads as absent (a count
		// as delivered, an id as none).
		var entry struct {
			ID              json.RawMessage `json:"id"`
			PendingWebhooks json.RawMessage `json:"pending_webhooks"`
		}
		_ = json.Unmarshal(own, &entry)
		var id string
		var pending int
		_ = json.Unmarshal(entry.ID, &id)
		_ = json.Unmarshal(entry.PendingWebhooks, &pending)
		lastID = id
		page.Events = append(page.Events, reconcile.EventsFeedEvent{Event: ev, Undelivered: pending > 0})
	}
	if more && len(entries) > 0 {
		if clean, problem := reconcile.Storable(lastID); clean == "" || problem != "" || clean != page.Events[len(page.Events)-1].Event.EventID {
			return reconcile.EventsFeedPage{}, errors.New("the last entry has no usable id to page after")
		}
		page.Next = lastID
	}
	return page, nil
}

// Endpoint reads the status of Stripe's webhook endpoint for billsync.
type Endpoint struct {
	Client *Client
	// ID is the endpoint's id (we_…). Empty: every endpoint whose URL ends
	// in /webhooks/stripe is read, and the first disabled one reported.
	ID string
}

var _ reconcile.EndpointChecker = Endpoint{}

// WebhookEndpoint returns the endpoint's id and whether Stripe has it
// enabled. Without an ID, the account's endpoints are listed (one page of
// 100) and those whose URL path ends in /webhooks/stripe are read: a
// disabled one is returned first; none is reconcile.ErrNotFound.
func (e Endpoint) WebhookEndpoint(ctx context.Context) (string, bool, error) {
	if e.ID != "" {
		body, err := e.Client.get(ctx, "/v1/webhook_endpoints/"+url.PathEscape(e.ID), nil)
		if err != nil {
			return "", false, failMissing("retrieve webhook endpoint "+e.ID, err, reconcile.ErrNotFound)
		}
		var ep EndpointInfo
		if err := json.Unmarshal(body, &ep); err != nil {
			return "", false, fmt.Errorf("stripe retrieve webhook endpoint %s: unreadable: %w", e.ID, err)
		}
		return e.ID, ep.Status != "disabled", nil
	}
	eps, err := e.Client.WebhookEndpoints(ctx)
	if err != nil {
		return "", false, err
	}
	found := ""
	for _, ep := range eps {
		u, err := url.Parse(ep.URL)
		if err != nil || !strings.HasSuffix(strings.TrimRight(u.Path, "/"), "/webhooks/stripe") {
			continue
		}
		if ep.Status == "disabled" {
			return ep.ID, false, nil
		}
		if found == "" {
			found = ep.ID
		}
	}
	if found == "" {
		return "", false, fmt.Errorf("stripe: no webhook endpoint whose URL ends in /webhooks/stripe: %w", reconcile.ErrNotFound)
	}
	return found, true, nil
}
