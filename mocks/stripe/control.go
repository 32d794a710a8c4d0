package stripe

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"time"

	"github.com/billsync/billsync/mocks/fault"
)

// The control endpoints under /_mock/ need no API key and speak JSON:
//
//	GET  /_mock/faults                     current Faults
//	POST /_mock/faults                     replace Faults: {"duplicate_copies":2,"reorder_delay":"2s","drop_rate":0.1,…}
//	GET  /_mock/limits                     current Limits
//	POST /_mock/limits                     replace Limits: {"documented":true,"operations":{"GET /v1/events":5},…}
//	GET  /_mock/usage[?key=sk_…]           requests by operation, every key's or one key's: Usage
//	POST /_mock/usage/reset                start counting again
//	GET  /_mock/clock                      {"now":…}
//	POST /_mock/clock/advance              {"seconds":N}: advance the clock, renewing subscriptions
//	GET  /_mock/deliveries                 every webhook attempt so far
//	GET  /_mock/deliveries/settled         {"delivered":N,"gave_up":N,"dropped":N}
//	POST /_mock/subscriptions/{id}/status  {"status":"past_due"}: force a status, emitting its event
//	POST /_mock/customers/{id}/card        {"fails":true}: the customer's payments are declined (or not)
//	POST /_mock/dunning                    {"retries":["72h","120h"],"final":"unpaid"}: failed-payment setting
//	POST /_mock/event_destinations         {"url":…,"types":["v1.customer.subscription.updated"]}:
//	                                       a thin-event destination; answers its secret
//	POST /_mock/events/list_lag            {"seconds":N}: events appear in GET /v1/events N s after creation
//	POST /_mock/webhook_endpoints/{id}/disable
//	                                       Stripe disables the endpoint (as after days of failures)
//	POST /_mock/reset                      forget customers, subscriptions, invoices, events,
//	                                       deliveries and usage; prices, webhook endpoints, faults
//	                                       and limits stay
func (s *Server) controlRoutes() {
	m := s.control
	m.HandleFunc("POST /_mock/events/list_lag", func(w http.ResponseWriter, r *http.Request) {
		lag, err := decodeSeconds(r)
		if err != nil {
			controlError(w, err)
			return
		}
		s.SetEventListLag(lag)
		controlJSON(w, http.StatusOK, map[string]float64{"seconds": lag.Seconds()})
	})
	m.HandleFunc("POST /_mock/webhook_endpoints/{id}/disable", func(w http.ResponseWriter, r *http.Request) {
		if !s.DisableWebhookEndpoint(r.PathValue("id")) {
			controlJSON(w, http.StatusNotFound, map[string]string{"error": "no such webhook endpoint"})
			return
		}
		controlJSON(w, http.StatusOK, map[string]any{"id": r.PathValue("id"), "status": "disabled"})
	})
	m.HandleFunc("GET /_mock/faults", func(w http.ResponseWriter, r *http.Request) {
		controlJSON(w, http.StatusOK, s.Faults())
	})
	m.HandleFunc("POST /_mock/faults", func(w http.ResponseWriter, r *http.Request) {
		var f Faults
		if err := decodeBody(r, &f); err != nil {
			controlError(w, err)
			return
		}
		if err := f.Validate(); err != nil {
			controlError(w, err)
			return
		}
		s.SetFaults(f)
		controlJSON(w, http.StatusOK, f)
	})
	m.HandleFunc("GET /_mock/limits", func(w http.ResponseWriter, r *http.Request) {
		controlJSON(w, http.StatusOK, s.Limits())
	})
	m.HandleFunc("POST /_mock/limits", func(w http.ResponseWriter, r *http.Request) {
		var l Limits
		if err := decodeBody(r, &l); err != nil {
			controlError(w, err)
			return
		}
		if err := s.SetLimits(l); err != nil {
			controlError(w, err)
			return
		}
		controlJSON(w, http.StatusOK, s.Limits())
	})
	m.HandleFunc("GET /_mock/usage", func(w http.ResponseWriter, r *http.Request) {
		if key := r.URL.Query().Get("key"); key != "" {
			controlJSON(w, http.StatusOK, s.KeyUsage(key))
			return
		}
		controlJSON(w, http.StatusOK, s.Usage())
	})
	m.HandleFunc("POST /_mock/usage/reset", func(w http.ResponseWriter, r *http.Request) {
		s.ResetUsage()
		controlJSON(w, http.StatusOK, s.Usage())
	})
	m.HandleFunc("GET /_mock/clock", func(w http.ResponseWriter, r *http.Request) {
		controlJSON(w, http.StatusOK, clockJSON(s.clock.Now()))
	})
	m.HandleFunc("POST /_mock/clock/advance", func(w http.ResponseWriter, r *http.Request) {
		d, err := decodeSeconds(r)
		if err != nil {
			controlError(w, err)
			return
		}
		controlJSON(w, http.StatusOK, clockJSON(s.clock.Advance(d)))
	})
	m.HandleFunc("GET /_mock/deliveries", func(w http.ResponseWriter, r *http.Request) {
		controlJSON(w, http.StatusOK, map[string]any{"deliveries": s.Deliveries()})
	})
	m.HandleFunc("POST /_mock/subscriptions/{id}/status", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Status string `json:"status"`
		}
		if err := decodeBody(r, &req); err != nil {
			controlError(w, err)
			return
		}
		if err := s.SetSubscriptionStatus(r.PathValue("id"), req.Status); err != nil {
			controlError(w, err)
			return
		}
		controlJSON(w, http.StatusOK, map[string]string{"id": r.PathValue("id"), "status": req.Status})
	})
	m.HandleFunc("GET /_mock/deliveries/settled", func(w http.ResponseWriter, r *http.Request) {
		controlJSON(w, http.StatusOK, s.Settled())
	})
	m.HandleFunc("POST /_mock/customers/{id}/card", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Fails bool `json:"fails"`
		}
		if err := decodeBody(r, &req); err != nil {
			controlError(w, err)
			return
		}
		if err := s.SetCardFails(r.PathValue("id"), req.Fails); err != nil {
			controlError(w, err)
			return
		}
		controlJSON(w, http.StatusOK, map[string]any{"id": r.PathValue("id"), "fails": req.Fails})
	})
	m.HandleFunc("POST /_mock/dunning", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Retries []fault.Duration `json:"retries"`
			Final   string           `json:"final"`
		}
		if err := decodeBody(r, &req); err != nil {
			controlError(w, err)
			return
		}
		d := Dunning{Final: req.Final, Retries: []time.Duration{}}
		for _, r := range req.Retries {
			d.Retries = append(d.Retries, time.Duration(r))
		}
		if err := s.SetDunning(d); err != nil {
			controlError(w, err)
			return
		}
		controlJSON(w, http.StatusOK, req)
	})
	m.HandleFunc("POST /_mock/event_destinations", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			URL   string   `json:"url"`
			Types []string `json:"types"`
		}
		if err := decodeBody(r, &req); err != nil {
			controlError(w, err)
			return
		}
		if u, err := url.Parse(req.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			controlError(w, errors.New("url must be an http(s) URL"))
			return
		}
		controlJSON(w, http.StatusOK, map[string]string{"url": req.URL, "secret": s.AddEventDestination(req.URL, req.Types...)})
	})
	m.HandleFunc("POST /_mock/reset", func(w http.ResponseWriter, r *http.Request) {
		s.Reset()
		controlJSON(w, http.StatusOK, map[string]bool{"reset": true})
	})
}

