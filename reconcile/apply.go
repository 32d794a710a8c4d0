package reconcile

import (
	"fmt"
	"time"
)

// PeriodLedger is one meter's ledger in one period, as the store reads it
// under the account's row lock.
type PeriodLedger struct {
	PeriodStart time.Time
	Meter       string // "" the default meter
	Granted     int64  // the grant rows' sum: what a top-up counts from
	Balance     int64  // every row's sum: the balance the app sees
	Rows        int64
}

// Ledger is an account's ledger in the periods a decision reads.
type Ledger []PeriodLedger

// Of returns the meter's figures in the period starting at start (zero
// when it has no rows).
func (l Ledger) Of(start time.Time, meter string) PeriodLedger {
	for _, p := range l {
		if p.Meter == meter && p.PeriodStart.Equal(start) {
			return p
		}
	}
	return PeriodLedger{PeriodStart: start, Meter: meter}
}

// With returns the ledger once moves are written.
func (l Ledger) With(moves ...LedgerMove) Ledger {
	out := append(Ledger(nil), l...)
	for _, m := range moves {
		i := 0
		for i < len(out) && !(out[i].Meter == m.Meter && out[i].PeriodStart.Equal(m.PeriodStart)) {
			i++
		}
		if i == len(out) {
			out = append(out, PeriodLedger{PeriodStart: m.PeriodStart, Meter: m.Meter})
		}
		out[i].Balance += m.Delta
		out[i].Rows++
		if m.Kind == LedgerGrant {
			out[i].Granted += m.Delta
		}
	}
	return out
}

// State is account a as the app sees it: its fields and the balances of
// its current period (the default meter's, and each named meter's that
// has rows).
func (l Ledger) State(a Account) AccountState {
	st := AccountState{Account: a, Balance: l.Of(a.PeriodStart, "").Balance}
	for _, p := range l {
		if p.Meter == "" || p.Rows <= 0 || !p.PeriodStart.Equal(a.PeriodStart) {
			continue
		}
		if st.Meters == nil {
			st.Meters = map[string]int64{}
		}
		st.Meters[p.Meter] = p.Balance
	}
	return st
}

// Locked is what a reconcile is decided on, read under the account's row
// lock: the account (new ones are created first, with ID set) and its
// ledger in its own period and in the Decision's Period.
type Locked struct {
	Account Account
	Ledger  Ledger
}

// LedgerRow is a ledger row to insert under its key.
type LedgerRow struct {
	LedgerMove
	PeriodEnd time.Time
	Note      string
}

// Write is the whole write of one reconcile, formed by the domain; the
// store executes it as it is, in the transaction that read its Locked
// state (river's executor forms JobSetStateIfRunningParams the same way,
// and its driver runs them).
type Write struct {
	// Account is the guarded account write (only a later observation may
	// overwrite one); nil when the account is not written (stale,
	// ignored).
	Account *Account
	// Ledger are the rows to insert, each keyed: a repeat of the same
	// reconcile reads them under the lock and forms none again.
	Ledger []LedgerRow
	// Outcome is the reconcile_log row and the caller's answer; its
	// Events is the store's to count.
	Outcome Outcome
	// EventStatus is what the customer's answered events become.
	EventStatus EventStatus
	// Actor is who the reconcile is recorded as (ActorOf).
	Actor string
	// Change is what the app is told, nil when nothing it sees changed:
	// the store numbers it (ID, Seq, Time) and names the events it answered
	// (Why.EventIDs, Why.Events).
	Change *AccountChange
}

// Moved reports whether the write moves the ledger.
func (w Write) Moved() bool { return len(w.Ledger) > 0 }

// Decider decides one reconcile of a fetched snapshot once the store has
// read the Locked state: the store reads the ledger of the account's own
// period and of Period, and executes what Decide returns, calling back
// into the domain for nothing else.
type Decider struct {
	// Period is the start of the period the snapshot puts the account in
	// (zero when it can put it in none): the only period besides the
	// account's own that Decide may grant in.
	Period time.Time

	job        Job
	snap       Snapshot
	plans      *Plans
	observedAt time.Time
}

// ImportedPrefix begins the outcome of every account an import writes
// ("imported: plan set to pro, …").
const ImportedPrefix = "imported: "

// NewDecider returns the decision of snap, observed at observedAt, for
// job's customer. A provider whose reads carry no user reference
// (UserRefFromEvents) has it from the job: its newest event's, settled on
// the queue row at intake.
func NewDecider(job Job, snap Snapshot, plans *Plans, observedAt time.Time) Decider {
	if snap.UserRefFromEvents && job.UserRef != "" {
		snap.UserRef = job.UserRef
	}
	d := Decider{job: job, snap: snap, plans: plans, observedAt: observedAt}
	if c := choose(snap, plans); c.unmapped == nil {
		d.Period, _ = periodOf(c, observedAt)
	}
	return d
}

// Decide forms the whole write of applying the decision's snapshot to
// st: the account, the grants' ledger rows (each topped up from what its
// period already holds), the outcome, and what the app is told, its before
// read under the lock and its after that plus the rows written. It is
// pure.
func (d Decider) Decide(st Locked) Write {
	cur := st.Account
	ch := Decide(cur, d.snap, d.plans, d.observedAt)
	w := Write{Actor: ActorOf(d.job)}
	if !ch.Writes() {
		w.Outcome = ch.Done(cur)
		w.EventStatus = w.Outcome.EventStatus()
		return w
	}
	next := ch.Next
	w.Account = &next
	grants := ch.Grants()
	added := make([]int64, len(grants))
	moves := make([]LedgerMove, 0, len(grants))
	for i, g := range grants {
		if added[i] = g.TopUp(st.Ledger.Of(g.PeriodStart, g.Meter).Granted); added[i] == 0 {
			continue
		}
		m := LedgerMove{Meter: g.Meter, Kind: LedgerGrant, Key: g.Key(cur.ID), Delta: added[i], Plan: g.Plan, PeriodStart: g.PeriodStart}
		moves = append(moves, m)
		w.Ledger = append(w.Ledger, LedgerRow{LedgerMove: m, PeriodEnd: g.PeriodEnd, Note: g.note()})
	}
	w.Outcome = ch.Done(cur, added...)
	if d.job.Trigger == TriggerImport && w.Outcome.Result == ResultApplied {
		// An import's writes are no drift: the log and the answered
		// events say so.
		w.Outcome.Text = ImportedPrefix + w.Outcome.Text
	}
	w.EventStatus = w.Outcome.EventStatus()
	var before *AccountState
	if !cur.ObservedAt.IsZero() {
		s := st.Ledger.State(cur)
		before = &s
	}
	if c, ok := AccountChangeOf(before, st.Ledger.With(moves...).State(next), moves,
		Why{Trigger: d.job.Trigger, Actor: w.Actor}); ok {
		w.Change = &c
	}
	return w
}

// note is the grant's ledger row note.
func (g Grant) note() string {
	if g.Meter != "" {
		return fmt.Sprintf("top up %s to %d (%s)", g.Meter, g.Allowance, g.Source)
	}
	return fmt.Sprintf("top up to %d for plan %s", g.Allowance, g.Plan)
}
