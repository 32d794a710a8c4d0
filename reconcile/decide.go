package reconcile

import (
	"fmt"
	"strings"
	"time"
)

// Grant tops an account's allowance for one period up to Allowance, once
// per (account, period, plan, allowance); or, with Meter set, one metered
// feature's allowance, once per (account, meter, period, allowance).
type Grant struct {
	// Meter is the metered feature topped up; "" is the default meter
	// (the plan's allowance, as before features).
	Meter string
	Plan  string
	// Source names what granted a meter's allowance (plan:pro,
	// stripe:…, kinde:…); empty for the default meter.
	Source      string
	Allowance   int64
	PeriodStart time.Time
	PeriodEnd   time.Time
}

// Key is the ledger entry key that makes the grant happen at most once.
// It names the allowance: the same plan can be topped up to a larger
// allowance within one period (more seats bought mid-period), and that
// top-up is a grant of its own. The top-up is computed from what the
// period already holds, so a repeat of any earlier target adds nothing.
// The default meter's key is unchanged from before features
// (grant:{account}:{period_start}:{plan}:{allowance}); a named meter's is
// grant.{meter}:{account}:{period_start}:{allowance}, which no default
// key can equal (a feature key holds no colon).
func (g Grant) Key(accountID int64) string {
	if g.Meter != "" {
		return fmt.Sprintf("grant.%s:%d:%s:%d", g.Meter, accountID, g.PeriodStart.UTC().Format(time.RFC3339), g.Allowance)
	}
	return fmt.Sprintf("grant:%d:%s:%s:%d", accountID, g.PeriodStart.UTC().Format(time.RFC3339), g.Plan, g.Allowance)
}

// TopUp returns what the grant adds when the period already holds granted:
// the difference to the allowance, never negative (no claw-back).
func (g Grant) TopUp(granted int64) int64 { return max(g.Allowance-granted, 0) }

// Decision is what applying a snapshot to an account should do.
type Decision struct {
	Result Result
	Next   Account // the state to write; meaningful unless Result is stale or ignored
	Grant  *Grant  // nil when nothing may be granted
	// Meters are the metered features' grants for the period (each with
	// Meter set): given exactly when Grant is (the same rules: once per
	// period, never clawed back, waiting while payment is).
	Meters []Grant
	// Outcome says in words what happened (the grant is added by Describe).
	Outcome string
	// Unmapped names the prices (the first ref of each item, keyed by the
	// customer's connected account as Connected keys ids: acct_X/price_Y)
	// of the subscriptions that keep their plan when none of them maps to a plan:
	// the account is frozen (ignored) until the plans file maps one, so the
	// caller alerts and counts them. Empty otherwise.
	Unmapped []string
}

// Decide works out what applying snap, observed at observedAt, does to cur.
// It is pure: Decision.Decide calls it on the account the store read
// under its row lock, and forms the whole write from it.
//
// The plan is the best plan any item of the subscriptions that keep their
// plan maps to (see choose); the period is that item's; a deleted customer,
// or one with no subscription keeping a plan, is on the default plan for
// the calendar month. A subscription that is not paid up keeps its plan
// and its account's period but is granted nothing new (see grantFor).
func Decide(cur Account, snap Snapshot, plans *Plans, observedAt time.Time) Decision {
	if !cur.ObservedAt.IsZero() && !observedAt.After(cur.ObservedAt) {
		return Decision{Result: ResultStale, Next: cur,
			Outcome: fmt.Sprintf("stale: a newer snapshot (observed %s) is already applied", cur.ObservedAt.UTC().Format(time.RFC3339Nano))}
	}
	c := choose(snap, plans)
	if c.unmapped != nil {
		return Decision{Result: ResultIgnored, Next: cur, Unmapped: c.unmapped.refs,
			Outcome: c.unmapped.describe()}
	}
	next := accountFor(cur, snap, c, observedAt)
	next.Entitlements = cur.Entitlements
	if !snap.KeepEntitlements || snap.Deleted {
		next.Entitlements = plans.Mapped(snap.Entitlements)
	}
	next.Features = ResolveFeatures(plans, c.plans, next.Entitlements)
	grant, note := grantFor(cur, &next, c, plans)
	ch := Decision{Result: ResultUnchanged, Next: next, Grant: grant, Meters: meterGrants(next, grant)}
	if cur.ObservedAt.IsZero() || !sameState(cur, next) {
		ch.Result = ResultApplied
	}
	ch.Outcome = describeChange(cur, next)
	if snap.Deleted && cur.Status != StatusDeleted {
		ch.Outcome = fmt.Sprintf("customer deleted at %s: %s", snap.Provider, ch.Outcome)
	}
	ch.Outcome += note
	return ch
}

