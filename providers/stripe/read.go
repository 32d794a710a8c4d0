package stripe

import (
	"bytes"
	"encoding/json"
	"slices"
	"time"

	"github.com/billsync/billsync/reconcile"
)

// The readers below work on the raw JSON of a Stripe subscription, never on
// stripe-go's typed structs: a typed struct is cut for one API version and
// silently drops a field that an older or newer version puts elsewhere (the
// typed v82 Subscription has no current_period_* at all, because API
// 2025-03-31.basil moved them onto the items). One helper per field that has
// moved; each accepts every shape seen in the wild and says "absent" with a
// false instead of handing out a zero value.

// periodOf returns the subscription's current billing period.
//
// Since API 2025-03-31 (basil) the period lives on each subscription item
// (items.data[].current_period_start/end); before it, and in payloads stored
// from older versions, it is on the subscription itself. The first item with
// both bounds wins (items of one subscription share a period unless flexible
// billing mixes intervals; billsync grants allowances by the first). ok is
// false when neither shape holds both bounds. Whether end follows start is
// checked by the caller, so a malformed period is reported, not hidden.
func periodOf(raw []byte) (start, end time.Time, ok bool) {
	for _, item := range itemsOf(raw) {
		if start, end, ok = boundsOf(item); ok {
			return start, end, true
		}
	}
	return boundsOf(raw)
}

func boundsOf(obj []byte) (start, end time.Time, ok bool) {
	start, okStart := unixAt(obj, "current_period_start")
	end, okEnd := unixAt(obj, "current_period_end")
	if !okStart || !okEnd {
		return time.Time{}, time.Time{}, false
	}
	return start, end, true
}

// priceRefsOf returns what identifies the subscription's price, most specific
// first, without duplicates: for each item in order, the price's lookup_key,
// the price id, then the legacy plan id (items still carry a plan object,
// whose id equals the price id for Prices and is the only reference in
// payloads from before Prices); finally the top-level plan that single-plan
// subscriptions of old API versions carry. Plans map any one of them, so add-on items do not hide the plan
// item. Empty when there is none.
func priceRefsOf(raw []byte) []string {
	var refs []string
	add := func(v string, ok bool) {
		if ok && !slices.Contains(refs, v) {
			refs = append(refs, v)
		}
	}
	for _, item := range itemsOf(raw) {
		add(stringAt(item, "price", "lookup_key"))
		add(idOf(field(item, "price")))
		add(idOf(field(item, "plan")))
	}
	add(idOf(field(raw, "plan")))
	return refs
}

// statusOf returns the subscription's status (active, trialing, past_due,
// canceled, …).
func statusOf(raw []byte) (string, bool) { return stringAt(raw, "status") }

// cancellation is how (and whether) a subscription ends.
type cancellation struct {
	AtPeriodEnd bool      // cancel_at_period_end
	At          time.Time // cancel_at: a scheduled end; zero when none
	CanceledAt  time.Time // canceled_at: when cancellation was requested; zero when never
}

// cancelOf reads the cancellation fields. Newer Dashboard flows schedule the
// end with cancel_at set to the period end and cancel_at_period_end false, so
// both are kept.
func cancelOf(raw []byte) cancellation {
	var c cancellation
	c.AtPeriodEnd, _ = boolAt(raw, "cancel_at_period_end")
	c.At, _ = unixAt(raw, "cancel_at")
	c.CanceledAt, _ = unixAt(raw, "canceled_at")
	return c
}

// customerIDOf returns the subscription's customer id, whether "customer"
// is an id or an expanded customer object.
func customerIDOf(raw []byte) (string, bool) { return idOf(field(raw, "customer")) }

// createdOf returns when the subscription was created.
func createdOf(raw []byte) (time.Time, bool) { return unixAt(raw, "created") }

