package stripe

import (
	"net/url"
	"strings"
)

// Webhook endpoints (/v1/webhook_endpoints), with Stripe's object shape:
// id we_…, url, enabled_events, api_version (fixed when created), status
// enabled|disabled, and the signing secret answered only on creation. A
// disabled endpoint is sent nothing; Stripe disables one itself after days
// of failed deliveries (DisableWebhookEndpoint plays that part).

type endpoint struct {
	record
	ID            string
	URL           string
	Secret        string
	APIVersion    string // "" = the account's default
	EnabledEvents []string
	Description   string
	Created       int64
	Metadata      map[string]string
	// Thin marks an event destination with thin payloads (v2.core.event
	// notifications naming the related object) instead of snapshot events.
	Thin bool
	// Name and Updated are an event destination's (API v2).
	Name    string
	Updated int64
	// Disabled: status "disabled", sent nothing (by the owner's update or
	// by Stripe after failures).
	Disabled bool
	// Connect: a Connect endpoint (connect=true), sent the events of the
	// connected accounts and none of the platform's.
	Connect bool
}

func (ep *endpoint) id() string { return ep.ID }

func (ep *endpoint) version() string {
	if ep.APIVersion == "" {
		return DefaultAPIVersion
	}
	return ep.APIVersion
}

// wants matches typ, a v1 event type; a thin destination's types are
// named v1.<type>, as Stripe names thin events for v1 resources.
func (ep *endpoint) wants(typ string) bool {
	if ep.Disabled {
		return false
	}
	switch {
	case strings.HasPrefix(typ, "v2."): // a v2 event: thin payloads only
		if !ep.Thin {
			return false
		}
	case ep.Thin:
		typ = "v1." + typ
	}
	for _, pattern := range ep.EnabledEvents {
		if typeMatches(pattern, typ) {
			return true
		}
	}
	return false
}

// typeMatches accepts "*", an exact type, or a prefix wildcard such as
// "customer.subscription.*".
func typeMatches(pattern, typ string) bool {
	if prefix, ok := strings.CutSuffix(pattern, "*"); ok {
		return strings.HasPrefix(typ, prefix)
	}
	return pattern == typ
}

func renderEndpoint(ep *endpoint) obj {
	return obj{
		"id": ep.ID, "object": "webhook_endpoint", "api_version": nullable(ep.APIVersion), "application": nil,
		"created": ep.Created, "description": nullable(ep.Description), "enabled_events": ep.EnabledEvents,
		"livemode": false, "metadata": metadataOf(ep.Metadata), "status": ep.status(), "url": ep.URL,
	}
}

func (ep *endpoint) status() string {
	if ep.Disabled {
		return "disabled"
	}
	return "enabled"
}

// AddWebhookEndpoint registers url for every event type, in the default API
// version, and returns its signing secret.
func (s *Server) AddWebhookEndpoint(url string) (secret string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addEndpoint(url, "", []string{"*"}, "", nil).Secret
}

// AddConnectWebhookEndpoint registers url as a Connect endpoint for every
// event type, in the default API version: it is sent the events of every
// connected account that authorises the platform (with "account"), signed
// with its own secret, which it returns, and none of the platform's.
func (s *Server) AddConnectWebhookEndpoint(url string) (secret string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ep := s.addEndpoint(url, "", []string{"*"}, "", nil)
	ep.Connect = true
	return ep.Secret
}

func (s *Server) addEndpoint(url, version string, events []string, description string, metadata map[string]string) *endpoint {
	ep := &endpoint{ID: newID("we"), URL: url, Secret: "whsec_" + newID("x")[2:] + newID("x")[2:], APIVersion: version,
		EnabledEvents: events, Description: description, Created: s.clock.Now().Unix(), Metadata: metadata}
	s.endpoints.put(ep)
	return ep
}

// createEndpoint is POST /v1/webhook_endpoints. enabled_events defaults to
// ["*"] (Stripe requires it); connect=true makes a Connect endpoint (its
// object does not say so, as Stripe's does not). Endpoints are the
// platform's, whatever Stripe-Account says.
func (s *Server) createEndpoint(c *call) (obj, error) {
	f := c.form
	if err := f.allow("url", "enabled_events", "api_version", "description", "metadata", "connect"); err != nil {
		return nil, err
	}
	raw, err := f.require("url")
	if err != nil {
		return nil, err
	}
	if err := checkEndpointURL(raw); err != nil {
		return nil, err
	}
	events, err := f.list("enabled_events")
	if err != nil {
		return nil, err
	}
	if len(events) == 0 {
		events = []string{"*"}
	}
	version, _ := f.str("api_version")
	if version != "" && !versionPattern.MatchString(version) {
		return nil, invalidParam("api_version", "Invalid API version: "+version)
	}
	description, _ := f.str("description")
	connect, _, err := f.boolean("connect")
	if err != nil {
		return nil, err
	}
	ep := s.addEndpoint(raw, version, events, description, f.hash("metadata"))
	ep.Connect = connect
	o := renderEndpoint(ep)
	o["secret"] = ep.Secret // only answered on creation, as by Stripe
	return o, nil
}