// accountFor returns cur as the choice c makes it: the deciding
// subscription's id, status and cancellation, the deciding item's period
// (the calendar month of observedAt when there is none, or on the default
// plan).
func accountFor(cur Account, snap Snapshot, c choice, observedAt time.Time) Account {
	next := cur
	next.Provider, next.CustomerID = snap.Provider, snap.CustomerID
	next.UserRef, next.Email = snap.UserRef, snap.Email
	if snap.UserRefFromEvents && snap.UserRef == "" {
		next.UserRef = cur.UserRef // the provider's reads never carry it
	}
	next.Plan, next.Status, next.SubscriptionID = c.plan.Name, c.sub.Status, c.sub.ID
	next.CancelAtPeriodEnd = c.sub.CancelAtPeriodEnd
	next.PeriodStart, next.PeriodEnd = periodOf(c, observedAt)
	if snap.Deleted {
		next.Status, next.SubscriptionID, next.CancelAtPeriodEnd = StatusDeleted, "", false
	}
	next.ObservedAt = observedAt
	return next
}

// periodOf is the period the choice c puts an account in: the deciding
// item's, or the calendar month of observedAt when there is none (or on
// the default plan).
func periodOf(c choice, observedAt time.Time) (start, end time.Time) {
	if !c.kept || c.item.PeriodStart.IsZero() {
		return calendarMonth(observedAt)
	}
	return c.item.PeriodStart, c.item.PeriodEnd
}

// StatusDeleted is the status an account records when its provider
// deleted the customer.
const StatusDeleted = "deleted"

// choice is what a snapshot puts the account on.
type choice struct {
	plan Plan
	// sub is the deciding subscription; with none keeping its plan, the
	// newest subscription (for its id and status), or zero without any.
	sub Subscription
	// item is the deciding item (whose price chose the plan and whose
	// period is the account's); zero unless kept.
	item Item
	// kept: a subscription keeps its plan and item decided it.
	kept bool
	// unmapped is set when subscriptions keep their plan but no item of
	// theirs maps to a plan: nothing can be applied.
	unmapped *unmappedPrices
	// plans are the plans whose features the account has: the deciding
	// plan first, then every other plan an item of a subscription that
	// keeps its plan maps to (two live subscriptions both count); the
	// default plan alone when none keeps its plan.
	plans []string
}

// candidate is one mapped item of a subscription that keeps its plan.
type candidate struct {
	plan  Plan
	sub   Subscription
	item  Item
	grant int64 // what a paid period grants (allowance and seats)
}

// choose picks the plan: the best candidate among every item of every
// subscription that keeps its plan (items mapping to no plan are ignored
// when any maps). A deleted customer, or one with no subscription keeping
// its plan, gets the default plan.
func choose(snap Snapshot, plans *Plans) choice {
	def := choice{plan: plans.Default(), plans: []string{plans.Default().Name}}
	if snap.Deleted {
		return def
	}
	var best *candidate
	var mapped []string
	account, _ := SplitConnected(snap.CustomerID)
	unmapped := unmappedPrices{account: account}
	keeping := false
	for _, sub := range snap.Subscriptions {
		if !plans.Keeps(sub) {
			continue
		}
		keeping = true
		for _, item := range sub.Items {
			pl, ok := plans.ForItem(snap.Provider, account, item)
			if !ok {
				unmapped.add(item)
				continue
			}
			mapped = append(mapped, pl.Name)
			c := candidate{plan: pl, sub: sub, item: item, grant: pl.grantFor(item.Quantity, false)}
			if best == nil || better(c, *best) {
				best = &c
			}
		}
	}
	switch {
	case best != nil:
		return choice{plan: best.plan, sub: best.sub, item: best.item, kept: true, plans: append([]string{best.plan.Name}, mapped...)}
	case keeping:
		return choice{unmapped: &unmapped}
	}
	if newest, ok := newestOf(snap.Subscriptions); ok {
		def.sub = newest
	}
	return def
}

// better reports whether a is a better plan than b: a ranked plan beats an
// unranked one, and the higher rank wins; otherwise (both unranked, or the
// same rank) the larger paid grant (allowance plus seats) wins; at a tie
// the newer subscription wins, and within one subscription the earlier
// item.
func better(a, b candidate) bool {
	ra, rb := a.plan.Rank, b.plan.Rank
	switch {
	case ra != nil && rb == nil:
		return true
	case ra == nil && rb != nil:
		return false
	case ra != nil && *ra != *rb:
		return *ra > *rb
	case a.grant != b.grant:
		return a.grant > b.grant
	}
	return a.sub.Created.After(b.sub.Created)
}

// newestOf returns the most recently created subscription (the first of
// equals: providers list newest first).
func newestOf(subs []Subscription) (Subscription, bool) {
	if len(subs) == 0 {
		return Subscription{}, false
	}
	newest := subs[0]
	for _, s := range subs[1:] {
		if s.Created.After(newest.Created) {
			newest = s
		}
	}
	return newest, true
}

