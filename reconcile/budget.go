package reconcile

import (
	"context"
	"math"
	"sync"
	"time"
)

// Budget sizes the requests a process keeps in flight to a provider: the
// requests per second it may send (its client's rate limit) and how long
// the provider's recent requests took to answer. By Little's law a
// provider answering in Latency is kept busy at Rate by Rate × Latency
// requests in flight: fewer leave the budget unused (throughput is then
// in flight ÷ latency, whatever the rate), more only wait for the
// client's rate limiter.
type Budget struct {
	Rate    float64       // requests per second; 0 = unknown
	Latency time.Duration // recent round trip, not counting waits for the rate limit; 0 = none measured yet
}

const (
	// inFlightHeadroom is how much more than Rate × Latency is kept in
	// flight: latencies vary around their average, and a slot that waits
	// for a slow answer must not leave the rate unused.
	inFlightHeadroom = 1.25
	// assumedLatency stands for the latency until the first answer: a
	// generous guess, since requests beyond the need only wait for the
	// rate limiter, while too few would starve the first second.
	assumedLatency = time.Second
)

// InFlight returns how many requests keep b's rate busy at b's latency,
// with headroom (a quarter more, plus one), within [1, bound]; bound when
// the rate is unknown.
func (b Budget) InFlight(bound int) int {
	if b.Rate <= 0 || math.IsNaN(b.Rate) {
		return max(bound, 1)
	}
	lat := b.Latency
	if lat <= 0 {
		lat = assumedLatency
	}
	n := math.Ceil(b.Rate*lat.Seconds()*inFlightHeadroom) + 1
	if n >= float64(bound) {
		return max(bound, 1)
	}
	return max(int(n), 1)
}

// latencyWeight is each answer's weight in LatencyMeter's average: about
// ten answers follow a change of the provider's latency.
const latencyWeight = 0.1

// LatencyMeter keeps an exponentially weighted moving average of a
// provider's round trips. A client measures below its rate limiter (from
// sending to the answer's headers), so the average is the provider's
// latency: a fetch's whole duration would include the wait for the rate
// limit, and sizing by it would grow the requests in flight without end
// (more in flight, longer waits, more in flight). Safe for concurrent
// use; the zero value is ready.
type LatencyMeter struct {
	mu   sync.Mutex
	avg  float64 // nanoseconds
	seen bool
}

// Observe adds one round trip.
func (m *LatencyMeter) Observe(d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.seen {
		m.avg, m.seen = float64(d), true
		return
	}
	m.avg += latencyWeight * (float64(d) - m.avg)
}

// Latency returns the average; 0 before the first round trip.
func (m *LatencyMeter) Latency() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	return time.Duration(m.avg)
}

// slots holds the worker's fetch slots: each provider has at most its
// Budget's InFlight, and all providers together at most bound. Waiters
// are served in arrival order, each as soon as its provider has room: one
// provider at its limit never holds up another's jobs.
type slots struct {
	mu      sync.Mutex
	bound   int
	budget  func(provider string) Budget
	active  map[string]int
	total   int
	waiting []*slotWaiter
}

type slotWaiter struct {
	provider string
	ready    chan struct{}
	granted  bool
}

func newSlots(bound int, budget func(provider string) Budget) *slots {
	return &slots{bound: bound, budget: budget, active: map[string]int{}}
}

// limit is how many of provider's requests may be in flight now.
func (s *slots) limit(provider string) int { return s.budget(provider).InFlight(s.bound) }

// acquire waits for a slot of provider's; an error (ctx's) means none was
// taken. A slot taken must be given back with release.
func (s *slots) acquire(ctx context.Context, provider string) error {
	s.mu.Lock()
	w := &slotWaiter{provider: provider, ready: make(chan struct{})}
	s.waiting = append(s.waiting, w)
	s.grant()
	s.mu.Unlock()
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if w.granted {
		return nil // granted as ctx ended: the caller sees ctx and gives it back
	}
	for i, o := range s.waiting {
		if o == w {
			s.waiting = append(s.waiting[:i], s.waiting[i+1:]...)
			break
		}
	}
	return ctx.Err()
}

// release gives back a slot of provider's.
func (s *slots) release(provider string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.active[provider]--
	s.total--
	s.grant()
}

// grant hands free slots to the waiters, in order, skipping those whose
// provider is at its limit. Called with mu held.
func (s *slots) grant() {
	kept := s.waiting[:0]
	full := map[string]bool{}
	for _, w := range s.waiting {
		if s.total < s.bound && !full[w.provider] && s.active[w.provider] < s.limit(w.provider) {
			s.active[w.provider]++
			s.total++
			w.granted = true
			close(w.ready)
			continue
		}
		full[w.provider] = true
		kept = append(kept, w)
	}
	clear(s.waiting[len(kept):])
	s.waiting = kept
}

// of reports provider's limit and slots taken.
func (s *slots) of(provider string) FetchSlots {
	s.mu.Lock()
	defer s.mu.Unlock()
	return FetchSlots{Provider: provider, Limit: s.limit(provider), InFlight: s.active[provider]}
}

// inFlight is how many slots are taken.
func (s *slots) inFlight() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total
}

// capacity is how many jobs the slots can run at once for providers.
func (s *slots) capacity(providers []string) int {
	n := 0
	for _, p := range providers {
		n += s.limit(p)
	}
	return min(max(n, 1), s.bound)
}
