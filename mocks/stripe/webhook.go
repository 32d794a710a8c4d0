package stripe

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/billsync/billsync/mocks/fault"
)

// renderThin is the thin event Stripe sends an event destination: no
// snapshot and no API version, only the related object to fetch.
func renderThin(e *event) obj {
	typ := "v1." + e.Type
	if strings.HasPrefix(e.Type, "v2.") {
		typ = e.Type
	}
	o := obj{
		"id": e.ID, "object": "v2.core.event", "type": typ, "livemode": e.Livemode, "context": nullable(e.Account),
		"created": time.Unix(e.Created, 0).UTC().Format("2006-01-02T15:04:05.000Z"),
	}
	if related := relatedObject(e.Object); related != nil {
		o["related_object"] = related
	}
	return o
}

// relatedObject is a v2 event's reference to a v1 object: id, type and
// URL; nil for an object of no such reference.
func relatedObject(v any) obj {
	var id, typ, path string
	switch v := v.(type) {
	case *subscription:
		id, typ, path = v.ID, "subscription", "/v1/subscriptions/"
	case *invoice:
		id, typ, path = v.ID, "invoice", "/v1/invoices/"
	case *customer:
		id, typ, path = v.ID, "customer", "/v1/customers/"
	}
	if id == "" {
		return nil
	}
	return obj{"id": id, "type": typ, "url": path + id}
}

// LiveRetrySchedule is shaped like Stripe's live-mode webhook retries:
// exponential backoff for up to three days (Stripe does not publish the
// exact waits). Use it as Options.RetrySchedule with a TimeFactor.
var LiveRetrySchedule = []time.Duration{
	time.Minute, 5 * time.Minute, 30 * time.Minute, time.Hour, 2 * time.Hour, 4 * time.Hour,
	8 * time.Hour, 12 * time.Hour, 20 * time.Hour, 24 * time.Hour, // 71.6 hours in all
}

// DeliveryRecord is one webhook send attempt, or one dropped delivery.
type DeliveryRecord struct {
	EventID    string    `json:"event_id"`
	EventType  string    `json:"event_type"`
	EndpointID string    `json:"endpoint_id"`
	Account    string    `json:"account,omitempty"` // the connected account whose event it is
	URL        string    `json:"url"`
	Copy       int       `json:"copy"`              // 0 = the original, 1..N = duplicate copies
	Attempt    int       `json:"attempt"`           // 1-based; 0 when dropped
	StatusCode int       `json:"status_code"`       // 0 when dropped or on a network error
	Error      string    `json:"error,omitempty"`   // network error
	Dropped    bool      `json:"dropped,omitempty"` // never sent (Faults.DropRate)
	GaveUp     bool      `json:"gave_up,omitempty"` // the last attempt of the schedule failed
	Thin       bool      `json:"thin,omitempty"`    // a thin event to an event destination
	At         time.Time `json:"at"`                // wall time
}

// deliveryKey names one copy of one event to one endpoint.
type deliveryKey struct {
	event, endpoint string
	copy            int
}

// Settlement counts the deliveries (copies) that ended: sent and accepted,
// given up after the last retry, or dropped by Faults.DropRate.
type Settlement struct {
	Delivered int `json:"delivered"`
	GaveUp    int `json:"gave_up"`
	Dropped   int `json:"dropped"`
}

// Settled counts the deliveries that ended so far.
func (s *Server) Settled() Settlement {
	s.mu.Lock()
	defer s.mu.Unlock()
	var st Settlement
	for _, o := range s.outcomes {
		switch o {
		case "delivered":
			st.Delivered++
		case "gave_up":
			st.GaveUp++
		case "dropped":
			st.Dropped++
		}
	}
	return st
}

// Deliveries returns every attempt so far, in the order they finished.
func (s *Server) Deliveries() []DeliveryRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]DeliveryRecord(nil), s.deliveries...)
}

// scheduleDelivery sends one event to one endpoint with the fault knobs
// applied (fault.Deliverer: maybe drop it, else copies, each after its
// own random delay, retried on the schedule). Called with s.mu held, so
// the random choices follow the order events are made.
func (s *Server) scheduleDelivery(e *event, ep *endpoint) {
	if s.closed {
		return
	}
	rendered := s.renderEvent(e, ep.version())
	if ep.Thin {
		rendered = renderThin(e)
	}
	payload, err := json.MarshalIndent(rendered, "", "  ")
	if err != nil {
		s.log.Error("stripemock: encode event", "event_id", e.ID, "error", err)
		return
	}
	st := &s.faults
	if af := s.faultsOf(e.Account); af != nil {
		st = af // the faults aimed at the event's account
	}
	dropped := s.deliverer.Send(st, fault.Webhook{
		Request: func(ctx context.Context) (*http.Request, error) { return signed(ctx, ep, payload) },
		Record:  func(a fault.Attempt) { s.recordAttempt(e, ep, a) },
	})
	if dropped {
		s.deliveries = append(s.deliveries, DeliveryRecord{EventID: e.ID, EventType: e.Type, EndpointID: ep.ID,
			Account: e.Account, URL: ep.URL, Dropped: true, Thin: ep.Thin, At: time.Now()})
		s.outcomes[deliveryKey{e.ID, ep.ID, 0}] = "dropped"
		s.log.Info("webhook delivery dropped", "event_id", e.ID, "endpoint", ep.URL)
	}
}

// recordAttempt records one attempt to send a copy of e to ep; the first
// copy delivered lowers the event's pending_webhooks.
func (s *Server) recordAttempt(e *event, ep *endpoint, a fault.Attempt) {
	rec := DeliveryRecord{EventID: e.ID, EventType: e.Type, EndpointID: ep.ID, Account: e.Account, URL: ep.URL,
		Copy: a.Copy, Attempt: a.Attempt, StatusCode: a.Status, Thin: ep.Thin, At: a.At, GaveUp: a.GaveUp}
	if a.Err != nil {
		rec.Error = a.Err.Error()
	}
	key := deliveryKey{e.ID, ep.ID, a.Copy}
	s.mu.Lock()
	s.deliveries = append(s.deliveries, rec)
	switch {
	case a.OK:
		s.outcomes[key] = "delivered"
		if !e.delivered[ep.ID] {
			e.delivered[ep.ID] = true
			e.PendingWebhooks--
		}
	case a.GaveUp:
		s.outcomes[key] = "gave_up"
	}
	s.mu.Unlock()
	s.log.Info("webhook delivery", "event_id", e.ID, "type", e.Type, "endpoint", ep.URL,
		"copy", a.Copy, "attempt", a.Attempt, "status", a.Status, "error", rec.Error)
}

// signed is a POST of the payload signed like Stripe: Stripe-Signature
// t=<unix>,v1=<hex HMAC-SHA256 of "<t>.<payload>">. The timestamp is the real
// wall time of the attempt, not the fake clock, so a receiver's 300 s
// tolerance holds.
func signed(ctx context.Context, ep *endpoint, payload []byte) (*http.Request, error) {
	now := time.Now()
	sig := webhook.ComputeSignature(now, payload, ep.Secret)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ep.URL, bytes.NewReader(payload))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	req.Header.Set("User-Agent", "Stripe/1.0 (+https://stripe.com/docs/webhooks)")
	req.Header.Set("Stripe-Signature", fmt.Sprintf("t=%d,v1=%x", now.Unix(), sig))
	return req, nil
}

// WaitIdle waits until no webhook delivery is waiting, in flight or between
// retries.
func (s *Server) WaitIdle(ctx context.Context) error { return s.deliverer.WaitIdle(ctx) }
