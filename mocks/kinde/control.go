package kinde

import (
	"net/http"
)

func (s *Server) controlSetAgreements(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Agreements []Agreement `json:"agreements"`
	}
	if err := decode(r, &body); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"agreements": s.SetAgreements(r.PathValue("id"), body.Agreements)})
}

func (s *Server) controlAddEndpoint(w http.ResponseWriter, r *http.Request) {
	var body struct {
		URL string `json:"url"`
	}
	if err := decode(r, &body); err != nil || body.URL == "" {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "want {\"url\": \"http://…\"}"})
		return
	}
	s.AddWebhookEndpoint(body.URL)
	writeJSON(w, http.StatusOK, map[string]string{"url": body.URL})
}

func (s *Server) controlSendEvent(w http.ResponseWriter, r *http.Request) {
	var ev Event
	if err := decode(r, &ev); err != nil || ev.Type == "" {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "want {\"type\", \"customer_id\", \"data\"}"})
		return
	}
	sent, err := s.SendEvent(ev)
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, sent)
}

func (s *Server) controlFaults(w http.ResponseWriter, r *http.Request) {
	var f Faults
	if err := decode(r, &f); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	if err := f.Validate(); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	s.SetFaults(f)
	writeJSON(w, http.StatusOK, f)
}

func (s *Server) controlRotate(w http.ResponseWriter, r *http.Request) {
	kid, err := s.keys.Rotate()
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"kid": kid})
}
