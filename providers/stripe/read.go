package stripe

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/billsync/billsync/reconcile"
)

// The readers below work on Stripe's JSON, never on stripe-go's typed
// structs: a typed struct is cut for one API version and silently drops a
// field that an older or newer version puts elsewhere (the typed v82
// Subscription has no current_period_* at all, because API 2025-03-31.basil
// moved them onto the items). billsync decodes instead into small structs of
// its own holding every shape seen in the wild for the fields it reads (see
// object), in one pass (a whole list page at once) with
// go-json-experiment/json, the module of Go's encoding/json/v2, and one
// helper per field that has moved picks the shape that is there. A field
// of an unexpected type, or null, is absent (a false ok), never a zero
// value handed out, and never spoils the other fields. Keys match exactly,
// as Stripe writes them (all lower case).

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

func boundsOf(o object) (start, end time.Time, ok bool) {
	if !o.CurrentPeriodStart.ok || !o.CurrentPeriodEnd.ok {
		return time.Time{}, time.Time{}, false
	}
	return o.CurrentPeriodStart.t, o.CurrentPeriodEnd.t, true
}

// priceRefsOf returns what identifies an item's price, most specific first,
// without duplicates: the price's lookup_key, the price id, then the legacy
// plan id (items still carry a plan object, whose id equals the price id
// for Prices and is the only reference in payloads from before Prices).
// Empty when there is none.
func priceRefsOf(item object) []string {
	var refs []string
	for _, v := range []text{item.Price.lookupKey, item.Price.id, item.Plan.id} {
		if v.ok && !slices.Contains(refs, v.s) {
			refs = append(refs, v.s)
		}
	}
	return refs
}

// quantityOf reads a quantity (seats). Stripe omits it or sends null for
// metered prices, which bill by usage: that is one unit. An explicit 0 is
// kept: Stripe allows a licensed item with no seats.
func quantityOf(o object) int64 {
	if !o.Quantity.ok || o.Quantity.n < 0 {
		return 1
	}
	return o.Quantity.n
}

// customerKeyOf reads whom a subscription or an invoice bills, as Stripe
// knows it in the account it was read in: its customer (an id, or the
// expanded customer), or else its customer_account. Since Accounts v2 (API
// 2025-12-15) a platform may bill an Account configured as a customer
// (acct_…) in place of a Customer: the object then names customer_account,
// and customer is null or absent. Stripe's docs say such an object may
// carry both ("correspondingly formatted": the cus_ id that stands for the
// same account in the Customers v1 API); the customer then wins, so that
// it keeps the key it has always had. ok is false when it names neither
// (a customer_account that is not an acct_ id names none).
func customerKeyOf(o object) (string, bool) {
	switch {
	case o.Customer.id.ok:
		return o.Customer.id.s, true
	case o.CustomerAccount.ok && reconcile.IsConnectedAccount(o.CustomerAccount.s):
		return o.CustomerAccount.s, true
	}
	return "", false
}

// statusOf returns the subscription's status (active, trialing, past_due,
// canceled, …).
func statusOf(o object) (string, bool) { return o.Status.s, o.Status.ok }

// cancellation is how (and whether) a subscription ends.
type cancellation struct {
	AtPeriodEnd bool      // cancel_at_period_end
	At          time.Time // cancel_at: a scheduled end; zero when none
	CanceledAt  time.Time // canceled_at: when cancellation was requested; zero when never
}

// cancelOf reads the cancellation fields. Newer Dashboard flows schedule the
// end with cancel_at set to the period end and cancel_at_period_end false, so
// both are kept.
func cancelOf(o object) cancellation {
	return cancellation{AtPeriodEnd: o.CancelAtPeriodEnd.v, At: o.CancelAt.t, CanceledAt: o.CanceledAt.t}
}

// collectionPausedOf reports whether pause_collection is set. Stripe sends
// null when collection runs and an object ({behavior, resumes_at}) while it
// is paused; anything else is read as not paused.
func collectionPausedOf(o object) bool { return bool(o.PauseCollection) }

