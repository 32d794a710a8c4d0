// Package fault holds the knobs that make billsync's fake providers
// misbehave the way real providers sometimes do: copied, reordered and
// dropped webhooks, 5xx and 429 answers, latency, a request budget, stale
// reads. Both fakes (mocks/stripe and mocks/kinde) take the same Faults, so
// a test or the demo breaks either provider with one vocabulary, and they
// mean the same in both: the webhook faults (copies, reordering, drops)
// act through the one delivery engine both fakes send with (Deliverer),
// the request faults through State.Request, and StaleReads on each fake's
// reads. The fake Kinde has one client and ignores TargetKey.
//
// It is a test double's part: it must never be wired into billsync's
// product path, and it must not import either fake.
package fault

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"golang.org/x/time/rate"
)

// Faults makes a fake misbehave the way the real provider sometimes does.
// The zero value is a well-behaved server.
type Faults struct {
	DuplicateCopies int           // each webhook delivery is sent 1+N times
	RandomCopies    int           // … plus a random 0..N more copies per delivery (seeded)
	ReorderDelay    time.Duration // each copy waits a random [0, ReorderDelay] before sending
	DropRate        float64       // probability a delivery (all its copies) is never sent
	Error5xxRate    float64       // probability an API request answers 500 api_error
	RateLimitRate   float64       // probability an API request answers 429 rate_limit
	// RetryAfter, when set, adds a Retry-After header to the fake Stripe's
	// 429s. Stripe's own 429s carry none (its docs only advise backing off),
	// so the default is none: a client must not depend on it. The fake
	// Kinde sends it as RateLimit-Reset, in seconds (default 1 s).
	RetryAfter time.Duration
	Latency    time.Duration // added to every API response
	// RequestsPerSecond is one token bucket for every API request (a
	// second's worth of burst); over it → 429. It is the old, single
	// budget: the fake Stripe models Stripe's own limits (per operation,
	// inside a global one, with Stripe-Rate-Limited-Reason) in its Limits.
	RequestsPerSecond float64
	// StaleReads makes GET requests see customers and subscriptions as they
	// were this long ago (by the wall clock): a read right after a change
	// returns the previous state, one made StaleReads later the new one. An
	// object created within the window is not found yet. The fake Kinde
	// reads its customers' agreements so.
	StaleReads time.Duration
	// TargetKey, when set, limits the request faults (Error5xxRate,
	// RateLimitRate, RequestsPerSecond, Latency, StaleReads) to requests
	// made with this API key: billsync's calls fail while a test driver on
	// another key (the fake Stripe's Options.ExtraAPIKeys) is served
	// normally. The fake Kinde has one client and ignores it.
	TargetKey string
	Seed      int64 // seeds the random choices; 0 = random seed
}

// faultsJSON is Faults on the wire of /_mock/faults: snake_case names and
// durations as Go duration strings ("250ms") or numbers of seconds.
type faultsJSON struct {
	DuplicateCopies   int      `json:"duplicate_copies"`
	RandomCopies      int      `json:"random_copies,omitempty"`
	ReorderDelay      Duration `json:"reorder_delay"`
	DropRate          float64  `json:"drop_rate"`
	Error5xxRate      float64  `json:"error_5xx_rate"`
	RateLimitRate     float64  `json:"rate_limit_rate"`
	RetryAfter        Duration `json:"retry_after"`
	Latency           Duration `json:"latency"`
	RequestsPerSecond float64  `json:"requests_per_second"`
	StaleReads        Duration `json:"stale_reads,omitempty"`
	TargetKey         string   `json:"target_key,omitempty"`
	Seed              int64    `json:"seed"`
}

// MarshalJSON writes the /_mock/faults shape.
func (f Faults) MarshalJSON() ([]byte, error) {
	return json.Marshal(faultsJSON{
		f.DuplicateCopies, f.RandomCopies, Duration(f.ReorderDelay), f.DropRate, f.Error5xxRate, f.RateLimitRate,
		Duration(f.RetryAfter), Duration(f.Latency), f.RequestsPerSecond, Duration(f.StaleReads),
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

// Duration is a duration on the fakes' control APIs (/_mock/…): a Go
// duration string ("250ms") or a number of seconds.
type Duration time.Duration

func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

func (d *Duration) UnmarshalJSON(b []byte) error {
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
		*d = Duration(parsed)
	case float64:
		*d = Duration(v * float64(time.Second))
	case nil:
		*d = 0
	default:
		return fmt.Errorf("duration must be a string like \"250ms\" or a number of seconds")
	}
	return nil
}

// Dice returns the random source a fake throws f's dice with: seeded by
// f.Seed (the same seed, the same choices), else random.
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

// Targets reports whether the request faults apply to a request made with key.
func (f Faults) Targets(key string) bool { return f.TargetKey == "" || f.TargetKey == key }
