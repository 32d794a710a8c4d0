package stripemock

import (
	"encoding/json"
	"errors"
	"net/http"
	"time"
)

// The control endpoints under /_mock/ need no API key and speak JSON:
//
//	GET  /_mock/faults                     current Faults
//	POST /_mock/faults                     replace Faults: {"duplicate_copies":2,"reorder_delay":"2s","drop_rate":0.1,…}
//	GET  /_mock/clock                      {"now":…}
//	POST /_mock/clock/advance              {"seconds":N}: advance the clock, renewing subscriptions
//	GET  /_mock/deliveries                 every webhook attempt so far
//	POST /_mock/subscriptions/{id}/status  {"status":"past_due"}: force a status, emitting its event
//	POST /_mock/reset                      forget customers, subscriptions, invoices, events and
//	                                       deliveries; prices and webhook endpoints stay
func (s *Server) controlRoutes() {
	m := s.control
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
	m.HandleFunc("GET /_mock/clock", func(w http.ResponseWriter, r *http.Request) {
		controlJSON(w, http.StatusOK, clockJSON(s.clock.Now()))
	})
	m.HandleFunc("POST /_mock/clock/advance", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Seconds float64 `json:"seconds"`
		}
		if err := decodeBody(r, &req); err != nil {
			controlError(w, err)
			return
		}
		if req.Seconds < 0 {
			controlError(w, errors.New("seconds must not be negative"))
			return
		}
		controlJSON(w, http.StatusOK, clockJSON(s.clock.Advance(time.Duration(req.Seconds*float64(time.Second)))))
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
	m.HandleFunc("POST /_mock/reset", func(w http.ResponseWriter, r *http.Request) {
		s.Reset()
		controlJSON(w, http.StatusOK, map[string]bool{"reset": true})
	})
}

// Reset forgets customers, subscriptions, invoices, events, idempotency keys
// and delivery records. Prices, webhook endpoints and faults stay.
func (s *Server) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.customers = table[*customer]{}
	s.subs = table[*subscription]{}
	s.invoices = table[*invoice]{}
	s.events = table[*event]{}
	s.idempotent = map[string]savedResponse{}
	s.deliveries = nil
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