// subscriptionOf reads one subscription's raw JSON. Only what makes it
// unreadable is an error (no id, no status, not a subscription, a period
// that ends before it starts): which subscription and item decide the plan,
// and what an item without a period or price means, is Decide's policy, so
// such items are handed on with zero period or no refs. Every error is a
// *reconcile.PermanentError: retrying cannot change what Stripe stored.
func subscriptionOf(raw []byte) (reconcile.Subscription, error) {
	o := objectOf(raw)
	return subscriptionWithItems(o, o.Items.Data)
}

// subscriptionWithItems is subscriptionOf with the subscription's items
// given: all of them, when the embedded list was cut short
// (items.has_more) and the items were listed on their own.
func subscriptionWithItems(o object, items []object) (reconcile.Subscription, error) {
	id, ok := o.ID.s, o.ID.ok
	if !ok {
		return reconcile.Subscription{}, reconcile.Permanent("stripe subscription: no id in the object (is it a subscription?)")
	}
	if o.Object.ok && o.Object.s != "subscription" {
		return reconcile.Subscription{}, reconcile.Permanent("stripe subscription %s: object is %q, not a subscription", id, o.Object.s)
	}
	status, ok := statusOf(o)
	if !ok {
		return reconcile.Subscription{}, reconcile.Permanent("stripe subscription %s: no status", id)
	}
	sub := reconcile.Subscription{ID: id, Status: status, CollectionPaused: collectionPausedOf(o),
		Created: o.Created.t, TrialEnd: o.TrialEnd.t}

	for _, item := range linesOf(o, items) {
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

// linesOf is a subscription's items, given (see subscriptionWithItems):
// the subscription itself for a single-plan subscription of an old API
// version, whose plan and quantity are on the subscription.
func linesOf(sub object, items []object) []object {
	if len(items) == 0 && sub.Plan.id.ok {
		return []object{sub}
	}
	return items
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
// subscription list give one order whatever they send). Ended ones are
// left out (see ended), whatever the list held. One unreadable
// subscription fails the customer: dropping it could hide the plan.
func subscriptionsOf(objs []object) ([]reconcile.Subscription, error) {
	return subscriptionsWithItems(objs, nil)
}

// subscriptionsWithItems is subscriptionsOf with the items of some
// subscriptions (by id) given, for lists cut short.
func subscriptionsWithItems(objs []object, items map[string][]object) ([]reconcile.Subscription, error) {
	subs := make([]reconcile.Subscription, 0, len(objs))
	for _, o := range objs {
		if ended(o) {
			continue
		}
		its := o.Items.Data
		if listed := items[o.ID.s]; listed != nil {
			its = listed
		}
		sub, err := subscriptionWithItems(o, its)
		if err != nil {
			return nil, err
		}
		subs = append(subs, sub)
	}
	slices.SortStableFunc(subs, func(a, b reconcile.Subscription) int { return b.Created.Compare(a.Created) })
	return subs, nil
}

// ended reports whether a subscription is over for good: canceled, or
// incomplete_expired (its first payment never came; terminal too). They
// are what Stripe's status=ended lists. A customer's current subscriptions
// are the others: the customer's expanded subscriptions and the default
// subscription list leave canceled ones out, and billsync leaves out both
// ended statuses on every path (the embedded list, the default list, the
// list of status=all that fetchBySubscriptions reads), so that what a
// snapshot holds never depends on which request read it. A subscription
// without a readable status is not ended: subscriptionWithItems reports it.
func ended(o object) bool {
	return o.Status.ok && (o.Status.s == "canceled" || o.Status.s == "incomplete_expired")
}

// customerJSON is what a customer object says about its subscriptions.
type customerJSON struct {
	id       string
	deleted  bool
	userRef  string
	email    string
	subs     []object // the embedded subscriptions (expand subscriptions)
	complete bool     // subs are all of them: expanded, and has_more false
}

// customerOfJSON reads a customer object as the API answers it (Fetch),
// with its subscriptions when they were expanded, in one pass. A customer
// that has no id is unreadable (permanent); bytes that are not JSON at all
// are an unreadable answer (see readAnswer), and nothing is read of them.
func customerOfJSON(raw []byte, userRefKey string) (customerJSON, error) {
	var o customerObject
	if err := readAnswer(raw, &o); err != nil {
		return customerJSON{}, err
	}
	return o.read(userRefKey)
}

// listPageOf decodes a page of a list (customers, subscriptions, items,
// prices), every entry and everything in it, in one pass. The page must be
// a list (data an array, has_more a boolean when there); inside data, a
// field of the wrong type is only absent, as customerOfJSON reads it. T is
// one of the readers' types (customerObject, object, ref).
func listPageOf[T any](body []byte) (entries []T, hasMore bool, err error) {
	var page struct {
		Data    pageData[T]    `json:"data"`
		HasMore jsontext.Value `json:"has_more"` // never fails the decode: checked below
	}
	if err := json.Unmarshal(body, &page, decoding); err != nil {
		return nil, false, err
	}
	switch string(page.HasMore) {
	case "", "null", "false":
	case "true":
		hasMore = true
	default:
		return nil, false, fmt.Errorf("has_more is %s, not a boolean", page.HasMore)
	}
	return page.Data, hasMore, nil
}

// pageData is a list page's data: unlike the fields inside it, it must be
// an array (or null, an empty page), or the page is not a list.
type pageData[T any] []T

func (d *pageData[T]) UnmarshalJSONFrom(dec *jsontext.Decoder) error {
	if k := dec.PeekKind(); k != '[' && k != 'n' {
		return fmt.Errorf("data is a JSON %v, not an array", k)
	}
	return json.UnmarshalDecode(dec, (*[]T)(d))
}

// customerObject is what billsync reads of a customer, as decoded (each
// field absent when missing, null or of another type).
type customerObject struct {
	ID            text     `json:"id"`
	Created       unixTime `json:"created"`
	Deleted       flag     `json:"deleted"`
	Email         text     `json:"email"`
	Metadata      metadata `json:"metadata"`
	Subscriptions list     `json:"subscriptions"`
}

func (o *customerObject) UnmarshalJSONFrom(dec *jsontext.Decoder) error {
	type fields customerObject // the fields, without this method
	return decodeObject(dec, (*fields)(o))
}

func (o customerObject) read(userRefKey string) (customerJSON, error) {
	if !o.ID.ok {
		return customerJSON{}, reconcile.Permanent("stripe customer: no id in the object")
	}
	c := customerJSON{id: o.ID.s, deleted: o.Deleted.v, userRef: o.Metadata[userRefKey].s, email: o.Email.s}
	// The embedded list is all of them only when it is a list: data an
	// array (it is nil when it is not, and when it is null: then the
	// subscription list is asked, as when not expanded) and has_more
	// false.
	list := o.Subscriptions
	c.subs, c.complete = list.Data, list.Data != nil && list.HasMore.ok && !list.HasMore.v
	return c, nil
}

// object is what billsync reads of a subscription or of a subscription item,
// every shape of every API version in one struct: an item's fields are a
// subset of a subscription's, and a single-plan subscription of an old
// version is its own item (plan and quantity on the subscription). Each
// field is absent (ok false) when missing, null or of another type.
type object struct {
	ID                 text     `json:"id"`
	Object             text     `json:"object"`
	Status             text     `json:"status"`
	Created            unixTime `json:"created"`
	TrialEnd           unixTime `json:"trial_end"`
	CancelAtPeriodEnd  flag     `json:"cancel_at_period_end"`
	CancelAt           unixTime `json:"cancel_at"`
	CanceledAt         unixTime `json:"canceled_at"`
	PauseCollection    paused   `json:"pause_collection"`
	CurrentPeriodStart unixTime `json:"current_period_start"` // on items since basil, on the subscription before
	CurrentPeriodEnd   unixTime `json:"current_period_end"`
	Price              ref      `json:"price"`
	Plan               ref      `json:"plan"` // legacy; the only reference before Prices
	Quantity           count    `json:"quantity"`
	Items              list     `json:"items"`
	// Whom a subscription (or an invoice) bills: see customerKeyOf.
	Customer        ref  `json:"customer"`
	CustomerAccount text `json:"customer_account"` // Accounts v2 (2025-12-15)
}

func (o *object) UnmarshalJSONFrom(dec *jsontext.Decoder) error {
	type fields object // the fields, without this method
	return decodeObject(dec, (*fields)(o))
}

// objectOf decodes a subscription or an item; JSON that is not an object
// gives an object with every field absent.
func objectOf(raw []byte) object {
	var o object
	decode(raw, &o)
	return o
}

// listOf decodes a list object's data (a subscription's items).
func listOf(raw []byte) []object {
	var l list
	decode(raw, &l)
	return l.Data
}

// decoding is how the readers decode: as leniently about the bytes as
// encoding/json, which billsync used before (a repeated key: the last one
// counts; invalid UTF-8 in a string: replaced), and matching keys exactly,
// as Stripe writes them.
var decoding = json.JoinOptions(jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))

// readAnswer decodes an API answer into v with the readers' types. Unlike
// a stored payload (decode), an answer that is not JSON at all (cut short,
// a proxy's page) is an error, transient: a failure to read what Stripe
// holds, not data it holds.
func readAnswer(body []byte, v any) error {
	if err := json.Unmarshal(body, v, decoding); err != nil {
		return fmt.Errorf("unreadable answer: %w", err)
	}
	return nil
}

// decode reads raw into v, whose fields are of the types below: only JSON
// that is not JSON at all fails it, and then v is left with every field
// absent rather than with the part read before the fault.
func decode[T any](raw []byte, v *T) {
	if json.Unmarshal(raw, v, decoding) != nil {
		var zero T
		*v = zero
	}
}

// decodeObject decodes an object's fields, or skips a value of another
// type (every field absent).
func decodeObject(dec *jsontext.Decoder, fields any) error {
	if dec.PeekKind() != '{' {
		return dec.SkipValue()
	}
	return json.UnmarshalDecode(dec, fields)
}

// The types below never fail a decode: a value of another JSON type than
// theirs is absent (skipped, and the decode goes on). They read their
// value straight from the decoder, in the one pass over the page.

// list is a Stripe list object: data is nil when it is missing, null or
// not an array, and empty (not nil) when it is [].
type list struct {
	Data    objects `json:"data"`
	HasMore flag    `json:"has_more"`
}

func (l *list) UnmarshalJSONFrom(dec *jsontext.Decoder) error {
	type fields list
	return decodeObject(dec, (*fields)(l))
}

// objects is a JSON array of objects; an element of another type is an
// object with every field absent.
type objects []object

func (os *objects) UnmarshalJSONFrom(dec *jsontext.Decoder) error {
	*os = nil
	if dec.PeekKind() != '[' {
		return dec.SkipValue()
	}
	if _, err := dec.ReadToken(); err != nil {
		return err
	}
	all := objects{}
	for dec.PeekKind() != ']' {
		var o object
		if err := o.UnmarshalJSONFrom(dec); err != nil {
			return err
		}
		all = append(all, o)
	}
	if _, err := dec.ReadToken(); err != nil {
		return err
	}
	*os = all
	return nil
}

// metadata is a customer's metadata: string values by key.
type metadata map[string]text

func (m *metadata) UnmarshalJSONFrom(dec *jsontext.Decoder) error {
	*m = nil
	if dec.PeekKind() != '{' {
		return dec.SkipValue()
	}
	return json.UnmarshalDecode(dec, (*map[string]text)(m))
}

// text is a non-empty JSON string.
type text struct {
	s  string
	ok bool
}

func (t *text) UnmarshalJSONFrom(dec *jsontext.Decoder) error {
	*t = text{}
	if dec.PeekKind() != '"' {
		return dec.SkipValue()
	}
	tok, err := dec.ReadToken()
	if err != nil {
		return err
	}
	s := tok.String()
	*t = text{s: s, ok: s != ""}
	return nil
}

// flag is a JSON boolean.
type flag struct{ v, ok bool }

func (f *flag) UnmarshalJSONFrom(dec *jsontext.Decoder) error {
	*f = flag{}
	if k := dec.PeekKind(); k != 't' && k != 'f' {
		return dec.SkipValue()
	}
	tok, err := dec.ReadToken()
	if err != nil {
		return err
	}
	*f = flag{v: tok.Bool(), ok: true}
	return nil
}

// count is a JSON integer.
type count struct {
	n  int64
	ok bool
}

func (c *count) UnmarshalJSONFrom(dec *jsontext.Decoder) error {
	*c = count{}
	if dec.PeekKind() != '0' {
		return dec.SkipValue()
	}
	v, err := dec.ReadValue()
	if err != nil {
		return err
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	*c = count{n: n, ok: err == nil}
	return nil
}

// unixTime is a Unix timestamp in seconds. Zero, negative and absurd values
// are absent, so a reader never hands out time.Unix(0).
type unixTime struct {
	t  time.Time
	ok bool
}

func (u *unixTime) UnmarshalJSONFrom(dec *jsontext.Decoder) error {
	*u = unixTime{}
	var sec count
	if err := sec.UnmarshalJSONFrom(dec); err != nil {
		return err
	}
	if sec.ok && sec.n > 0 && sec.n <= maxUnix {
		*u = unixTime{t: time.Unix(sec.n, 0).UTC(), ok: true}
	}
	return nil
}

// maxUnix is 9999-12-31T23:59:59Z: a larger timestamp is garbage, not a date.
const maxUnix = 253402300799

// paused is pause_collection: set when it is an object.
type paused bool

func (p *paused) UnmarshalJSONFrom(dec *jsontext.Decoder) error {
	*p = dec.PeekKind() == '{'
	return dec.SkipValue()
}

// ref is a reference that Stripe renders either as an id string or as the
// expanded object (a price, a plan, a customer); an expanded price also
// gives its lookup_key.
type ref struct {
	id        text
	lookupKey text
	product   productRef // a price's or a plan's product
}

func (r *ref) UnmarshalJSONFrom(dec *jsontext.Decoder) error {
	*r = ref{}
	if dec.PeekKind() != '{' {
		return r.id.UnmarshalJSONFrom(dec)
	}
	var o struct {
		ID        text       `json:"id"`
		LookupKey text       `json:"lookup_key"`
		Product   productRef `json:"product"`
	}
	if err := json.UnmarshalDecode(dec, &o); err != nil {
		return err
	}
	r.id, r.lookupKey, r.product = o.ID, o.LookupKey, o.Product
	return nil
}

// productRef is a price's product: its id, or the expanded product, whose
// metadata then gives its plan (reconcile.ProductPlanKey).
type productRef struct {
	id       text
	plan     text
	expanded bool // the product's metadata was there to read
}

func (p *productRef) UnmarshalJSONFrom(dec *jsontext.Decoder) error {
	*p = productRef{}
	if dec.PeekKind() != '{' {
		return p.id.UnmarshalJSONFrom(dec)
	}
	var o product
	if err := json.UnmarshalDecode(dec, &o); err != nil {
		return err
	}
	*p = productRef{id: o.ID, plan: o.Metadata[reconcile.ProductPlanKey], expanded: true}
	return nil
}

// product is a Stripe product as billsync reads it: its id and metadata.
type product struct {
	ID       text     `json:"id"`
	Metadata metadata `json:"metadata"`
}

// productOf is an item's product: its price's, or its legacy plan's.
func productOf(item object) productRef {
	if item.Price.product.id.ok {
		return item.Price.product
	}
	return item.Plan.product
}
