package kinde

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/billsync/billsync/mocks/fault"
)

// kindeRetries is Kinde's documented webhook retry schedule.
var kindeRetries = []time.Duration{5 * time.Second, 30 * time.Second, 2 * time.Minute, 10 * time.Minute,
	time.Hour, 4 * time.Hour, 12 * time.Hour, 12 * time.Hour, 12 * time.Hour}

// Delivery is one webhook attempt the fake made, or one dropped delivery.
type Delivery struct {
	WebhookID string `json:"webhook_id"`
	EventID   string `json:"event_id"`
	Type      string `json:"type"`
	URL       string `json:"url"`
	Copy      int    `json:"copy"`              // 0 = the original, 1..N = duplicate copies
	Status    int    `json:"status"`            // 0 when no answer came, or dropped
	Attempt   int    `json:"attempt"`           // 1-based; 0 when dropped
	Error     string `json:"error,omitempty"`   // network error
	Dropped   bool   `json:"dropped,omitempty"` // never sent (Faults.DropRate)
	GaveUp    bool   `json:"gave_up,omitempty"` // the last attempt of the schedule failed
}

// AddWebhookEndpoint registers url for every webhook the fake sends.
func (s *Server) AddWebhookEndpoint(url string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.endpoints = append(s.endpoints, url)
}

// Event is a webhook the fake sends: its type, the customer it is about,
// extra data fields, and when the change happened (default now).
type Event struct {
	Type       string         `json:"type"`
	CustomerID string         `json:"customer_id"`
	Data       map[string]any `json:"data,omitempty"`
	At         time.Time      `json:"event_timestamp,omitzero"`
	// Format writes the timestamp and event_timestamp claims (default
	// time.RFC3339Nano in UTC), for the other forms RFC 3339 allows:
	// "z", a space for "T", an offset of hours only.
	Format func(time.Time) string `json:"-"`
}

// Sent is what SendEvent sent: the ids a receiver deduplicates on.
type Sent struct {
	WebhookID string `json:"webhook_id"`
	EventID   string `json:"event_id"`
}

// SendEvent signs ev as Kinde signs a webhook and delivers it to every
// registered endpoint, in the background, with the fault knobs applied
// (fault.Deliverer: drops, copies, reordering, as the fake Stripe's) and
// retries on Kinde's schedule until answered 2xx. WaitIdle waits for it.
func (s *Server) SendEvent(ev Event) (Sent, error) {
	now := s.opts.Now().UTC()
	at := ev.At
	if at.IsZero() {
		at = now
	}
	data := map[string]any{"customer_id": ev.CustomerID}
	for k, v := range ev.Data {
		data[k] = v
	}
	format := ev.Format
	if format == nil {
		format = func(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }
	}
	sent := Sent{WebhookID: "msg_" + randomHex(12), EventID: "event_" + randomHex(12)}
	token, err := s.keys.Sign(map[string]any{
		"type": ev.Type, "event_id": sent.EventID, "source": "admin", "data": data,
		"timestamp": format(now), "event_timestamp": format(at),
	})
	if err != nil {
		return Sent{}, err
	}
	// s.mu is held while the dice are thrown, so the choices follow the
	// order events are sent.
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, url := range s.endpoints {
		d := Delivery{WebhookID: sent.WebhookID, EventID: sent.EventID, Type: ev.Type, URL: url}
		dropped := s.deliverer.Send(&s.faults, fault.Webhook{
			Request: func(ctx context.Context) (*http.Request, error) {
				return webhookRequest(ctx, url, token, sent.WebhookID)
			},
			Record: func(a fault.Attempt) { s.recordAttempt(d, a) },
		})
		if dropped {
			d.Dropped = true
			s.deliveries = append(s.deliveries, d)
			s.log.Info("kinde fake: webhook dropped", "webhook_id", sent.WebhookID, "url", url)
		}
	}
	return sent, nil
}

// webhookRequest is a POST of the signed token, as Kinde sends a webhook.
func webhookRequest(ctx context.Context, url string, token []byte, webhookID string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(token))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/jwt")
	req.Header.Set("webhook-id", webhookID)
	return req, nil
}

// recordAttempt records one attempt to send a copy of the webhook d is.
func (s *Server) recordAttempt(d Delivery, a fault.Attempt) {
	d.Copy, d.Status, d.Attempt, d.GaveUp = a.Copy, a.Status, a.Attempt, a.GaveUp
	if a.Err != nil {
		d.Error = a.Err.Error()
	}
	s.mu.Lock()
	s.deliveries = append(s.deliveries, d)
	s.mu.Unlock()
	if a.GaveUp {
		s.log.Warn("kinde fake: webhook given up", "webhook_id", d.WebhookID, "url", d.URL)
	}
}

// Deliveries returns every webhook attempt so far, and every dropped
// delivery.
func (s *Server) Deliveries() []Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.deliveries)
}

// WaitIdle waits until every webhook sent so far is delivered or given up.
func (s *Server) WaitIdle(ctx context.Context) error {
	if err := s.deliverer.WaitIdle(ctx); err != nil {
		return fmt.Errorf("kinde fake: webhooks still being delivered: %w", err)
	}
	return nil
}
