package reconcile

import (
	"fmt"
	"strings"
	"time"
)

// Result classifies what one reconcile did.
type Result string

const (
	ResultApplied   Result = "applied"   // the account changed
	ResultUnchanged Result = "unchanged" // the account already matched
	ResultStale     Result = "stale"     // a newer snapshot was already applied
	ResultIgnored   Result = "ignored"   // permanent: nothing can be applied
	ResultRetry     Result = "retry"     // transient failure, will retry
	ResultDead      Result = "dead"      // transient failures exhausted the attempts
)

// Grant tops an account's allowance for one period up to Allowance, once
// per (account, period, plan).
type Grant struct {
	Plan        string
	Allowance   int64
	PeriodStart time.Time
	PeriodEnd   time.Time
}

// Key is the ledger entry key that makes the grant happen at most once.
func (g Grant) Key(accountID int64) string {
	return fmt.Sprintf("grant:%d:%s:%s", accountID, g.PeriodStart.UTC().Format(time.RFC3339), g.Plan)
}

// TopUp returns what the grant adds when the period already holds granted:
// the difference to the allowance, never negative (no claw-back).
func (g Grant) TopUp(granted int64) int64 { return max(g.Allowance-granted, 0) }

// Change is what applying a snapshot to an account should do.
type Change struct {
	Result Result
	Next   Account // the state to write; meaningful unless Result is stale or ignored
	Grant  *Grant  // nil when nothing may be granted
	// Outcome says in words what happened (the grant is added by Describe).
	Outcome string
}

// Decide works out what applying snap, observed at observedAt, does to cur.
// It is pure: the store calls it inside the transaction that holds cur's
// row lock, and writes what it returns.
func Decide(cur Account, snap Snapshot, plans *Plans, observedAt time.Time) Change {
	if !cur.ObservedAt.IsZero() && !observedAt.After(cur.ObservedAt) {
		return Change{Result: ResultStale, Next: cur,
			Outcome: fmt.Sprintf("stale: a newer snapshot (observed %s) is already applied", cur.ObservedAt.UTC().Format(time.RFC3339Nano))}
	}
	view := tempView(snap)
	plan := plans.Default()
	if view.live {
		p, ok := plans.ForPrice(snap.Provider, view.refs)
		if !ok {
			return Change{Result: ResultIgnored, Next: cur,
				Outcome: fmt.Sprintf("ignored: price %s maps to no plan", describeRefs(view.refs))}
		}
		plan = p
	}
	next := cur
	next.Provider, next.CustomerID = snap.Provider, snap.CustomerID
	next.UserRef, next.Email = snap.UserRef, snap.Email
	next.Plan, next.Status, next.SubscriptionID = plan.Name, view.status, view.id
	next.CancelAtPeriodEnd = view.cancel
	next.PeriodStart, next.PeriodEnd = view.start, view.end
	if !view.live || view.start.IsZero() {
		next.PeriodStart, next.PeriodEnd = calendarMonth(observedAt)
	}
	next.ObservedAt = observedAt

	ch := Change{Result: ResultUnchanged, Next: next,
		Grant: &Grant{Plan: plan.Name, Allowance: plan.Allowance, PeriodStart: next.PeriodStart, PeriodEnd: next.PeriodEnd}}
	if cur.ObservedAt.IsZero() || !sameState(cur, next) {
		ch.Result = ResultApplied
	}
	ch.Outcome = describeChange(cur, next)
	return ch
}

// Writes reports whether the change writes the account and may grant:
// only a snapshot newer than the account's, which maps to a plan, does.
func (c Change) Writes() bool {
	return c.Result == ResultApplied || c.Result == ResultUnchanged
}

