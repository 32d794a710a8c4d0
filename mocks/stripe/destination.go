package stripe

import (
	"bytes"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Event destinations (API v2, /v2/core/event_destinations), with Stripe's
// object shape: id ed_…, object v2.core.event_destination, name, type
// webhook_endpoint, event_payload thin|snapshot, enabled_events, status
// enabled|disabled, created and updated as RFC 3339 times, and
// webhook_endpoint {url, signing_secret} whose fields are answered only
// when the request's include asks for them (the signing secret only on
// creation). Requests are JSON, not forms. A destination is kept as an
// endpoint row: a thin one receives thin events (renderThin) signed with
// its secret like any webhook. The v2 list shows the v1 webhook endpoints
// too, as snapshot destinations, as Stripe's does; the v1 list does not
// show thin destinations.

// destinationRoutes are the event destinations' API routes.
func (s *Server) destinationRoutes() map[string]handler {
	return map[string]handler{
		"POST /v2/core/event_destinations":              s.createDestination,
		"GET /v2/core/event_destinations":               s.listDestinations,
		"GET /v2/core/event_destinations/{id}":          s.getDestination,
		"POST /v2/core/event_destinations/{id}":         s.updateDestination,
		"POST /v2/core/event_destinations/{id}/enable":  s.enableDestination,
		"POST /v2/core/event_destinations/{id}/disable": s.disableDestination,
	}
}

// destinationPageSize is the v2 list's page size when limit is not given.
const destinationPageSize = 20

// destinationRequest is the JSON body of a create or an update.
type destinationRequest struct {
	Name               *string  `json:"name"`
	Description        *string  `json:"description"`
	Type               *string  `json:"type"`
	EventPayload       *string  `json:"event_payload"`
	EnabledEvents      []string `json:"enabled_events"`
	EventsFrom         []string `json:"events_from"`
	SnapshotAPIVersion *string  `json:"snapshot_api_version"`
	Include            []string `json:"include"`
	WebhookEndpoint    *struct {
		URL *string `json:"url"`
	} `json:"webhook_endpoint"`
	Metadata map[string]string `json:"metadata"`
}

// readDestinationRequest decodes a v2 JSON body strictly: an unknown
// field is a 400, as Stripe's v2 answers it.
func readDestinationRequest(c *call) (destinationRequest, error) {
	var req destinationRequest
	if !strings.HasPrefix(c.r.Header.Get("Content-Type"), "application/json") {
		return req, badRequest("API v2 requests take a JSON body (Content-Type: application/json)")
	}
	dec := json.NewDecoder(bytes.NewReader(c.body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return req, badRequest("Invalid request body: " + err.Error())
	}
	for _, inc := range req.Include {
		if inc != "webhook_endpoint.url" && inc != "webhook_endpoint.signing_secret" {
			return req, invalidParam("include", "Invalid include: "+inc)
		}
	}
	return req, nil
}

// createDestination is POST /v2/core/event_destinations.
func (s *Server) createDestination(c *call) (obj, error) {
	req, err := readDestinationRequest(c)
	if err != nil {
		return nil, err
	}
	switch {
	case req.Name == nil || *req.Name == "":
		return nil, missingParam("name")
	case req.Type == nil:
		return nil, missingParam("type")
	case *req.Type != "webhook_endpoint":
		return nil, invalidParam("type", "The fake Stripe makes webhook_endpoint destinations only, not "+*req.Type)
	case req.EventPayload == nil:
		return nil, missingParam("event_payload")
	case *req.EventPayload != "thin" && *req.EventPayload != "snapshot":
		return nil, invalidParam("event_payload", "Invalid event_payload: "+*req.EventPayload)
	case len(req.EnabledEvents) == 0:
		return nil, missingParam("enabled_events")
	case req.WebhookEndpoint == nil || req.WebhookEndpoint.URL == nil:
		return nil, missingParam("webhook_endpoint.url")
	}
	if err := checkEndpointURL(*req.WebhookEndpoint.URL); err != nil {
		return nil, err
	}
	thin := *req.EventPayload == "thin"
	version := ""
	if req.SnapshotAPIVersion != nil {
		if thin {
			return nil, invalidParam("snapshot_api_version", "snapshot_api_version is for snapshot payloads only")
		}
		if version = *req.SnapshotAPIVersion; !versionPattern.MatchString(version) {
			return nil, invalidParam("snapshot_api_version", "Invalid API version: "+version)
		}
	}
	if err := checkDestinationTypes(thin, req.EnabledEvents); err != nil {
		return nil, err
	}
	description := ""
	if req.Description != nil {
		description = *req.Description
	}
	ep := s.addEndpoint(*req.WebhookEndpoint.URL, version, slices.Clone(req.EnabledEvents), description, req.Metadata)
	if thin {
		// A v2 destination's id, as Stripe names them; the row is reindexed.
		s.endpoints.remove(ep.ID)
		ep.ID = newID("ed")
		s.endpoints.put(ep)
	}
	ep.Thin, ep.Name, ep.Updated = thin, *req.Name, ep.Created
	return renderDestination(ep, req.Include), nil
}

// checkDestinationTypes refuses a thin destination's snapshot types (a
// thin destination takes v1.<type> or v2 types) and the reverse.
func checkDestinationTypes(thin bool, types []string) error {
	for _, typ := range types {
		isThin := strings.HasPrefix(typ, "v1.") || strings.HasPrefix(typ, "v2.")
		if typ != "*" && isThin != thin {
			return invalidParam("enabled_events", "Event type "+typ+" does not match the destination's event_payload")
		}
	}
	return nil
}

// listDestinations is GET /v2/core/event_destinations: newest first,
// limit a page (default 20), next_page_url while more remain.
func (s *Server) listDestinations(c *call) (obj, error) {
	if err := c.form.allow("limit", "include", "page"); err != nil {
		return nil, err
	}
	include, err := c.form.list("include")
	if err != nil {
		return nil, err
	}
	limit := int64(destinationPageSize)
	if n, set, err := c.form.integer("limit"); err != nil {
		return nil, err
	} else if set {
		if n < 1 || n > 100 {
			return nil, invalidParam("limit", "limit must be between 1 and 100")
		}
		limit = n
	}
	start := 0
	if p, ok := c.form.str("page"); ok {
		if start, err = strconv.Atoi(p); err != nil || start < 0 {
			return nil, invalidParam("page", "Invalid page token: "+p)
		}
	}
	rows := s.endpoints.newestFirst(nil)
	start = min(start, len(rows))
	stop := min(len(rows), start+int(limit))
	data := make([]obj, 0, stop-start)
	for _, ep := range rows[start:stop] {
		data = append(data, renderDestination(ep, include))
	}
	var next any
	if stop < len(rows) {
		q := "limit=" + strconv.FormatInt(limit, 10) + "&page=" + strconv.Itoa(stop)
		for i, inc := range include {
			q += "&include[" + strconv.Itoa(i) + "]=" + inc
		}
		next = "/v2/core/event_destinations?" + q
	}
	return obj{"data": data, "next_page_url": next, "previous_page_url": nil}, nil
}

// destination finds the destination of a path's id.
func (s *Server) destination(c *call) (*endpoint, error) {
	id := c.r.PathValue("id")
	ep, ok := s.endpoints.get(id)
	if !ok {
		return nil, noSuch("event destination", id, "id")
	}
	return ep, nil
}

// getDestination is GET /v2/core/event_destinations/{id}.
func (s *Server) getDestination(c *call) (obj, error) {
	if err := c.form.allow("include"); err != nil {
		return nil, err
	}
	include, err := c.form.list("include")
	if err != nil {
		return nil, err
	}
	ep, err := s.destination(c)
	if err != nil {
		return nil, err
	}
	return renderDestination(ep, include), nil
}

// updateDestination is POST /v2/core/event_destinations/{id}: name,
// description, enabled_events (the whole new list), webhook_endpoint.url,
// metadata. The payload style and the type cannot change.
func (s *Server) updateDestination(c *call) (obj, error) {
	ep, err := s.destination(c)
	if err != nil {
		return nil, err
	}
	req, err := readDestinationRequest(c)
	if err != nil {
		return nil, err
	}
	if req.Type != nil || req.EventPayload != nil || req.SnapshotAPIVersion != nil || req.EventsFrom != nil {
		return nil, badRequest("type, event_payload, events_from and snapshot_api_version cannot be updated")
	}
	if slices.Contains(req.Include, "webhook_endpoint.signing_secret") {
		return nil, invalidParam("include", "webhook_endpoint.signing_secret is answered on creation only")
	}
	if req.EnabledEvents != nil {
		if len(req.EnabledEvents) == 0 {
			return nil, invalidParam("enabled_events", "enabled_events cannot be empty")
		}
		if err := checkDestinationTypes(ep.Thin, req.EnabledEvents); err != nil {
			return nil, err
		}
		ep.EnabledEvents = slices.Clone(req.EnabledEvents)
	}
	if req.WebhookEndpoint != nil && req.WebhookEndpoint.URL != nil {
		if err := checkEndpointURL(*req.WebhookEndpoint.URL); err != nil {
			return nil, err
		}
		ep.URL = *req.WebhookEndpoint.URL
	}
	if req.Name != nil {
		ep.Name = *req.Name
	}
	if req.Description != nil {
		ep.Description = *req.Description
	}
	if len(req.Metadata) > 0 {
		ep.Metadata = req.Metadata
	}
	ep.Updated = c.now.Unix()
	return renderDestination(ep, req.Include), nil
}

// enableDestination and disableDestination are POST
// /v2/core/event_destinations/{id}/enable and …/disable.
func (s *Server) enableDestination(c *call) (obj, error)  { return s.setDestinationDisabled(c, false) }
func (s *Server) disableDestination(c *call) (obj, error) { return s.setDestinationDisabled(c, true) }

func (s *Server) setDestinationDisabled(c *call, disabled bool) (obj, error) {
	if len(bytes.TrimSpace(c.body)) > 0 && !bytes.Equal(bytes.TrimSpace(c.body), []byte("{}")) {
		return nil, badRequest("enable and disable take no parameters")
	}
	ep, err := s.destination(c)
	if err != nil {
		return nil, err
	}
	ep.Disabled, ep.Updated = disabled, c.now.Unix()
	return renderDestination(ep, nil), nil
}

func renderDestination(ep *endpoint, include []string) obj {
	payload, version, name := "snapshot", any(ep.version()), ep.Name
	if ep.Thin {
		payload, version = "thin", nil
	}
	if name == "" {
		name = ep.Description
	}
	updated := ep.Updated
	if updated == 0 {
		updated = ep.Created
	}
	webhook := obj{"url": nil, "signing_secret": nil}
	if slices.Contains(include, "webhook_endpoint.url") {
		webhook["url"] = ep.URL
	}
	if slices.Contains(include, "webhook_endpoint.signing_secret") {
		webhook["signing_secret"] = ep.Secret
	}
	var details any
	if ep.Disabled {
		details = obj{"disabled": obj{"reason": "user"}}
	}
	return obj{
		"id": ep.ID, "object": "v2.core.event_destination", "amazon_eventbridge": nil,
		"created": v2Time(ep.Created), "updated": v2Time(updated), "description": ep.Description,
		"enabled_events": slices.Clone(ep.EnabledEvents), "event_payload": payload, "events_from": []any{"self"},
		"livemode": false, "metadata": metadataOf(ep.Metadata), "name": name, "snapshot_api_version": version,
		"status": ep.status(), "status_details": details, "type": "webhook_endpoint", "webhook_endpoint": webhook,
	}
}

// v2Time renders a time as API v2 does: RFC 3339 in UTC, milliseconds.
func v2Time(unix int64) string {
	return time.Unix(unix, 0).UTC().Format("2006-01-02T15:04:05.000Z")
}

// EventDestinationIDs returns the ids of the thin event destinations,
// oldest first (AddEventDestination's and those made through the API).
func (s *Server) EventDestinationIDs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []string
	for _, ep := range s.endpoints.rows {
		if ep.Thin {
			ids = append(ids, ep.ID)
		}
	}
	return ids
}

// readJSONBody reads an API v2 request's JSON body (at most 1 MiB) before
// the handler runs, so no handler reads the network under the lock.
func readJSONBody(r *http.Request) ([]byte, *stripeError) {
	if r.Method != http.MethodPost || !strings.HasPrefix(r.URL.Path, "/v2/") {
		return nil, nil
	}
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(http.MaxBytesReader(nil, r.Body, 1<<20)); err != nil {
		return nil, badRequest("Invalid request body: " + err.Error())
	}
	return buf.Bytes(), nil
}
