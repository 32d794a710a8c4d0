package stripe

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/billsync/billsync/reconcile"
)

// DefaultTolerance is how old a signature timestamp may be (Stripe's own
// default). Older deliveries are refused as possible replays.
const DefaultTolerance = 300 * time.Second

// Verifier checks Stripe-Signature headers and turns verified bodies into
// events. It never calls Stripe: a thin event naming a subscription or an
// invoice is stored under that object (reconcile.Related), and the worker
// asks Stripe whose it is.
type Verifier struct {
	secrets   []string
	tolerance time.Duration
	onConnect func() // nil: connect events are not counted
}

// SetOnConnect sets a function called for every verified event of a
// connected account (metrics). Call it before the verifier is used.
func (v *Verifier) SetOnConnect(f func()) { v.onConnect = f }

// ReasonConnect is why events of connected accounts (Stripe Connect) are
// stored as ignored: billsync reads only the platform account, and reading
// a connected account's customers would need its Stripe-Account header.
const ReasonConnect = "connected accounts are not configured"

// NewVerifier returns a Verifier accepting a signature made with any of
// secrets: during a rotation Stripe signs with the old and the new secret.
func NewVerifier(secrets []string, tolerance time.Duration) (*Verifier, error) {
	var clean []string
	for _, s := range secrets {
		if s = strings.TrimSpace(s); s != "" {
			clean = append(clean, s)
		}
	}
	if len(clean) == 0 {
		return nil, errors.New("stripe: no webhook secret configured")
	}
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	return &Verifier{secrets: clean, tolerance: tolerance}, nil
}

// Provider returns "stripe".
func (v *Verifier) Provider() string { return Provider }

// Verify checks the delivery's signature and reads the event from body. Any
// API version is accepted: billsync reads nothing from the payload that a
// version changes, so a mismatch must not lose an event. Errors wrap
// reconcile.ErrBadSignature; a verified body billsync cannot read becomes an
// event to ignore, never an error, so nothing from Stripe is lost. It asks
// nothing of Stripe, so it waits for nothing: ctx is the interface's.
func (v *Verifier) Verify(_ context.Context, header http.Header, body []byte) (reconcile.Receipt, error) {
	if err := v.verify(header, body); err != nil {
		return reconcile.Receipt{}, err
	}
	ev, connect := parseEvent(body)
	if connect && v.onConnect != nil {
		v.onConnect()
	}
	return reconcile.Receipt{Event: ev}, nil
}

