package server

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/http"
)

// webhookAnswer is the body of a 200 answer: it says "stored", never
// "applied".
type webhookAnswer struct {
	Status    string `json:"status"` // stored, duplicate or ignored
	Event     string `json:"event"`
	SeenCount int    `json:"seen_count"`
	Reason    string `json:"reason,omitempty"`
}

func (s *Server) handleWebhook(w http.ResponseWriter, r *http.Request) {
	v, ok := s.verifiers[r.PathValue("provider")]
	if !ok {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no such provider configured"})
		return
	}
	body, err := readBody(w, r)
	if err != nil {
		s.writeError(w, r, fmt.Errorf("read body: %w", err))
		return
	}
	d, err := v.Verify(r.Header, body)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	d.RemoteAddr = r.RemoteAddr
	st, err := s.inbox.StoreDelivery(r.Context(), d)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	ans := webhookAnswer{Status: "stored", Event: d.Event.DedupeKey, SeenCount: st.SeenCount}
	switch {
	case st.Duplicate:
		ans.Status = "duplicate"
	case st.Status == "ignored":
		ans.Status, ans.Reason = "ignored", d.Event.IgnoreReason
	}
	if s.metrics != nil {
		s.metrics.ObserveDelivery(v.Provider(), ans.Status)
	}
	// Debug, not info: every delivery already has its receipts row, and the
	// worker logs what each reconcile did.
	s.log.Debug("webhook stored", slog.String("provider", v.Provider()),
		slog.String("event", d.Event.DedupeKey), slog.String("type", d.Event.Type),
		slog.String("customer", d.Event.CustomerID), slog.String("status", ans.Status))
	writeJSON(w, http.StatusOK, ans)
}

// readBody reads the request body, refusing more than MaxBodyBytes. The
// buffer is sized from Content-Length when the client sends one.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	var buf bytes.Buffer
	if n := r.ContentLength; n > 0 && n <= MaxBodyBytes {
		buf.Grow(int(n) + bytes.MinRead)
	}
	_, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	return buf.Bytes(), err
}
