package stripe

import (
	"math"
	"strconv"
	"time"
)

// event keeps the object as it was when the event happened (and its
// previous state for *.updated) so it can be rendered in any API version:
// each webhook endpoint gets the shape of the version it was registered with.
type event struct {
	record
	ID              string
	Type            string
	Created         int64
	RequestID       string
	IdempotencyKey  string
	Object          any    // *subscription, *invoice
	Previous        any    // same type as Object, or nil
	V2Data          obj    // a v2 event's data (Type v2.*), else nil
	Account         string // the connected account it happened in; "" for the platform
	Livemode        bool   // see Account.SetLivemode
	PendingWebhooks int    // endpoints that have not accepted it yet
	delivered       map[string]bool
	listedAt        time.Time // when it appears in the events list, by the fake's clock (list lag)
}

func (e *event) id() string { return e.ID }

func (s *Server) renderObject(v any, version string) obj {
	switch v := v.(type) {
	case *subscription:
		return s.renderSubscription(v, version, nil)
	case *invoice:
		return renderInvoice(v, version)
	case *customer:
		return renderCustomer(v)
	case *entitlementSummary:
		return renderSummary(v)
	case *application:
		return renderApplication(v)
	}
	return nil
}

func (s *Server) renderEvent(e *event, version string) obj {
	current := s.renderObject(e.Object, version)
	data := obj{"object": current}
	if e.Previous != nil {
		data["previous_attributes"] = diffTop(s.renderObject(e.Previous, version), current)
	}
	o := obj{
		"id": e.ID, "object": "event", "api_version": version, "created": e.Created, "data": data,
		"livemode": e.Livemode, "pending_webhooks": e.PendingWebhooks, "type": e.Type,
		"request": obj{"id": nullable(e.RequestID), "idempotency_key": nullable(e.IdempotencyKey)},
	}
	if e.Account != "" {
		// A connected account's event names it; the platform's has no
		// "account" at all.
		o["account"] = e.Account
		if version[:10] >= contextVersion {
			o["context"] = e.Account
		}
	}
	return o
}

// contextVersion is the release from which a snapshot event carries
// context beside account.
const contextVersion = "2025-04-30"

// emit records an event in the account the code acts in and schedules
// its webhook deliveries: a connected account's go to the Connect
// endpoints (none while it does not authorise the platform), the
// platform's to the others. c is nil for events the fake makes by itself
// (renewals): their request id is null.
func (s *Server) emit(c *call, created int64, typ string, object, previous any) {
	if s.healthFailing {
		s.notGenerated = append(s.notGenerated, notGenerated{typ: typ, object: object, account: s.accountID()})
		return
	}
	e := &event{ID: newID("evt"), Type: typ, Created: created, Object: object, Previous: previous, delivered: map[string]bool{},
		listedAt: s.clock.Now().Add(s.listLag), Account: s.accountID()}
	if c != nil {
		e.RequestID, e.IdempotencyKey = c.requestID, c.idemKey
	}
	if a := s.acct; a != nil { // the connected account acted in
		e.Livemode = a.Livemode
	}
	targets := s.targets(e)
	e.PendingWebhooks = len(targets)
	s.events.put(e)
	s.log.Debug("stripemock event", "event_id", e.ID, "type", typ, "endpoints", len(targets))
	for _, ep := range targets {
		s.scheduleDelivery(e, ep)
	}
}

// targets are the endpoints an event is sent to: those that want its
// type, of its side (Connect endpoints for a connected account's event),
// none for an account that does not authorise the platform (but its
// deauthorisation itself).
func (s *Server) targets(e *event) []*endpoint {
	if a, ok := s.accounts.get(e.Account); ok && !a.Authorized {
		return nil
	}
	var targets []*endpoint
	for _, ep := range s.endpoints.rows {
		if ep.wants(e.Type) && ep.Connect == (e.Account != "") {
			targets = append(targets, ep)
		}
	}
	return targets
}

