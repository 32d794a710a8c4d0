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

// periodOf returns an item's current billing period.
//
// Since API 2025-03-31 (basil) the period lives on each subscription item
// (items.data[].current_period_start/end), and with flexible billing
// (2025-07-30.basil) items of one subscription can have different periods
// (a monthly plan and a yearly add-on). Before basil, and in payloads
// stored from older versions, the period is on the subscription itself and
// holds for every item. So the item's own bounds win, the subscription's
// are the fallback. ok is false when neither shape holds both bounds.
func periodOf(sub, item object) (start, end time.Time, ok bool) {
	if start, end, ok = boundsOf(item); ok {
		return start, end, true
	}
	return boundsOf(sub)
}

func boundsOf(obj object) (start, end time.Time, ok bool) {
	start, okStart := obj.unix("current_period_start")
	end, okEnd := obj.unix("current_period_end")
	if !okStart || !okEnd {
		return time.Time{}, time.Time{}, false
	}
	return start, end, true
}

// priceRefsOf returns what identifies an item's price, most specific first,
// without duplicates: the price's lookup_key, the price id, then the legacy
// plan id (items still carry a plan object, whose id equals the price id
// for Prices and is the only reference in payloads from before Prices).
// Empty when there is none.
func priceRefsOf(item object) []string {
	var refs []string
	add := func(v string, ok bool) {
		if ok && !slices.Contains(refs, v) {
			refs = append(refs, v)
		}
	}
	add(item.str("price", "lookup_key"))
	add(idOf(item.get("price")))
	add(idOf(item.get("plan")))
	return refs
}

// quantityOf reads a quantity (seats). Stripe omits it or sends null for
// metered prices, which bill by usage: that is one unit. An explicit 0 is
// kept: Stripe allows a licensed item with no seats.
func quantityOf(obj object) int64 {
	var n int64
	if v := obj.get("quantity"); v == nil || json.Unmarshal(v, &n) != nil || n < 0 {
		return 1
	}
	return n
}

// statusOf returns the subscription's status (active, trialing, past_due,
// canceled, …).
func statusOf(obj object) (string, bool) { return obj.str("status") }

// cancellation is how (and whether) a subscription ends.
type cancellation struct {
	AtPeriodEnd bool      // cancel_at_period_end
	At          time.Time // cancel_at: a scheduled end; zero when none
	CanceledAt  time.Time // canceled_at: when cancellation was requested; zero when never
}

// cancelOf reads the cancellation fields. Newer Dashboard flows schedule the
// end with cancel_at set to the period end and cancel_at_period_end false, so
// both are kept.
func cancelOf(obj object) cancellation {
	var c cancellation
	c.AtPeriodEnd, _ = obj.boolean("cancel_at_period_end")
	c.At, _ = obj.unix("cancel_at")
	c.CanceledAt, _ = obj.unix("canceled_at")
	return c
}

// collectionPausedOf reports whether pause_collection is set. Stripe sends
// null when collection runs and an object ({behavior, resumes_at}) while it
// is paused; anything else is read as not paused.
func collectionPausedOf(obj object) bool {
	v := bytes.TrimSpace(obj.get("pause_collection"))
	return len(v) > 0 && v[0] == '{'
}

// customerIDOf returns the subscription's customer id, whether "customer"
// is an id or an expanded customer object.
func customerIDOf(raw []byte) (string, bool) { return idOf(field(raw, "customer")) }

// createdOf returns when the object was created.
func createdOf(obj object) (time.Time, bool) { return obj.unix("created") }

// subscriptionOf reads one subscription's raw JSON. Only what makes it
// unreadable is an error (no id, no status, not a subscription, a period
// that ends before it starts): which subscription and item decide the plan,
// and what an item without a period or price means, is Decide's policy, so
// such items are handed on with zero period or no refs. Every error is a
// *reconcile.PermanentError: retrying cannot change what Stripe stored.
func subscriptionOf(raw []byte) (reconcile.Subscription, error) {
	return subscriptionWithItems(raw, itemsOf(objectOf(raw)))
}

