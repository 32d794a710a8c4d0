package reconcile

import (
	"context"
	"strings"
	"sync"
	"time"
)

// listedPage is one page of the listing on its way to being applied, or a
// split of a part (split true), which reaches the applier before any page
// of the part it gives.
type listedPage struct {
	part  int
	snaps []Snapshot
	next  string    // the part's cursor after the page (after a split: what the part keeps)
	more  bool      // the part goes on after the page
	at    time.Time // observed: the database time taken before its list call

	split       bool
	given       int    // the part split off
	givenCursor string // where it starts
}

// parallelism is how many parts a sweep lists at once: limit, read again
// after every page (it follows the latency), within bound listers.
type parallelism struct {
	bound int
	limit func() int
}

// parallel returns the sweep's parallelism: pinned by Parallel, else
// following the Splitter's ListBudget, else one part (a Lister that
// cannot split).
func (s *Sweeper) parallel() parallelism {
	splitter, ok := s.cfg.Lister.(Splitter)
	switch {
	case s.cfg.Parallel > 0:
		n := s.cfg.Parallel
		return parallelism{bound: n, limit: func() int { return n }}
	case !ok:
		return parallelism{bound: 1, limit: func() int { return 1 }}
	case splitter.ListBudget().Rate <= 0:
		return parallelism{bound: DefaultSweepParallel, limit: func() int { return DefaultSweepParallel }}
	}
	return parallelism{bound: MaxSweepParallel, limit: func() int {
		// A part's page is its database time (taken before the list call)
		// and then the list call: both keep a part from its next request.
		b := splitter.ListBudget()
		b.Latency += s.pageTime.Latency()
		return b.InFlight(MaxSweepParallel)
	}}
}