// emitIfChanged emits customer.subscription.updated when the subscription
// visibly changed, with previous_attributes.
func (s *Server) emitIfChanged(c *call, created int64, before, after *subscription) {
	prev := diffTop(s.renderSubscription(before, DefaultAPIVersion, nil), s.renderSubscription(after, DefaultAPIVersion, nil))
	if len(prev) > 0 {
		s.changed(after.ID, before)
		s.emit(c, created, "customer.subscription.updated", after.clone(), before)
	}
}

func (s *Server) getEvent(c *call) (obj, error) {
	e, ok := s.events.get(c.r.PathValue("id"))
	if !ok {
		return nil, noSuch("event", c.r.PathValue("id"), "id")
	}
	return s.renderEvent(e, DefaultAPIVersion), nil
}

// EventsKept is how far back the events list reaches by default, as at
// Stripe (Options.EventsKept).
const EventsKept = 30 * 24 * time.Hour

// SetEventListLag makes each event made from now on appear in the events
// list lag after its creation (by the fake's clock), as Stripe's list
// sometimes shows an event a little after its created second; 0 lists it
// at once. Retrieving the event by id is not delayed.
func (s *Server) SetEventListLag(lag time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.listLag = lag
}

// listEvents renders events in the account's version (DefaultAPIVersion),
// like Stripe, whatever the request's Stripe-Version. Filters: type or
// types[] (with * wildcards), created (exact or gt/gte/lt/lte), and
// delivery_success (false: some endpoint has not accepted it yet). Only
// the last Options.EventsKept are listed, and an event only once the list lag
// (SetEventListLag) has passed.
func (s *Server) listEvents(c *call) (obj, error) {
	if err := c.form.allow(append(listParams, "type", "types", "created", "delivery_success")...); err != nil {
		return nil, err
	}
	inRange, err := createdFilter(c.form)
	if err != nil {
		return nil, err
	}
	success, bySuccess, err := c.form.boolean("delivery_success")
	if err != nil {
		return nil, err
	}
	types, err := c.form.list("types")
	if err != nil {
		return nil, err
	}
	if len(types) > 20 {
		return nil, invalidParam("types", "types may hold at most 20 event types")
	}
	if t, ok := c.form.str("type"); ok {
		types = append(types, t)
	}
	oldest := int64(math.MinInt64)
	if s.eventsKept > 0 {
		oldest = c.now.Add(-s.eventsKept).Unix()
	}
	rows := s.events.newestFirst(func(e *event) bool {
		if !inRange(e.Created) || (bySuccess && (e.PendingWebhooks == 0) != success) ||
			e.Created < oldest || c.now.Before(e.listedAt) {
			return false
		}
		for _, t := range types {
			if typeMatches(t, e.Type) {
				return true
			}
		}
		return len(types) == 0
	})
	return listPage(c, rows, s.events.get, "event", func(e *event) obj { return s.renderEvent(e, DefaultAPIVersion) })
}

// createdFilter reads created=<ts> or created[gt|gte|lt|lte]=<ts>.
func createdFilter(f form) (func(int64) bool, error) {
	bounds := map[string]int64{}
	if v, ok := f.str("created"); ok {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, invalidParam("created", "Invalid integer: "+v)
		}
		bounds["eq"] = n
	}
	for op, v := range f.hash("created") {
		if op != "gt" && op != "gte" && op != "lt" && op != "lte" {
			return nil, invalidParam("created["+op+"]", "Received unknown parameter: created["+op+"]")
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, invalidParam("created["+op+"]", "Invalid integer: "+v)
		}
		bounds[op] = n
	}
	return func(t int64) bool {
		for op, b := range bounds {
			if (op == "eq" && t != b) || (op == "gt" && t <= b) || (op == "gte" && t < b) ||
				(op == "lt" && t >= b) || (op == "lte" && t > b) {
				return false
			}
		}
		return true
	}, nil
}