// Reset forgets customers, subscriptions, invoices, events, idempotency keys,
// delivery records and usage. Prices, webhook endpoints, faults and limits
// stay.
func (s *Server) Reset() {
	s.ResetUsage()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.customers = table[*customer]{}
	s.subs = table[*subscription]{}
	s.subsByCustomer = map[string][]*subscription{}
	s.invoices = table[*invoice]{}
	s.events = table[*event]{}
	s.entitled = nil
	s.idempotent = map[string]savedResponse{}
	s.deliveries = nil
	s.outcomes = map[deliveryKey]string{}
	s.history = map[string][]change{}
}

func clockJSON(now time.Time) map[string]any {
	return map[string]any{"now": now.Unix(), "time": now.UTC().Format(time.RFC3339)}
}

func decodeBody(r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, 1<<20))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

func controlJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.MarshalIndent(v, "", "  ")
	writeJSON(w, status, b)
}

func controlError(w http.ResponseWriter, err error) {
	var se *stripeError
	if errors.As(err, &se) {
		se.write(w)
		return
	}
	controlJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]string{"message": err.Error()}})
}

// decodeSeconds reads a control body {"seconds":N}: a duration, not
// negative.
func decodeSeconds(r *http.Request) (time.Duration, error) {
	var req struct {
		Seconds float64 `json:"seconds"`
	}
	if err := decodeBody(r, &req); err != nil {
		return 0, err
	}
	if req.Seconds < 0 {
		return 0, errors.New("seconds must not be negative")
	}
	return time.Duration(req.Seconds * float64(time.Second)), nil
}
