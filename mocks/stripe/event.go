package stripemock

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
	Object          any // *subscription, *invoice
	Previous        any // same type as Object, or nil
	PendingWebhooks int
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
	}
	return nil
}

func (s *Server) renderEvent(e *event, version string) obj {
	current := s.renderObject(e.Object, version)
	data := obj{"object": current}
	if e.Previous != nil {
		data["previous_attributes"] = diffTop(s.renderObject(e.Previous, version), current)
	}
	return obj{
		"id": e.ID, "object": "event", "api_version": version, "created": e.Created, "data": data,
		"livemode": false, "pending_webhooks": e.PendingWebhooks, "type": e.Type,
		"request": obj{"id": nullable(e.RequestID), "idempotency_key": nullable(e.IdempotencyKey)},
	}
}

// emit records an event and schedules its webhook deliveries. c is nil for
// events the fake makes by itself (renewals): their request id is null.
func (s *Server) emit(c *call, created int64, typ string, object, previous any) {
	e := &event{ID: newID("evt"), Type: typ, Created: created, Object: object, Previous: previous}
	if c != nil {
		e.RequestID, e.IdempotencyKey = c.requestID, c.idemKey
	}
	var targets []*endpoint
	for _, ep := range s.endpoints.rows {
		if ep.wants(typ) {
			targets = append(targets, ep)
		}
	}
	e.PendingWebhooks = len(targets)
	s.events.put(e)
	s.log.Debug("stripemock event", "event_id", e.ID, "type", typ, "endpoints", len(targets))
	for _, ep := range targets {
		s.scheduleDelivery(e, ep)
	}
}

// emitIfChanged emits customer.subscription.updated when the subscription
// visibly changed, with previous_attributes.
func (s *Server) emitIfChanged(c *call, created int64, before, after *subscription) {
	prev := diffTop(s.renderSubscription(before, DefaultAPIVersion, nil), s.renderSubscription(after, DefaultAPIVersion, nil))
	if len(prev) > 0 {
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

// listEvents renders events in the account's version (DefaultAPIVersion),
// like Stripe, whatever the request's Stripe-Version.
func (s *Server) listEvents(c *call) (obj, error) {
	if err := c.form.allow(append(listParams, "type", "types")...); err != nil {
		return nil, err
	}
	types, err := c.form.list("types")
	if err != nil {
		return nil, err
	}
	if t, ok := c.form.str("type"); ok {
		types = append(types, t)
	}
	rows := s.events.newestFirst(func(e *event) bool {
		for _, t := range types {
			if typeMatches(t, e.Type) {
				return true
			}
		}
		return len(types) == 0
	})
	return listPage(c, rows, s.events.get, "event", func(e *event) obj { return s.renderEvent(e, DefaultAPIVersion) })
}
