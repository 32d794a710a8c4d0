package stripe

import "time"

// HealthEventResolved is the thin event by which Stripe says that it
// failed to create an event and has since recovered: its data's impact
// names the object whose event was lost
// (docs.stripe.com/webhooks/handle-irrecoverable-events).
const HealthEventResolved = "v2.core.health.event_generation_failure.resolved"

// notGenerated is an event the fake failed to create (FailEventGeneration).
type notGenerated struct {
	typ     string
	object  any
	account string // the connected account it happened in, "" for the platform's
}

// FailEventGeneration makes the fake, while on, fail to create the events
// of the changes made meanwhile, as Stripe sometimes does: the change
// happens, but no event exists, none is listed in GET /v1/events and no
// webhook is sent. ResolveEventGenerationFailure later announces them.
func (s *Server) FailEventGeneration(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.healthFailing = on
}

// ResolveEventGenerationFailure ends FailEventGeneration and sends, for
// each event the fake failed to create, the thin event HealthEventResolved
// to the event destinations subscribed to it. Like Stripe's, the thin
// event names no object: its data (GET /v2/core/events/{id}) holds the
// impact, the lost event's type and its related object. It returns the
// health events' ids.
func (s *Server) ResolveEventGenerationFailure() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.healthFailing = false
	now := s.clock.Now()
	var ids []string
	for _, lost := range s.notGenerated {
		related := relatedObject(lost.object)
		if related == nil {
			continue
		}
		e := &event{ID: newID("evt"), Type: HealthEventResolved, Created: now.Unix(), delivered: map[string]bool{},
			Account: lost.account,
			V2Data: obj{
				"alert_id": newID("alert"), "grouping_key": "event_generation_failure",
				"summary":     "Some events were not generated",
				"resolved_at": now.UTC().Format(time.RFC3339Nano),
				"impact":      obj{"event_type": lost.typ, "related_object": related},
			}}
		if s.v2Events == nil {
			s.v2Events = map[string]*event{}
		}
		s.v2Events[e.ID] = e
		ids = append(ids, e.ID)
		for _, ep := range s.targets(e) {
			e.PendingWebhooks++
			s.scheduleDelivery(e, ep)
		}
	}
	s.notGenerated = nil
	return ids
}

// getV2Event retrieves a v2 event (GET /v2/core/events/{id}) with its
// data. Called with s.mu held, as every API handler.
func (s *Server) getV2Event(c *call) (obj, error) {
	e, ok := s.v2Events[c.r.PathValue("id")]
	if !ok || e.Account != s.accountID() {
		return nil, noSuch("event", c.r.PathValue("id"), "id")
	}
	o := renderThin(e)
	o["data"] = e.V2Data
	return o, nil
}