// Done returns what applying the change to cur did, once the store knows
// what the grant added: an otherwise unchanged account whose ledger moved
// (a new period, or a grant a crash lost) counts as applied.
func (c Change) Done(cur Account, granted int64) Outcome {
	out := Outcome{AccountID: cur.ID, Result: c.Result, Text: c.Describe(granted), Granted: granted, Before: cur, After: c.Next}
	if granted > 0 {
		out.Result = ResultApplied
	}
	return out
}

// Describe returns the readable outcome once the grant's top-up is known.
func (c Change) Describe(granted int64) string {
	if granted <= 0 {
		return c.Outcome
	}
	if c.Result == ResultUnchanged {
		// Only the ledger moved (a new period, or a grant a crash lost).
		return fmt.Sprintf("%s allowance granted (+%d)", titled(c.Next.Plan), granted)
	}
	return fmt.Sprintf("%s, %s allowance granted (+%d)", c.Outcome, titled(c.Next.Plan), granted)
}

func describeChange(cur, next Account) string {
	if cur.ObservedAt.IsZero() {
		return fmt.Sprintf("account created on plan %s (%s)", next.Plan, orNone(next.Status))
	}
	var parts []string
	if cur.Plan != next.Plan {
		parts = append(parts, fmt.Sprintf("plan set to %s", next.Plan))
	}
	if cur.Status != next.Status {
		parts = append(parts, fmt.Sprintf("status %s → %s", orNone(cur.Status), orNone(next.Status)))
	}
	if !cur.PeriodStart.Equal(next.PeriodStart) {
		parts = append(parts, fmt.Sprintf("period now starts %s", next.PeriodStart.UTC().Format(time.DateOnly)))
	}
	if cur.CancelAtPeriodEnd != next.CancelAtPeriodEnd {
		parts = append(parts, fmt.Sprintf("cancel at period end: %t", next.CancelAtPeriodEnd))
	}
	if cur.SubscriptionID != next.SubscriptionID && len(parts) == 0 {
		parts = append(parts, fmt.Sprintf("subscription now %s", orNone(next.SubscriptionID)))
	}
	if cur.UserRef != next.UserRef && len(parts) == 0 {
		parts = append(parts, fmt.Sprintf("user reference now %q", next.UserRef))
	}
	if cur.Email != next.Email && len(parts) == 0 {
		parts = append(parts, fmt.Sprintf("email now %q", next.Email))
	}
	if len(parts) == 0 {
		return fmt.Sprintf("no change: %s says plan %s (%s) now, as already applied", next.Provider, next.Plan, orNone(next.Status))
	}
	return strings.Join(parts, ", ")
}

func describeRefs(refs []string) string {
	if len(refs) == 0 {
		return "(none)"
	}
	return strings.Join(refs, " / ")
}

func orNone(s string) string {
	if s == "" {
		return "no subscription"
	}
	return s
}

func titled(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// TEMP: compile shim, drop on merge. Reads the new Snapshot the old way (the
// newest live subscription, else the newest; all its refs; the first item's
// period) until Decide is rewritten for the plans file's policy.
type tempSnapView struct {
	live       bool
	id, status string
	refs       []string
	cancel     bool
	start, end time.Time
}

func tempView(snap Snapshot) tempSnapView {
	if len(snap.Subscriptions) == 0 {
		if snap.Deleted {
			return tempSnapView{status: "deleted"}
		}
		return tempSnapView{}
	}
	sub := snap.Subscriptions[0]
	for _, s := range snap.Subscriptions {
		if tempLive(s.Status) {
			sub = s
			break
		}
	}
	v := tempSnapView{live: tempLive(sub.Status), id: sub.ID, status: sub.Status, cancel: sub.CancelAtPeriodEnd}
	for _, it := range sub.Items {
		v.refs = append(v.refs, it.PriceRefs...)
		if v.start.IsZero() && !it.PeriodStart.IsZero() {
			v.start, v.end = it.PeriodStart, it.PeriodEnd
		}
	}
	return v
}

func tempLive(status string) bool {
	return status == "active" || status == "trialing" || status == "past_due"
}
