package stripe

import (
	"slices"
	"time"
)

// change is one write to a customer or subscription: when it happened (wall
// clock) and the object as it was before (nil when it was created).
type change struct {
	at     time.Time
	before any // *customer or *subscription
}

// staleWindow is how long changes are remembered for Faults.StaleReads.
const staleWindow = 10 * time.Minute

// changed records that the object with id is about to change (or was just
// created, before == nil). Called with s.mu held, before the write shows.
// Only while Faults.StaleReads is on: changes made before it was turned on
// are not seen stale.
func (s *Server) changed(id string, before any) {
	if s.faults.Get().StaleReads <= 0 {
		return
	}
	now := time.Now()
	h := slices.DeleteFunc(s.history[id], func(c change) bool { return now.Sub(c.at) > staleWindow })
	s.history[id] = append(h, change{at: now, before: before})
}

// staleView makes the tables show every customer and subscription as it was
// at cutoff, as a lagging read replica would, and returns the function that
// puts the current state back. Called with s.mu held; the caller restores
// before unlocking.
func (s *Server) staleView(cutoff time.Time) (restore func()) {
	past := map[string]any{}
	for id, changes := range s.history {
		// The state at cutoff is what the first later change found.
		for _, c := range changes {
			if c.at.After(cutoff) {
				past[id] = c.before
				break
			}
		}
	}
	if len(past) == 0 {
		return func() {}
	}
	restoreCustomers := viewAt(&s.customers, past)
	restoreSubs := viewAt(&s.subs, past)
	return func() { restoreCustomers(); restoreSubs() }
}

// viewAt swaps into t the past version of every row named in past (hiding
// rows that did not exist yet) and returns the function that undoes it.
func viewAt[T row](t *table[T], past map[string]any) (restore func()) {
	byID, rows := t.byID, t.rows
	t.byID = make(map[string]T, len(byID))
	t.rows = make([]T, 0, len(rows))
	for _, v := range rows {
		old, ok := past[v.id()]
		if !ok {
			t.byID[v.id()], t.rows = v, append(t.rows, v)
			continue
		}
		if prev, isT := old.(T); isT && old != nil {
			t.byID[v.id()], t.rows = prev, append(t.rows, prev)
		}
	}
	return func() { t.byID, t.rows = byID, rows }
}