// verify checks the Stripe-Signature header against every secret.
func (v *Verifier) verify(header http.Header, body []byte) error {
	sig := header.Get("Stripe-Signature")
	if sig == "" {
		return fmt.Errorf("%w: missing Stripe-Signature header", reconcile.ErrBadSignature)
	}
	var err error
	for _, secret := range v.secrets {
		if err = webhook.ValidatePayloadWithTolerance(body, sig, secret, v.tolerance); err == nil {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("%w: %w", reconcile.ErrBadSignature, err)
	}
	return nil
}

// eventJSON is the part of a Stripe event billsync reads. Only fields that
// have been stable across every API version are used. It reads both kinds:
// snapshot events (object "event": data.object, created in Unix seconds)
// and thin events (object "v2.core.event": related_object, created as an
// RFC 3339 string, context = the connected account).
type eventJSON struct {
	ID         string          `json:"id"`
	Object     string          `json:"object"`
	Type       string          `json:"type"`
	Created    json.RawMessage `json:"created"`
	APIVersion string          `json:"api_version"`
	Account    string          `json:"account"`
	Context    json.RawMessage `json:"context"`
	Data       struct {
		Object objectJSON `json:"object"`
	} `json:"data"`
	RelatedObject struct {
		ID   string `json:"id"`
		Type string `json:"type"`
	} `json:"related_object"`
}

// thinEvent is the object of a thin event's envelope.
const thinEvent = "v2.core.event"

// HealthEventResolved is the thin event by which Stripe says it failed to
// create an event, and has recovered: the event never reached webhooks
// nor GET /v1/events, and the object it was about is to be read again
// (docs.stripe.com/webhooks/handle-irrecoverable-events). It is stored
// under the event itself (reconcile.Related of type thinEvent), whose data
// the worker reads for the object.
const HealthEventResolved = "v2.core.health.event_generation_failure.resolved"

// objectJSON is the event's data.object, read only for the customer it names.
type objectJSON struct {
	ID       string          `json:"id"`
	Object   string          `json:"object"`
	Customer json.RawMessage `json:"customer"`
	Status   string          `json:"status"`
	Items    json.RawMessage `json:"items"`
	// What tells a transaction (transactionOf): an invoice's amount paid,
	// a checkout session's mode and payment status.
	AmountPaid    json.RawMessage `json:"amount_paid"`
	Mode          string          `json:"mode"`
	PaymentStatus string          `json:"payment_status"`
}

// ParseEvent reads a verified event body. It never fails: an event billsync
// cannot use comes back with IgnoreReason set, so it is stored (and answered
// 200) instead of being retried by Stripe forever. Every event it returns
// can be stored: text fields hold no NUL byte and at most
// reconcile.MaxFieldBytes, and Time is zero or within 2000..2200. The payload is kept byte for byte.
//
// A thin event whose related object is a subscription or an invoice names
// its customer only through a retrieve, which is the worker's: its
// CustomerID is the object's key (reconcile.Related).
func ParseEvent(body []byte) reconcile.Event {
	ev, _ := parseEvent(body)
	return ev
}

// parseEvent is ParseEvent, saying also whether the event is a connected
// account's (connect).
func parseEvent(body []byte) (ev reconcile.Event, connect bool) {
	ev = reconcile.Event{Provider: Provider, Payload: body}
	// One pass over the body. A field of the wrong JSON type (a number for
	// an id, say) leaves that field empty and the rest decoded, so only
	// syntax errors and a missing id make the event unreadable.
	var raw eventJSON
	err := json.Unmarshal(body, &raw)
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		err = nil
	}
	if err != nil || raw.ID == "" {
		// Still deduplicated: copies of one body share its hash.
		ev.DedupeKey = "body:" + reconcile.SHA256Hex(body)
		ev.EventID = ev.DedupeKey
		ev.Type = "unreadable"
		ev.IgnoreReason = "unreadable event: no event id in a JSON body"
		if err != nil {
			ev.IgnoreReason, _ = reconcile.Storable("unreadable event: " + err.Error())
		}
		return ev, false
	}
	// Fields PostgreSQL's text cannot hold (NUL) or index (huge) are stored
	// escaped and cut, and the event is ignored with the first such reason.
	var fields reconcile.Fields
	field := fields.Clean
	ev.EventID = field("event id", raw.ID)
	ev.DedupeKey = reconcile.DedupeKeyOf(raw.ID)
	ev.Type = cmp.Or(field("event type", raw.Type), "unknown")
	ev.APIVersion = field("api_version", raw.APIVersion)
	if t, problem := eventTimeOf(raw.Created); problem != "" && fields.Problem == "" {
		fields.Problem = problem
	} else {
		ev.Time = t
	}
	if fields.Problem != "" {
		ev.IgnoreReason = fields.Problem
		return ev, false
	}
	if connectedAccount(raw) {
		ev.IgnoreReason = ReasonConnect
		return ev, true
	}
	if raw.Object == thinEvent && raw.Type == HealthEventResolved {
		// The object whose event Stripe failed to create is in the event's
		// data, which only a retrieve gives: the worker's (CustomerOf).
		key, problem := reconcile.Storable(reconcile.Related{Type: thinEvent, ID: ev.EventID}.Key())
		if problem != "" {
			ev.IgnoreReason = "event id " + problem
		} else {
			ev.CustomerID = key
		}
		return ev, false
	}
	typ := raw.Type
	if raw.Object == thinEvent {
		// Thin events of v1 resources are named v1.<v1 event type>.
		typ = strings.TrimPrefix(typ, "v1.")
		if typ == raw.Type {
			typ = "" // a v2 resource's event: none affects billing state
		}
	}
	if !relevant(typ) {
		ev.IgnoreReason = fmt.Sprintf("event type %q does not affect billing state", raw.Type)
		return ev, false
	}
	if raw.Object == thinEvent {
		return thinCustomer(ev, raw), false
	}
	customer, problem := reconcile.Storable(customerOf(raw.Data.Object))
	switch {
	case problem != "":
		ev.IgnoreReason = "customer id " + problem
	case customer == "":
		ev.IgnoreReason = "event names no customer"
	default:
		ev.CustomerID = customer
		ev.Expect = expectationOf(raw.Data.Object)
	}
	ev.Transaction = transactionOf(raw.Type, raw.Data.Object)
	return ev, false
}

// transactionOf reports whether an event records a transaction, a payment
// Stripe counts toward the read allocation (ReadAllocation): an invoice
// paid with money (invoice.paid with amount_paid > 0: a subscription's
// first payment and each renewal; a $0 or fully credited invoice moves no
// money) or a one-off checkout paid (checkout.session.completed in payment
// mode, paid). Of the events billsync subscribes to (FeedTypes) these are
// the ones that mean money moved, each once: invoice.payment_succeeded
// repeats invoice.paid and is not counted. A thin event carries no amount
// and is not counted: the allocation derived errs low, never high.
func transactionOf(typ string, o objectJSON) bool {
	switch typ {
	case "invoice.paid":
		var paid int64
		return o.Object == "invoice" && json.Unmarshal(o.AmountPaid, &paid) == nil && paid > 0
	case "checkout.session.completed":
		return o.Mode == "payment" && o.PaymentStatus == "paid"
	}
	return false
}