// list lists the parts of a listing (cursors), at most parallel().limit
// at once, and sends their pages to pages. A lister whose part ends takes
// a part not begun, or waits for one to be split off a running part: each
// running part's lister, after a page, splits what remains of it when
// fewer parts than the limit are running or queued and the Lister is a
// Splitter, and gives its part back (to be taken again) when more are
// running than the limit. It returns when every part has ended, or at the
// first failure (ctx is then done too).
func (s *Sweeper) list(ctx context.Context, cursors []string, pages chan<- listedPage) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	par := s.parallel()
	q := newPartQueue(cursors, par.limit)
	defer context.AfterFunc(ctx, q.stop)()
	splitter, _ := s.cfg.Lister.(Splitter)
	var wg sync.WaitGroup
	for range par.bound {
		wg.Go(func() {
			for {
				p, ok := q.take()
				if !ok {
					return
				}
				yielded, err := s.listPart(ctx, q, splitter, p, pages)
				if !yielded {
					q.finish()
				}
				if err != nil {
					cancel(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return context.Cause(ctx)
}

// listPart lists one part to its end, or until it gives the part back
// (yielded) because more parts run than the limit.
func (s *Sweeper) listPart(ctx context.Context, q *partQueue, splitter Splitter, p listPart, pages chan<- listedPage) (yielded bool, _ error) {
	cursor := p.cursor
	for {
		// The page's time, taken before its list call: the snapshots are
		// at least as fresh.
		began := time.Now()
		at, err := s.cfg.Store.Now(ctx)
		if err != nil {
			return false, err
		}
		s.pageTime.Observe(time.Since(began))
		snaps, next, more, err := s.cfg.Lister.ListPage(ctx, cursor)
		if err != nil {
			return false, err
		}
		if err := send(ctx, pages, listedPage{part: p.id, snaps: snaps, next: next, more: more, at: at}); err != nil {
			return false, err
		}
		if !more {
			return false, nil
		}
		cursor = next
		if q.yield(listPart{id: p.id, cursor: next}) {
			return true, nil // too many parts running: listed again when one ends
		}
		if splitter == nil || !q.wanted() {
			continue
		}
		kept, given, err := splitter.Split(ctx, next)
		if err != nil {
			return false, err
		}
		if cursor = kept; given == "" {
			continue
		}
		id := q.newID()
		if err := send(ctx, pages, listedPage{part: p.id, next: cursor, split: true, given: id, givenCursor: given}); err != nil {
			return false, err
		}
		q.add(listPart{id: id, cursor: given})
	}
}

func send(ctx context.Context, pages chan<- listedPage, p listedPage) error {
	select {
	case pages <- p:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// listPart is a part of the listing not yet begun.
type listPart struct {
	id     int
	cursor string
}

// partQueue hands parts to the listers: the parts the run starts (or
// resumes) with, then those split off running parts, at most limit()
// running at once.
type partQueue struct {
	mu      sync.Mutex
	cond    sync.Cond
	limit   func() int
	queue   []listPart
	running int // parts being listed
	ids     int // parts numbered so far
	stopped bool
}

func newPartQueue(cursors []string, limit func() int) *partQueue {
	q := &partQueue{limit: limit}
	q.cond.L = &q.mu
	for _, c := range cursors {
		q.queue = append(q.queue, listPart{id: q.ids, cursor: c})
		q.ids++
	}
	return q
}

// take returns the next part to list once fewer than the limit run;
// false when there is none and none can come (no part is running), or
// when the listing stops.
func (q *partQueue) take() (listPart, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for !q.stopped {
		if len(q.queue) > 0 && q.running < q.limit() {
			p := q.queue[0]
			q.queue = q.queue[1:]
			q.running++
			return p, true
		}
		if len(q.queue) == 0 && q.running == 0 {
			return listPart{}, false
		}
		q.cond.Wait()
	}
	return listPart{}, false
}

// wanted reports whether fewer parts are running or waiting than the
// limit: a running part is then worth splitting.
func (q *partQueue) wanted() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.running+len(q.queue) < q.limit()
}

// yield gives a running part back, to be listed from p.cursor when a
// lister takes it, if more parts run than the limit (the latency fell);
// it reports whether it did. Else it wakes the listers that wait, in case
// the limit grew.
func (q *partQueue) yield(p listPart) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.running <= q.limit() {
		q.cond.Broadcast()
		return false
	}
	q.running--
	q.queue = append(q.queue, p)
	q.cond.Broadcast()
	return true
}

func (q *partQueue) newID() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.ids++
	return q.ids - 1
}

func (q *partQueue) add(p listPart) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.queue = append(q.queue, p)
	q.cond.Signal()
}

func (q *partQueue) finish() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.running--
	q.cond.Broadcast()
}

func (q *partQueue) stop() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.stopped = true
	q.cond.Broadcast()
}

// runCursor is where a run's listing stands, as sweep_runs.cursor keeps
// it: the cursor of each part not ended, after its last applied page, one
// a line, in the order the parts began. When the last part ends, its own
// cursor stays: resuming there lists nothing, where an empty cursor would
// list everything again.
type runCursor struct {
	order   []int
	cursors map[int]string
}

func parseRunCursor(s string) *runCursor {
	c := &runCursor{cursors: map[int]string{}}
	for i, part := range strings.Split(s, "\n") {
		c.set(i, part)
	}
	return c
}

// parts returns the cursors of the parts, in order.
func (c *runCursor) parts() []string {
	parts := make([]string, 0, len(c.order))
	for _, id := range c.order {
		parts = append(parts, c.cursors[id])
	}
	return parts
}

func (c *runCursor) String() string { return strings.Join(c.parts(), "\n") }

// set records where a part stands, adding it when new.
func (c *runCursor) set(id int, cursor string) {
	if _, ok := c.cursors[id]; !ok {
		c.order = append(c.order, id)
	}
	c.cursors[id] = cursor
}

// finish records that a part ended at cursor.
func (c *runCursor) finish(id int, cursor string) {
	if len(c.order) == 1 {
		c.set(id, cursor)
		return
	}
	delete(c.cursors, id)
	for i, o := range c.order {
		if o == id {
			c.order = append(c.order[:i], c.order[i+1:]...)
			break
		}
	}
}
