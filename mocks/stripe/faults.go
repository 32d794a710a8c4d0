package stripe

import (
	"net/http"

	"github.com/billsync/billsync/mocks/fault"
)

// Faults are the fault knobs the fake takes (package fault: the fake Kinde
// takes the same ones).
type Faults = fault.Faults

// SetFaults replaces the fault knobs. A non-zero Seed restarts the random
// sequence, so the same faults with the same seed make the same choices.
func (s *Server) SetFaults(f Faults) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setFaults(f)
}

func (s *Server) setFaults(f Faults) {
	s.faults = f
	if f.Seed != 0 || s.rng == nil {
		s.rng = f.Dice()
	}
	s.limiter = f.Limiter()
}

// Faults returns the current fault knobs.
func (s *Server) Faults() Faults {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.faults
}

// injectFault decides, before a request made with key is handled, whether it
// fails. A failed request changes nothing, so a client's retry is always safe.
func (s *Server) injectFault(key string) *stripeError {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.faults
	if !f.Targets(key) {
		return nil
	}
	limited := s.limiter != nil && !s.limiter.Allow()
	if limited || (f.RateLimitRate > 0 && s.rng.Float64() < f.RateLimitRate) {
		// Stripe's 429: invalid_request_error/rate_limit, no Retry-After.
		return &stripeError{status: http.StatusTooManyRequests, retryAfter: f.RetryAfter, Type: typeInvalidRequest,
			Code: "rate_limit", Message: "Request rate limit exceeded. You can learn more about rate limits here https://stripe.com/docs/rate-limits."}
	}
	if f.Error5xxRate > 0 && s.rng.Float64() < f.Error5xxRate {
		return &stripeError{status: http.StatusInternalServerError, Type: typeAPI,
			Message: "An unknown error occurred while processing your request (fault injected by stripemock)."}
	}
	return nil
}
