package stripemock

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"time"

	"golang.org/x/time/rate"
)

// Faults makes the fake misbehave the way the real Stripe sometimes does.
// The zero value is a well-behaved server.
type Faults struct {
	DuplicateCopies int           // each webhook delivery is sent 1+N times
	RandomCopies    int           // … plus a random 0..N more copies per delivery (seeded)
	ReorderDelay    time.Duration // each copy waits a random [0, ReorderDelay] before sending
	DropRate        float64       // probability a delivery (all its copies) is never sent
	Error5xxRate    float64       // probability an API request answers 500 api_error
	RateLimitRate   float64       // probability an API request answers 429 rate_limit
	// RetryAfter, when set, adds a Retry-After header to 429s. Stripe's own
	// 429s carry none (its docs only advise backing off), so the default is
	// none: a client must not depend on it.
	RetryAfter        time.Duration
	Latency           time.Duration // added to every API response
	RequestsPerSecond float64       // API token bucket; over it → 429
	// StaleReads makes GET requests see customers and subscriptions as they
	// were this long ago (by the wall clock): a read right after a change
	// returns the previous state, one made StaleReads later the new one. An
	// object created within the window is not found yet.
	StaleReads time.Duration
	// TargetKey, when set, limits the request faults (Error5xxRate,
	// RateLimitRate, RequestsPerSecond, Latency, StaleReads) to requests
	// made with this API key: billsync's calls fail while a test driver on
	// another key (see Options.ExtraAPIKeys) is served normally.
	TargetKey string
	Seed      int64 // seeds the random choices; 0 = random seed
}

// faultsJSON is Faults on the wire of /_mock/faults: snake_case names and
// durations as Go duration strings ("250ms") or numbers of seconds.
type faultsJSON struct {
	DuplicateCopies   int          `json:"duplicate_copies"`
	RandomCopies      int          `json:"random_copies,omitempty"`
	ReorderDelay      jsonDuration `json:"reorder_delay"`
	DropRate          float64      `json:"drop_rate"`
	Error5xxRate      float64      `json:"error_5xx_rate"`
	RateLimitRate     float64      `json:"rate_limit_rate"`
	RetryAfter        jsonDuration `json:"retry_after"`
	Latency           jsonDuration `json:"latency"`
	RequestsPerSecond float64      `json:"requests_per_second"`
	StaleReads        jsonDuration `json:"stale_reads,omitempty"`
	TargetKey         string       `json:"target_key,omitempty"`
	Seed              int64        `json:"seed"`
}

// MarshalJSON writes the /_mock/faults shape.
func (f Faults) MarshalJSON() ([]byte, error) {
	return json.Marshal(faultsJSON{
		f.DuplicateCopies, f.RandomCopies, jsonDuration(f.ReorderDelay), f.DropRate, f.Error5xxRate, f.RateLimitRate,
		jsonDuration(f.RetryAfter), jsonDuration(f.Latency), f.RequestsPerSecond, jsonDuration(f.StaleReads),
		f.TargetKey, f.Seed,
	})
}

// UnmarshalJSON reads the /_mock/faults shape; absent fields are zero.
func (f *Faults) UnmarshalJSON(b []byte) error {
	var j faultsJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*f = Faults{j.DuplicateCopies, j.RandomCopies, time.Duration(j.ReorderDelay), j.DropRate, j.Error5xxRate,
		j.RateLimitRate, time.Duration(j.RetryAfter), time.Duration(j.Latency), j.RequestsPerSecond,
		time.Duration(j.StaleReads), j.TargetKey, j.Seed}
	return nil
}

// Validate reports a knob outside its range.
func (f Faults) Validate() error {
	var errs []error
	rates := []struct {
		name string
		p    float64
	}{{"drop_rate", f.DropRate}, {"error_5xx_rate", f.Error5xxRate}, {"rate_limit_rate", f.RateLimitRate}}
	for _, r := range rates {
		if r.p < 0 || r.p > 1 {
			errs = append(errs, fmt.Errorf("%s must be between 0 and 1, got %v", r.name, r.p))
		}
	}
	if f.DuplicateCopies < 0 || f.RandomCopies < 0 || f.ReorderDelay < 0 || f.RetryAfter < 0 || f.Latency < 0 ||
		f.RequestsPerSecond < 0 || f.StaleReads < 0 {
		errs = append(errs, errors.New("counts, durations and requests_per_second must not be negative"))
	}
	return errors.Join(errs...)
}

type jsonDuration time.Duration

func (d jsonDuration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

func (d *jsonDuration) UnmarshalJSON(b []byte) error {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	switch v := v.(type) {
	case string:
		parsed, err := time.ParseDuration(v)
		if err != nil {
			return err
		}
		*d = jsonDuration(parsed)
	case float64:
		*d = jsonDuration(v * float64(time.Second))
	case nil:
		*d = 0
	default:
		return fmt.Errorf("duration must be a string like \"250ms\" or a number of seconds")
	}
	return nil
}

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

// Dice returns the random source a fake throws f's dice with: seeded by
// f.Seed (the same seed, the same choices), else random. The fake Kinde
// uses it too.
func (f Faults) Dice() *rand.Rand {
	seed := uint64(f.Seed)
	if seed == 0 {
		seed = rand.Uint64()
	}
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

// Limiter returns the token bucket of f.RequestsPerSecond (a second's
// worth of burst), or nil when there is no rate limit.
func (f Faults) Limiter() *rate.Limiter {
	if f.RequestsPerSecond <= 0 {
		return nil
	}
	return rate.NewLimiter(rate.Limit(f.RequestsPerSecond), max(1, int(math.Ceil(f.RequestsPerSecond))))
}

// Faults returns the current fault knobs.
func (s *Server) Faults() Faults {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.faults
}

// targets reports whether the request faults apply to a request made with key.
func (f Faults) targets(key string) bool { return f.TargetKey == "" || f.TargetKey == key }

// injectFault decides, before a request made with key is handled, whether it
// fails. A failed request changes nothing, so a client's retry is always safe.
func (s *Server) injectFault(key string) *stripeError {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.faults
	if !f.targets(key) {
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