func (s *Server) listEndpoints(c *call) (obj, error) {
	if err := c.form.allow(listParams...); err != nil {
		return nil, err
	}
	// A thin event destination is no v1 webhook endpoint (API v2's only).
	return listPage(c, s.endpoints.newestFirst(func(ep *endpoint) bool { return !ep.Thin }), s.endpoints.get, "webhook endpoint", renderEndpoint)
}

func checkEndpointURL(raw string) error {
	if u, err := url.Parse(raw); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return invalidParam("url", "Invalid URL: "+raw)
	}
	return nil
}

// getEndpoint is GET /v1/webhook_endpoints/{id} (no secret, as by Stripe).
func (s *Server) getEndpoint(c *call) (obj, error) {
	if err := c.form.allow(); err != nil {
		return nil, err
	}
	id := c.r.PathValue("id")
	ep, ok := s.endpoints.get(id)
	if !ok {
		return nil, noSuch("webhook endpoint", id, "id")
	}
	return renderEndpoint(ep), nil
}

// updateEndpoint is POST /v1/webhook_endpoints/{id}: url, enabled_events,
// disabled, description, metadata. api_version cannot change (Stripe
// fixes it at creation).
func (s *Server) updateEndpoint(c *call) (obj, error) {
	f := c.form
	if err := f.allow("url", "enabled_events", "disabled", "description", "metadata"); err != nil {
		return nil, err
	}
	id := c.r.PathValue("id")
	ep, ok := s.endpoints.get(id)
	if !ok {
		return nil, noSuch("webhook endpoint", id, "id")
	}
	if raw, ok := f.str("url"); ok {
		if err := checkEndpointURL(raw); err != nil {
			return nil, err
		}
		ep.URL = raw
	}
	events, err := f.list("enabled_events")
	if err != nil {
		return nil, err
	}
	if len(events) > 0 {
		ep.EnabledEvents = events
	}
	disabled, set, err := f.boolean("disabled")
	if err != nil {
		return nil, err
	}
	if set {
		ep.Disabled = disabled
	}
	if d, ok := f.str("description"); ok {
		ep.Description = d
	}
	if m := f.hash("metadata"); len(m) > 0 {
		ep.Metadata = m
	}
	return renderEndpoint(ep), nil
}

// DisableWebhookEndpoint disables the endpoint as Stripe does after days of
// failed deliveries: its status reads disabled and nothing is sent to it.
// It reports whether the endpoint exists.
func (s *Server) DisableWebhookEndpoint(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	ep, ok := s.endpoints.get(id)
	if ok {
		ep.Disabled = true
	}
	return ok
}

// WebhookEndpointIDs returns the ids of the webhook endpoints, oldest first.
func (s *Server) WebhookEndpointIDs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []string
	for _, ep := range s.endpoints.rows {
		if !ep.Thin {
			ids = append(ids, ep.ID)
		}
	}
	return ids
}

func (s *Server) deleteEndpoint(c *call) (obj, error) {
	id := c.r.PathValue("id")
	if _, ok := s.endpoints.get(id); !ok {
		return nil, noSuch("webhook endpoint", id, "id")
	}
	s.endpoints.remove(id)
	return obj{"id": id, "object": "webhook_endpoint", "deleted": true}, nil
}

// AddEventDestination registers url as an event destination that receives
// thin events (types as v1.<event type>; none given = all) signed like
// webhooks, and returns its signing secret.
func (s *Server) AddEventDestination(url string, types ...string) (secret string) {
	return s.addDestination(url, false, types)
}

// AddConnectEventDestination is AddEventDestination for the connected
// accounts' events (Stripe's events_from other_accounts): each thin event
// names its account in context.
func (s *Server) AddConnectEventDestination(url string, types ...string) (secret string) {
	return s.addDestination(url, true, types)
}

func (s *Server) addDestination(url string, connect bool, types []string) (secret string) {
	if len(types) == 0 {
		types = []string{"*"}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ep := s.addEndpoint(url, "", types, "", nil)
	ep.Thin, ep.Connect = true, connect
	return ep.Secret
}