// snapshotOf builds a snapshot from one subscription's raw JSON. CustomerID
// comes from the subscription; the caller adds UserRef. Every failure is a
// *reconcile.PermanentError with a reason: retrying cannot change what
// Stripe stored. A live subscription (active, trialing, past_due) must have
// a current period and a price reference, because billsync grants the
// allowance of that plan for that period; a subscription that is not live
// needs neither (the customer falls back to the default plan), and an
// unusable period on it is dropped rather than failing the customer.
func snapshotOf(raw []byte) (reconcile.Snapshot, error) {
	id, ok := stringAt(raw, "id")
	if !ok {
		return reconcile.Snapshot{}, reconcile.Permanent("stripe subscription: no id in the object (is it a subscription?)")
	}
	if object, ok := stringAt(raw, "object"); ok && object != "subscription" {
		return reconcile.Snapshot{}, reconcile.Permanent("stripe subscription %s: object is %q, not a subscription", id, object)
	}
	status, ok := statusOf(raw)
	if !ok {
		return reconcile.Snapshot{}, reconcile.Permanent("stripe subscription %s: no status", id)
	}
	customer, _ := customerIDOf(raw)
	snap := reconcile.Snapshot{
		Provider:       Provider,
		CustomerID:     customer,
		SubscriptionID: id,
		Status:         status,
		PriceRefs:      priceRefsOf(raw),
	}
	start, end, hasPeriod := periodOf(raw)
	switch {
	case hasPeriod && end.After(start):
		snap.PeriodStart, snap.PeriodEnd = start, end
	case snap.Live() && hasPeriod:
		return reconcile.Snapshot{}, reconcile.Permanent(
			"stripe subscription %s (%s): current period ends (%s) before it starts (%s)",
			id, status, end.Format(time.RFC3339), start.Format(time.RFC3339))
	case snap.Live():
		return reconcile.Snapshot{}, reconcile.Permanent(
			"stripe subscription %s (%s): no current period in either the item shape "+
				"(items.data[].current_period_start/end) or the subscription shape (current_period_start/end)", id, status)
	}
	if snap.Live() && len(snap.PriceRefs) == 0 {
		return reconcile.Snapshot{}, reconcile.Permanent(
			"stripe subscription %s (%s): no price reference (no items.data[].price lookup_key or id, no plan id)", id, status)
	}
	c := cancelOf(raw)
	snap.CancelAtPeriodEnd = c.AtPeriodEnd ||
		(!c.At.IsZero() && !snap.PeriodEnd.IsZero() && !c.At.After(snap.PeriodEnd))
	return snap, nil
}

// subscriptionRank orders a customer's subscriptions by the resolution rule:
// live ones (active, trialing, past_due) first, then newest created first.
// Ties keep Stripe's list order, which is newest first.
type subscriptionRank struct {
	raw     []byte
	live    bool
	created time.Time
}

// pick chooses the subscription that describes the customer: the newest live
// one; if none is live, the newest of the rest. It returns nil for none. A
// subscription without an id or status makes the choice impossible, so it is
// a permanent error rather than a silent skip.
func pick(raws [][]byte) ([]byte, error) {
	ranks := make([]subscriptionRank, 0, len(raws))
	for _, raw := range raws {
		id, ok := stringAt(raw, "id")
		if !ok {
			return nil, reconcile.Permanent("stripe subscription list: an entry has no id")
		}
		status, ok := statusOf(raw)
		if !ok {
			return nil, reconcile.Permanent("stripe subscription %s: no status", id)
		}
		created, _ := createdOf(raw)
		live := reconcile.Snapshot{Status: status}.Live()
		ranks = append(ranks, subscriptionRank{raw: raw, live: live, created: created})
	}
	if len(ranks) == 0 {
		return nil, nil
	}
	slices.SortStableFunc(ranks, func(a, b subscriptionRank) int {
		if a.live != b.live {
			if a.live {
				return -1
			}
			return 1
		}
		return b.created.Compare(a.created)
	})
	return ranks[0].raw, nil
}

// Raw JSON navigation. Each lookup decodes only what it needs, so a field of
// an unexpected type makes that field absent without spoiling the others.

var jsonNull = []byte("null")

// field returns the value at path through nested objects, or nil when a step
// is missing, null, or not an object.
func field(raw []byte, path ...string) json.RawMessage {
	cur := json.RawMessage(raw)
	for _, key := range path {
		var obj map[string]json.RawMessage
		if json.Unmarshal(cur, &obj) != nil {
			return nil
		}
		v, ok := obj[key]
		if !ok || bytes.Equal(bytes.TrimSpace(v), jsonNull) {
			return nil
		}
		cur = v
	}
	return cur
}

func stringAt(raw []byte, path ...string) (string, bool) {
	var s string
	if v := field(raw, path...); v == nil || json.Unmarshal(v, &s) != nil || s == "" {
		return "", false
	}
	return s, true
}

func boolAt(raw []byte, path ...string) (bool, bool) {
	var b bool
	if v := field(raw, path...); v == nil || json.Unmarshal(v, &b) != nil {
		return false, false
	}
	return b, true
}

// maxUnix is 9999-12-31T23:59:59Z: a larger timestamp is garbage, not a date.
const maxUnix = 253402300799

// unixAt reads a Unix timestamp in seconds. Zero, negative and absurd values
// are absent, so a reader never hands out time.Unix(0).
func unixAt(raw []byte, path ...string) (time.Time, bool) {
	var sec int64
	if v := field(raw, path...); v == nil || json.Unmarshal(v, &sec) != nil || sec <= 0 || sec > maxUnix {
		return time.Time{}, false
	}
	return time.Unix(sec, 0).UTC(), true
}

// idOf reads a reference that Stripe renders either as an id string or as
// the expanded object.
func idOf(v json.RawMessage) (string, bool) {
	var s string
	if v == nil {
		return "", false
	}
	if json.Unmarshal(v, &s) == nil {
		return s, s != ""
	}
	return stringAt(v, "id")
}

// itemsOf returns the raw subscription items (items.data[]).
func itemsOf(raw []byte) []json.RawMessage {
	var items []json.RawMessage
	if v := field(raw, "items", "data"); v == nil || json.Unmarshal(v, &items) != nil {
		return nil
	}
	return items
}