// itemsIncomplete reports whether the subscription's embedded item list
// says there are more items than it holds (items.has_more).
func itemsIncomplete(raw []byte) bool {
	more, _ := boolAt(raw, "items", "has_more")
	return more
}

// subscriptionWithItems is subscriptionOf with the subscription's items
// given: all of them, when the embedded list was cut short and the items
// were listed on their own.
func subscriptionWithItems(raw []byte, items []json.RawMessage) (reconcile.Subscription, error) {
	o := objectOf(raw)
	id, ok := o.str("id")
	if !ok {
		return reconcile.Subscription{}, reconcile.Permanent("stripe subscription: no id in the object (is it a subscription?)")
	}
	if kind, ok := o.str("object"); ok && kind != "subscription" {
		return reconcile.Subscription{}, reconcile.Permanent("stripe subscription %s: object is %q, not a subscription", id, kind)
	}
	status, ok := statusOf(o)
	if !ok {
		return reconcile.Subscription{}, reconcile.Permanent("stripe subscription %s: no status", id)
	}
	sub := reconcile.Subscription{ID: id, Status: status, CollectionPaused: collectionPausedOf(o)}
	sub.Created, _ = createdOf(o)
	sub.TrialEnd, _ = o.unix("trial_end")

	if len(items) == 0 {
		if _, ok := idOf(o.get("plan")); ok {
			// A single-plan subscription of an old API version: the plan
			// and quantity are on the subscription itself.
			items = []json.RawMessage{raw}
		}
	}
	for _, raw := range items {
		item := objectOf(raw)
		it := reconcile.Item{PriceRefs: priceRefsOf(item), Quantity: quantityOf(item)}
		start, end, ok := periodOf(o, item)
		switch {
		case ok && end.After(start):
			it.PeriodStart, it.PeriodEnd = start, end
		case ok:
			return reconcile.Subscription{}, reconcile.Permanent(
				"stripe subscription %s (%s): current period ends (%s) before it starts (%s)",
				id, status, end.Format(time.RFC3339), start.Format(time.RFC3339))
		}
		sub.Items = append(sub.Items, it)
	}

	// cancel_at no later than the period's end ends the subscription before
	// it renews: "at period end" for billsync, as cancel_at_period_end is.
	// With mixed intervals the earliest item end is the first renewal.
	c := cancelOf(o)
	sub.CancelAtPeriodEnd = c.AtPeriodEnd
	if end := earliestEnd(sub.Items); !c.At.IsZero() && !end.IsZero() && !c.At.After(end) {
		sub.CancelAtPeriodEnd = true
	}
	return sub, nil
}

func earliestEnd(items []reconcile.Item) time.Time {
	var end time.Time
	for _, it := range items {
		if !it.PeriodEnd.IsZero() && (end.IsZero() || it.PeriodEnd.Before(end)) {
			end = it.PeriodEnd
		}
	}
	return end
}

// subscriptionsOf reads a customer's current subscriptions, newest first
// (Stripe lists them so; the sort makes the embedded list and the
// subscription list give one order whatever they send). One unreadable
// subscription fails the customer: dropping it could hide the plan.
func subscriptionsOf(raws [][]byte) ([]reconcile.Subscription, error) {
	return subscriptionsWithItems(raws, nil)
}

// subscriptionsWithItems is subscriptionsOf with the items of some
// subscriptions (by id) given, for lists cut short.
func subscriptionsWithItems(raws [][]byte, items map[string][]json.RawMessage) ([]reconcile.Subscription, error) {
	subs := make([]reconcile.Subscription, 0, len(raws))
	for _, raw := range raws {
		its := itemsOf(objectOf(raw))
		if id, _ := stringAt(raw, "id"); items[id] != nil {
			its = items[id]
		}
		sub, err := subscriptionWithItems(raw, its)
		if err != nil {
			return nil, err
		}
		subs = append(subs, sub)
	}
	slices.SortStableFunc(subs, func(a, b reconcile.Subscription) int { return b.Created.Compare(a.Created) })
	return subs, nil
}