// expectationOf reads what a subscription event's object says the
// subscription is now (id, status, one price per item), for the worker to
// check its fetch against; nil for other objects or unstorable values.
func expectationOf(o objectJSON) *reconcile.Expectation {
	if o.Object != "subscription" || o.ID == "" {
		return nil
	}
	e := &reconcile.Expectation{SubscriptionID: o.ID, Status: o.Status}
	for _, item := range listOf(o.Items) {
		price := item.Price.id
		if !price.ok {
			price = item.Plan.id
		}
		if price.ok {
			e.Prices = append(e.Prices, price.s)
		}
	}
	for _, v := range append([]string{e.SubscriptionID, e.Status}, e.Prices...) {
		if _, problem := reconcile.Storable(v); problem != "" {
			return nil
		}
	}
	return e
}

// thinCustomer reads the customer of a thin event from its related object:
// a customer is its own id; a subscription or an invoice is stored under
// its key (reconcile.Related), whose customer the worker reads; anything
// else names no customer billsync can read.
func thinCustomer(ev reconcile.Event, raw eventJSON) reconcile.Event {
	obj := raw.RelatedObject
	id, problem := reconcile.Storable(obj.ID)
	switch {
	case problem != "":
		ev.IgnoreReason = "related object id " + problem
	case id == "":
		ev.IgnoreReason = "thin event has no related object"
	case obj.Type == "customer":
		ev.CustomerID = id
	case obj.Type == "subscription" || obj.Type == "invoice":
		key, problem := reconcile.Storable(reconcile.Related{Type: obj.Type, ID: id}.Key())
		if problem != "" {
			ev.IgnoreReason = "related object id " + problem
			break
		}
		ev.CustomerID = key
	default:
		typ, _ := reconcile.Storable(obj.Type)
		ev.IgnoreReason = fmt.Sprintf("thin event's related object is a %q, which names no customer billsync reads", typ)
	}
	return ev
}

var jsonNull = []byte("null")

// connectedAccount reports whether the event is about a connected account
// (Stripe Connect): "account" on snapshot events, "context" on thin events
// (a string naming the account; an object carrying "account" is read too).
func connectedAccount(raw eventJSON) bool {
	if raw.Account != "" {
		return true
	}
	ctx := bytes.TrimSpace(raw.Context)
	if len(ctx) == 0 || bytes.Equal(ctx, jsonNull) {
		return false
	}
	var s string
	if json.Unmarshal(ctx, &s) == nil {
		return s != ""
	}
	var o struct {
		Account string `json:"account"`
	}
	return json.Unmarshal(ctx, &o) == nil && o.Account != ""
}

// eventTimeOf reads an event's creation time: Unix seconds on snapshot
// events, an RFC 3339 string on thin events. Absent is the zero time;
// absurd or unreadable is a reason to ignore the event.
func eventTimeOf(raw json.RawMessage) (time.Time, string) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, jsonNull) {
		return time.Time{}, ""
	}
	var sec int64
	if json.Unmarshal(raw, &sec) == nil {
		if sec == 0 {
			return time.Time{}, ""
		}
		if t := time.Unix(sec, 0).UTC(); sec > 0 && reconcile.SaneEventTime(t) {
			return t, ""
		}
		return time.Time{}, fmt.Sprintf("event time (created %d) is outside the years 2000-2200", sec)
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err == nil && reconcile.SaneEventTime(t) {
			return t.UTC(), ""
		}
		clean, _ := reconcile.Storable(s)
		return time.Time{}, fmt.Sprintf("event time (created %q) is not an RFC 3339 time within the years 2000-2200", clean)
	}
	// Another JSON type: unreadable like any mistyped field, left absent.
	return time.Time{}, ""
}

// relevant reports whether an event type can signal a change to a
// customer's plan, status, period or allowance.
func relevant(typ string) bool {
	for _, prefix := range []string{"customer.", "invoice.", "checkout.session.", "entitlements."} {
		if strings.HasPrefix(typ, prefix) {
			return true
		}
	}
	return false
}

// customerOf reads the customer an event object names: its customer field
// (an id, or an expanded object), or its own id when it is a customer.
func customerOf(o objectJSON) string {
	if o.Object == "customer" {
		return o.ID
	}
	if len(o.Customer) == 0 {
		return ""
	}
	var id string // null leaves it empty
	if json.Unmarshal(o.Customer, &id) == nil {
		return id
	}
	var expanded struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(o.Customer, &expanded) == nil {
		return expanded.ID
	}
	return ""
}
