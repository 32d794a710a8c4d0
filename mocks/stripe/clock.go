package stripe

import (
	"sync"
	"time"
)

// Clock is the fake's notion of "now", like a Stripe test clock that also
// keeps running: it starts at a chosen time, moves with the wall clock, and
// jumps forward with Advance. Every object's timestamps come from it; webhook
// signatures do not (they use the real time so receivers' tolerance holds).
type Clock struct {
	mu        sync.Mutex
	base      time.Time // fake time at realStart
	realStart time.Time
	offset    time.Duration
	stopped   bool // moves only with Advance
	nextID    int
	listeners map[int]func(now time.Time)
}

// NewClock returns a clock that reads t now and runs from there.
func NewClock(t time.Time) *Clock {
	return &Clock{base: t.Round(0), realStart: time.Now(), listeners: map[int]func(time.Time){}}
}

// NewStoppedClock returns a clock that reads t and moves only with
// Advance: timestamps then depend on what a test did, not on how fast it
// ran, so a failing property check replays exactly.
func NewStoppedClock(t time.Time) *Clock {
	c := NewClock(t)
	c.stopped = true
	return c
}

// Start makes a stopped clock run with the wall clock from what it reads
// now; a running clock is left as it is. The fake's rate limits refill
// by this clock: a stopped one refills them only with Advance.
func (c *Clock) Start() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		c.base, c.realStart, c.offset, c.stopped = c.now(), time.Now(), 0, false
	}
}

// Now returns the fake current time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now()
}

func (c *Clock) now() time.Time {
	if c.stopped {
		return c.base.Add(c.offset)
	}
	return c.base.Add(time.Since(c.realStart) + c.offset)
}

// Advance moves the clock forward by d and then lets every server using it
// catch up (renew subscriptions whose period ended). It returns the new time.
// Renewals happen only here: a period that ends by the wall clock alone (a
// month of running) is renewed at the next Advance.
func (c *Clock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	c.offset += max(d, 0)
	now := c.now()
	fns := make([]func(time.Time), 0, len(c.listeners))
	for _, fn := range c.listeners {
		fns = append(fns, fn)
	}
	c.mu.Unlock()
	// Called without the clock's lock: listeners take their server's lock and
	// read the clock.
	for _, fn := range fns {
		fn(now)
	}
	return now
}

func (c *Clock) subscribe(fn func(time.Time)) (cancel func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nextID++
	id := c.nextID
	c.listeners[id] = fn
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		delete(c.listeners, id)
	}
}

// addInterval returns anchor moved n billing intervals forward. Months are
// clamped to the month's last day like Stripe's billing cycle: a subscription
// anchored on Jan 31 renews on Feb 28 (or 29), then Mar 31.
func addInterval(anchor time.Time, interval string, count int64, n int) time.Time {
	anchor = anchor.UTC()
	steps := int(count) * n
	switch interval {
	case "day":
		return anchor.AddDate(0, 0, steps)
	case "week":
		return anchor.AddDate(0, 0, 7*steps)
	case "year":
		steps *= 12
	}
	y, m, d := anchor.Date()
	first := time.Date(y, m+time.Month(steps), 1, anchor.Hour(), anchor.Minute(), anchor.Second(), 0, time.UTC)
	lastDay := first.AddDate(0, 1, -1).Day()
	return first.AddDate(0, 0, min(d, lastDay)-1)
}