// customerJSON is what a customer object says about its subscriptions.
type customerJSON struct {
	id       string
	deleted  bool
	userRef  string
	email    string
	subs     [][]byte // the embedded subscriptions (expand subscriptions)
	complete bool     // subs are all of them: expanded, and has_more false
}

// customerOfJSON reads a customer object, with its subscriptions when they
// were expanded. A customer that has no id is unreadable.
func customerOfJSON(raw []byte, userRefKey string) (customerJSON, error) {
	o := objectOf(raw)
	id, ok := o.str("id")
	if !ok {
		return customerJSON{}, reconcile.Permanent("stripe customer: no id in the object")
	}
	c := customerJSON{id: id}
	c.deleted, _ = o.boolean("deleted")
	c.userRef, _ = o.str("metadata", userRefKey)
	c.email, _ = o.str("email")
	list := o.get("subscriptions")
	var embedded struct {
		Data    []json.RawMessage `json:"data"`
		HasMore *bool             `json:"has_more"`
	}
	if list == nil || json.Unmarshal(list, &embedded) != nil || embedded.HasMore == nil {
		// Not expanded (or a shape billsync cannot read): the subscription
		// list has to say.
		return c, nil
	}
	for _, s := range embedded.Data {
		c.subs = append(c.subs, s)
	}
	c.complete = !*embedded.HasMore
	return c, nil
}

// Raw JSON navigation. An object is decoded one level at a time and only
// once per reader, so reading twenty fields of a subscription costs one
// pass over it, not twenty; a field of an unexpected type makes that field
// absent without spoiling the others.

var jsonNull = []byte("null")

// object is a JSON object decoded one level deep: its values stay raw
// until read. nil when the JSON is not an object.
type object map[string]json.RawMessage

func objectOf(raw []byte) object {
	var o object
	if json.Unmarshal(raw, &o) != nil {
		return nil
	}
	return o
}

// get returns the value at path through nested objects, or nil when a step
// is missing, null, or not an object.
func (o object) get(path ...string) json.RawMessage {
	v, ok := o[path[0]]
	if !ok || bytes.Equal(bytes.TrimSpace(v), jsonNull) {
		return nil
	}
	if len(path) == 1 {
		return v
	}
	return objectOf(v).get(path[1:]...)
}

func (o object) str(path ...string) (string, bool) {
	var s string
	if v := o.get(path...); v == nil || json.Unmarshal(v, &s) != nil || s == "" {
		return "", false
	}
	return s, true
}

func (o object) boolean(path ...string) (bool, bool) {
	var b bool
	if v := o.get(path...); v == nil || json.Unmarshal(v, &b) != nil {
		return false, false
	}
	return b, true
}

// unix reads a Unix timestamp in seconds. Zero, negative and absurd values
// are absent, so a reader never hands out time.Unix(0).
func (o object) unix(path ...string) (time.Time, bool) {
	var sec int64
	if v := o.get(path...); v == nil || json.Unmarshal(v, &sec) != nil || sec <= 0 || sec > maxUnix {
		return time.Time{}, false
	}
	return time.Unix(sec, 0).UTC(), true
}

// field, stringAt and boolAt read one value of raw JSON, for callers that
// need only that one.
func field(raw []byte, path ...string) json.RawMessage { return objectOf(raw).get(path...) }

func stringAt(raw []byte, path ...string) (string, bool) { return objectOf(raw).str(path...) }

func boolAt(raw []byte, path ...string) (bool, bool) { return objectOf(raw).boolean(path...) }

// maxUnix is 9999-12-31T23:59:59Z: a larger timestamp is garbage, not a date.
const maxUnix = 253402300799

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
func itemsOf(obj object) []json.RawMessage {
	var items []json.RawMessage
	if v := obj.get("items", "data"); v == nil || json.Unmarshal(v, &items) != nil {
		return nil
	}
	return items
}
