package stripe

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/stripe/stripe-go/v82/webhook"
)

// renderThin is the thin event Stripe sends an event destination: no
// snapshot and no API version, only the related object to fetch.
func renderThin(e *event) obj {
	o := obj{
		"id": e.ID, "object": "v2.core.event", "type": "v1." + e.Type, "livemode": false, "context": nil,
		"created": time.Unix(e.Created, 0).UTC().Format("2006-01-02T15:04:05.000Z"),
	}
	var id, typ, path string
	switch v := e.Object.(type) {
	case *subscription:
		id, typ, path = v.ID, "subscription", "/v1/subscriptions/"
	case *invoice:
		id, typ, path = v.ID, "invoice", "/v1/invoices/"
	case *customer:
		id, typ, path = v.ID, "customer", "/v1/customers/"
	}
	if id != "" {
		o["related_object"] = obj{"id": id, "type": typ, "url": path + id}
	}
	return o
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

type delivery struct {
	event   *event
	ep      *endpoint
	payload []byte
	copy    int
	delay   time.Duration
}

// scheduleDelivery starts the goroutines that send one event to one endpoint,
// applying the fault knobs: maybe drop it, else send 1+DuplicateCopies
// copies, each after its own random delay. Called with s.mu held, so the
// random choices follow the order events are made.
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
	f := s.faults.Get()
	if s.faults.Chance(f.DropRate) {
		s.deliveries = append(s.deliveries, DeliveryRecord{EventID: e.ID, EventType: e.Type, EndpointID: ep.ID,
			URL: ep.URL, Dropped: true, Thin: ep.Thin, At: time.Now()})
		s.outcomes[deliveryKey{e.ID, ep.ID, 0}] = "dropped"
		s.log.Info("webhook delivery dropped", "event_id", e.ID, "endpoint", ep.URL)
		return
	}
	copies := 1 + max(f.DuplicateCopies, 0) + s.faults.Upto(f.RandomCopies)
	for i := range copies {
		delay := s.faults.Delay(f.ReorderDelay)
		if s.inflight == 0 {
			s.idle = make(chan struct{})
		}
		s.inflight++
		s.wg.Add(1)
		go s.deliver(delivery{event: e, ep: ep, payload: payload, copy: i, delay: delay})
	}
}

// deliver sends one copy. A failed attempt (network error or non-2xx) is
// retried after each wait of the schedule (Options.RetrySchedule over
// TimeFactor, else DeliveryAttempts with RetryBackoff doubling); after the
// last it gives up.
func (s *Server) deliver(d delivery) {
	defer s.finishDelivery()
	if !sleep(s.ctx, d.delay) {
		return
	}
	key := deliveryKey{d.event.ID, d.ep.ID, d.copy}
	for attempt := 1; ; attempt++ {
		status, err := s.send(d)
		ok := err == nil && status >= 200 && status < 300
		rec := DeliveryRecord{EventID: d.event.ID, EventType: d.event.Type, EndpointID: d.ep.ID, URL: d.ep.URL,
			Copy: d.copy, Attempt: attempt, StatusCode: status, Thin: d.ep.Thin, At: time.Now(),
			GaveUp: !ok && attempt > len(s.schedule)}
		if err != nil {
			if s.ctx.Err() != nil {
				return // closing: not a failure of the receiver
			}
			rec.Error = err.Error()
		}
		s.mu.Lock()
		s.deliveries = append(s.deliveries, rec)
		switch {
		case ok:
			s.outcomes[key] = "delivered"
			if !d.event.delivered[d.ep.ID] {
				d.event.delivered[d.ep.ID] = true
				d.event.PendingWebhooks--
			}
		case rec.GaveUp:
			s.outcomes[key] = "gave_up"
		}
		s.mu.Unlock()
		s.log.Info("webhook delivery", "event_id", d.event.ID, "type", d.event.Type, "endpoint", d.ep.URL,
			"copy", d.copy, "attempt", attempt, "status", status, "error", rec.Error)
		if ok || rec.GaveUp || !sleep(s.ctx, s.schedule[attempt-1]) {
			return
		}
	}
}

// send POSTs the payload signed like Stripe: Stripe-Signature
// t=<unix>,v1=<hex HMAC-SHA256 of "<t>.<payload>">. The timestamp is the real
// wall time, not the fake clock, so a receiver's 300 s tolerance holds.
func (s *Server) send(d delivery) (int, error) {
	now := time.Now()
	sig := webhook.ComputeSignature(now, d.payload, d.ep.Secret)
	req, err := http.NewRequestWithContext(s.ctx, http.MethodPost, d.ep.URL, bytes.NewReader(d.payload))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	req.Header.Set("User-Agent", "Stripe/1.0 (+https://stripe.com/docs/webhooks)")
	req.Header.Set("Stripe-Signature", fmt.Sprintf("t=%d,v1=%x", now.Unix(), sig))
	resp, err := s.httpClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	return resp.StatusCode, nil
}

func (s *Server) finishDelivery() {
	s.mu.Lock()
	s.inflight--
	if s.inflight == 0 {
		close(s.idle)
	}
	s.mu.Unlock()
	s.wg.Done()
}

// WaitIdle waits until no webhook delivery is waiting, in flight or between
// retries.
func (s *Server) WaitIdle(ctx context.Context) error {
	s.mu.Lock()
	if s.inflight == 0 {
		s.mu.Unlock()
		return nil
	}
	idle := s.idle
	s.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// sleep waits d or until ctx ends; it reports whether the wait completed.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
