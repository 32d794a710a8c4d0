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
func (s *Server) SetFaults(f Faults) { s.faults.Set(f) }

// Faults returns the current fault knobs.
func (s *Server) Faults() Faults { return s.faults.Get() }

// injectFault decides, before a request made with key is handled, whether
// it fails by the faults st holds (the server's, or an account's). A
// failed request changes nothing, so a client's retry is always safe.
func injectFault(st *fault.State, key string) *stripeError {
	if !st.Get().Targets(key) {
		return nil
	}
	switch failure, f := st.Request(); failure {
	case fault.RateLimited:
		// Stripe's 429 body, without Stripe-Rate-Limited-Reason: the old
		// single bucket (RequestsPerSecond) and the dice are not Stripe's
		// limiters; Limits are.
		return rateLimited("", f.RetryAfter)
	case fault.ServerError:
		return &stripeError{status: http.StatusInternalServerError, Type: typeAPI,
			Message: "An unknown error occurred while processing your request (fault injected by stripemock)."}
	}
	return nil
}
