package kinde

import (
	"net/http"
	"time"
)

// token is the client-credentials grant: the right client id, secret and
// audience (this server's /api) get a bearer token that expires.
func (s *Server) token(w http.ResponseWriter, r *http.Request) {
	if fault := s.injectFault(); fault != nil {
		fault(w)
		return
	}
	if err := r.ParseForm(); err != nil {
		writeJSON(w, http.StatusBadRequest, oauthError("invalid_request", err.Error()))
		return
	}
	f := r.PostForm
	switch {
	case f.Get("grant_type") != "client_credentials":
		writeJSON(w, http.StatusBadRequest, oauthError("unsupported_grant_type", "only client_credentials"))
		return
	case f.Get("client_id") != s.opts.ClientID || f.Get("client_secret") != s.opts.ClientSecret:
		writeJSON(w, http.StatusUnauthorized, oauthError("invalid_client", "client authentication failed"))
		return
	case f.Get("audience") != "http://"+r.Host+"/api" && f.Get("audience") != "https://"+r.Host+"/api":
		writeJSON(w, http.StatusBadRequest, oauthError("invalid_request", "audience must be this domain's /api"))
		return
	}
	token := randomHex(24)
	s.mu.Lock()
	s.tokens[token] = s.opts.Now().Add(s.opts.TokenTTL)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"access_token": token, "token_type": "bearer",
		"expires_in": int(s.opts.TokenTTL.Seconds()), "scope": "read:billing_agreements read:billing_entitlements"})
}

func oauthError(code, desc string) map[string]string {
	return map[string]string{"error": code, "error_description": desc}
}

// api wraps a Management API handler: latency and faults first, then the
// bearer token.
func (s *Server) api(h func(r *http.Request) (any, int)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if d := s.Faults().Latency; d > 0 {
			time.Sleep(d)
		}
		if fault := s.injectFault(); fault != nil {
			fault(w)
			return
		}
		token, ok := bearer(r)
		s.mu.Lock()
		expiry, known := s.tokens[token]
		s.mu.Unlock()
		if !ok || !known || !s.opts.Now().Before(expiry) {
			writeJSON(w, http.StatusUnauthorized, map[string]any{"errors": []map[string]string{{"code": "TOKEN_INVALID", "message": "Invalid or expired token"}}})
			return
		}
		body, status := h(r)
		writeJSON(w, status, body)
	}
}

func bearer(r *http.Request) (string, bool) {
	const prefix = "Bearer "
	h := r.Header.Get("Authorization")
	if len(h) <= len(prefix) || h[:len(prefix)] != prefix {
		return "", false
	}
	return h[len(prefix):], true
}