// grantFor returns the grant for next, and adjusts next's period while
// payment is awaited. A subscription that keeps its plan but is not paid
// up (policy grant_waits_for_payment) is granted nothing new, and the
// account keeps the period it had (the one last granted), so its balance
// holds; note then says which period waits. When the subscription is paid
// up again its period is granted, once (the grant is keyed by period
// start). A trialing subscription is granted the plan's trial allowance.
func grantFor(cur Account, next *Account, c choice, plans *Plans) (g *Grant, note string) {
	if c.kept && plans.waitsForPayment(c.sub) {
		waiting := next.PeriodStart
		if !cur.ObservedAt.IsZero() && !cur.PeriodStart.IsZero() {
			next.PeriodStart, next.PeriodEnd = cur.PeriodStart, cur.PeriodEnd
		}
		if cur.ObservedAt.IsZero() || !waiting.Equal(next.PeriodStart) {
			note = fmt.Sprintf("; %s is %s: the period from %s is granted once it is paid",
				next.SubscriptionID, describeUnpaid(c.sub), waiting.UTC().Format(time.DateOnly))
		}
		return nil, note
	}
	trial := c.kept && c.sub.Status == "trialing"
	return &Grant{Plan: c.plan.Name, Allowance: c.plan.grantFor(c.item.Quantity, trial),
		PeriodStart: next.PeriodStart, PeriodEnd: next.PeriodEnd}, ""
}

// meterGrants returns the period's grant of each metered feature the
// account has, when the default meter is granted (grant not nil): the
// same period, the feature's allowance, named by its source.
func meterGrants(next Account, grant *Grant) []Grant {
	if grant == nil {
		return nil
	}
	var gs []Grant
	for _, f := range next.Features {
		if f.Type == FeatureMetered && f.Limit != nil {
			gs = append(gs, Grant{Meter: f.Key, Plan: next.Plan, Source: f.Source, Allowance: *f.Limit,
				PeriodStart: grant.PeriodStart, PeriodEnd: grant.PeriodEnd})
		}
	}
	return gs
}

// Grants returns every grant of the change: the default meter's first
// (when there is one), then each metered feature's. The store writes them
// in this order (Decision.Decide forms their rows) and Done is handed what
// each added.
func (c Decision) Grants() []Grant {
	var gs []Grant
	if c.Grant != nil {
		gs = append(gs, *c.Grant)
	}
	return append(gs, c.Meters...)
}

func describeUnpaid(sub Subscription) string {
	if sub.CollectionPaused {
		return sub.Status + " with collection paused"
	}
	return sub.Status
}

// unmappedPrices collects the items that map to no plan.
type unmappedPrices struct {
	// account is the customer's connected account, "" for the
	// platform's own: a price id means something only in its account.
	account string
	refs    []string // the first ref of each item that has one, keyed by account (Connected)
	names   []string // each item's refs (and product's plan), for the outcome
}

func (u *unmappedPrices) add(it Item) {
	if len(it.PriceRefs) > 0 {
		u.refs = append(u.refs, Connected(u.account, it.PriceRefs[0]))
	}
	name := describeRefs(it.PriceRefs)
	if it.ProductPlan != "" {
		name += fmt.Sprintf(" (product %s: %s %s)", it.Product, ProductPlanKey, it.ProductPlan)
	}
	u.names = append(u.names, name)
}

func (u *unmappedPrices) describe() string {
	of := ""
	if u.account != "" {
		of = " of connected account " + u.account
	}
	switch len(u.names) {
	case 0:
		return "ignored: the current subscription has no priced item"
	case 1:
		return fmt.Sprintf("ignored: price %s%s maps to no plan", u.names[0], of)
	}
	return fmt.Sprintf("ignored: prices %s%s map to no plan", strings.Join(u.names, ", "), of)
}

// Writes reports whether the change writes the account and may grant:
// only a snapshot newer than the account's, which maps to a plan, does.
func (c Decision) Writes() bool {
	return c.Result == ResultApplied || c.Result == ResultUnchanged
}

// Done returns what applying the change to cur did, once what each grant
// added is known (granted[i] is what Grants()[i] added; missing
// entries added nothing): an otherwise unchanged account whose ledger
// moved (a new period, or a grant a crash lost) counts as applied.
func (c Decision) Done(cur Account, granted ...int64) Outcome {
	var def int64
	var meters []string
	var moved bool
	for i, g := range c.Grants() {
		if i >= len(granted) || granted[i] <= 0 {
			continue
		}
		moved = true
		if g.Meter == "" {
			def = granted[i]
		} else {
			meters = append(meters, fmt.Sprintf("%s +%d", g.Meter, granted[i]))
		}
	}
	text := c.Describe(def)
	if len(meters) > 0 {
		sep := ", "
		if def == 0 && c.Result == ResultUnchanged {
			text, sep = "", ""
		}
		text += sep + "granted " + strings.Join(meters, ", ")
	}
	out := Outcome{AccountID: cur.ID, Result: c.Result, Text: text, Granted: def, Before: cur, After: c.Next,
		Unmapped: c.Unmapped}
	if moved {
		out.Result = ResultApplied
	}
	return out
}

// Describe returns the readable outcome once the default grant's top-up
// is known.
func (c Decision) Describe(granted int64) string {
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
	parts = append(parts, describeFeatures(cur.Features, next.Features)...)
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
		return "no current subscription"
	}
	return s
}

func titled(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
