package fault

import (
	"math/rand/v2"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// State is what a fake's faults come to at any moment: the knobs, the dice
// thrown with them and the rate limiter they set. Both fakes hold one; it
// has its own lock, so a fake may call it with or without its own held.
// The zero State has no faults.
type State struct {
	mu      sync.Mutex
	faults  Faults
	dice    *rand.Rand
	limiter *rate.Limiter
}

// Set replaces the knobs. A non-zero Seed restarts the dice, so the same
// faults with the same seed make the same choices.
func (s *State) Set(f Faults) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = f
	if f.Seed != 0 || s.dice == nil {
		s.dice = f.Dice()
	}
	s.limiter = f.Limiter()
}

// Get returns the knobs.
func (s *State) Get() Faults {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.faults
}

// Chance throws the dice: true with probability p. A p of zero or less
// throws nothing, so knobs that are off leave the sequence alone.
func (s *State) Chance(p float64) bool {
	if p <= 0 {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.chance(p)
}

// chance is Chance with s.mu held.
func (s *State) chance(p float64) bool { return p > 0 && s.roll().Float64() < p }

// Upto returns a random whole number in [0, n]; 0, and no throw, when n is
// 0 or less.
func (s *State) Upto(n int) int {
	if n <= 0 {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.roll().IntN(n + 1)
}

// Delay returns a random duration in [0, d]; 0, and no throw, when d is 0
// or less.
func (s *State) Delay(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return time.Duration(s.roll().Int64N(int64(d) + 1))
}

// Failure is what Request decided for one request.
type Failure int

const (
	NoFailure   Failure = iota
	RateLimited         // over RequestsPerSecond, or by RateLimitRate's dice: a 429
	ServerError         // by Error5xxRate's dice: a 500
)

// Request decides whether a request fails, before the fake handles it; a
// failed request must change nothing, so a client's retry is always safe.
// It also returns the knobs it decided by, for the failure's details
// (RetryAfter), so both come from one setting.
func (s *State) Request() (Failure, Faults) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.faults
	switch {
	case (s.limiter != nil && !s.limiter.Allow()) || s.chance(f.RateLimitRate):
		return RateLimited, f
	case s.chance(f.Error5xxRate):
		return ServerError, f
	}
	return NoFailure, f
}

// roll is the dice, drawn when Set never ran. Called with s.mu held.
func (s *State) roll() *rand.Rand {
	if s.dice == nil {
		s.dice = s.faults.Dice()
	}
	return s.dice
}
