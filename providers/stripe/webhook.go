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
	connect   Connect
	onConnect func() // nil: connect events are not counted
}

// SetOnConnect sets a function called for every verified event of a
// connected account stored as ignored because billsync does not serve the
// account (metrics). Call it before the verifier is used.
func (v *Verifier) SetOnConnect(f func()) { v.onConnect = f }

// Connect is how the intake takes Stripe Connect events (docs/connect.md).
type Connect struct {
	// Secrets are the Connect webhook endpoint's signing secrets: a
	// delivery verifies against these or the platform endpoint's, on
	// either URL.
	Secrets []string
	// Policy says which connected accounts are served; the events of the
	// others are stored as ignored with the reason.
	Policy reconcile.ConnectPolicy
	// Live: billsync reads live-mode data (a live key). A live Connect
	// endpoint also receives the test-mode events of accounts linked in
	// live mode, which a live key cannot read: stored as ignored.
	Live bool
}

// ServeConnect sets how the verifier takes Connect events. Call it before
// the verifier is used; without it every connected account's event is
// stored as ignored (reconcile.ReasonConnectOff).
func (v *Verifier) ServeConnect(c Connect) {
	v.connect = c
	v.secrets = append(v.secrets, cleanSecrets(c.Secrets)...)
}

// ReasonTestMode is why a connected account's test-mode event reaching a
// live deployment is stored as ignored.
const ReasonTestMode = "a test-mode event on a live deployment (a live key cannot read test-mode objects)"

// NewVerifier returns a Verifier accepting a signature made with any of
// secrets: during a rotation Stripe signs with the old and the new secret.
func NewVerifier(secrets []string, tolerance time.Duration) (*Verifier, error) {
	clean := cleanSecrets(secrets)
	if len(clean) == 0 {
		return nil, errors.New("stripe: no webhook secret configured")
	}
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	return &Verifier{secrets: clean, tolerance: tolerance}, nil
}

func cleanSecrets(secrets []string) []string {
	var clean []string
	for _, s := range secrets {
		if s = strings.TrimSpace(s); s != "" {
			clean = append(clean, s)
		}
	}
	return clean
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
	ev, conn := parseEvent(body)
	if conn.account != "" && ev.IgnoreReason == "" {
		if ok, why := v.connect.Policy.Serves(conn.account); !ok {
			ev.IgnoreReason = why
			if v.onConnect != nil {
				v.onConnect()
			}
		} else if v.connect.Live && conn.testMode {
			ev.IgnoreReason = ReasonTestMode
		}
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
	Livemode   *bool           `json:"livemode"`
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
	// CustomerAccount is whom it bills when customer is null: an Account
	// billed as a customer (Accounts v2, see customerKeyOf).
	CustomerAccount string          `json:"customer_account"`
	Status          string          `json:"status"`
	Items           json.RawMessage `json:"items"`
	// What tells a transaction (transactionOf): an invoice's amount paid,
	// a checkout session's mode and payment status.
	AmountPaid    json.RawMessage `json:"amount_paid"`
	Mode          string          `json:"mode"`
	PaymentStatus string          `json:"payment_status"`
}

// Stripe Connect's events of a connected account's authorisation: the
// account (the event's "account") authorised the platform, or withdrew.
const (
	eventAuthorized   = "account.application.authorized"
	eventDeauthorized = "account.application.deauthorized"
)

// connectOf is what parseEvent read of an event's connected account.
type connectOf struct {
	account  string // "" for the platform's own event
	testMode bool   // the event says livemode false
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
//
// A connected account's event (Stripe Connect: "account", or a thin
// event's "context") is keyed under its account (reconcile.Connected):
// its dedupe key, its customer, its related object. Which accounts are
// served is the Verifier's (ServeConnect), not the parse's.
func ParseEvent(body []byte) reconcile.Event {
	ev, _ := parseEvent(body)
	return ev
}

// parseEvent is ParseEvent, saying also whose event it is.
func parseEvent(body []byte) (ev reconcile.Event, conn connectOf) {
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
		return ev, conn
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
	account, accountProblem := connectedAccount(raw)
	if fields.Problem == "" {
		fields.Problem = accountProblem
	}
	if fields.Problem != "" {
		ev.IgnoreReason = fields.Problem
		return ev, conn
	}
	conn = connectOf{account: account, testMode: raw.Livemode != nil && !*raw.Livemode}
	if account == "" {
		return eventOf(ev, raw, account), conn
	}
	// Keyed under the account, and still storable: an id that makes the
	// key too long is deduplicated by its hash, and a customer's ignored.
	if ev.DedupeKey = reconcile.Connected(account, ev.DedupeKey); len(ev.DedupeKey) > reconcile.MaxFieldBytes {
		ev.DedupeKey = reconcile.Connected(account, "sha256:"+reconcile.SHA256Hex([]byte(raw.ID)))
	}
	if ev = eventOf(ev, raw, account); ev.CustomerID != "" {
		var problem string
		if ev.CustomerID, problem = reconcile.Storable(reconcile.Connected(account, ev.CustomerID)); problem != "" && ev.IgnoreReason == "" {
			ev.IgnoreReason = "customer id " + problem
		}
	}
	return ev, conn
}

// eventOf reads what an event (its id, type and time read) names: its
// customer or related object, by the id Stripe knows it by in account
// (parseEvent keys it under the account), or why it is ignored.
func eventOf(ev reconcile.Event, raw eventJSON, account string) reconcile.Event {
	if account != "" && (raw.Type == eventAuthorized || raw.Type == eventDeauthorized) {
		ev.Authorization = &reconcile.Authorization{Account: account, Authorized: raw.Type == eventAuthorized, At: ev.Time}
		ev.IgnoreReason = "recorded: the connected account's authorisation (no customer to reconcile)"
		return ev
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
		return ev
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
		return ev
	}
	if raw.Object == thinEvent {
		return thinCustomer(ev, raw)
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
	return ev
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

// maxAccountBytes bounds a connected account's id (Stripe's are about 21
// bytes), so keys under it stay storable.
const maxAccountBytes = 64

// connectedAccount reads the connected account an event is about (Stripe
// Connect): "account" on snapshot events, "context" on thin events (a
// string naming the account; an object carrying "account" is read too);
// "" for the platform's own. One billsync cannot key by is a problem.
func connectedAccount(raw eventJSON) (account, problem string) {
	account = raw.Account
	if ctx := bytes.TrimSpace(raw.Context); account == "" && len(ctx) > 0 && !bytes.Equal(ctx, jsonNull) {
		var o struct {
			Account string `json:"account"`
		}
		if json.Unmarshal(ctx, &account) != nil && json.Unmarshal(ctx, &o) == nil {
			account = o.Account
		}
	}
	switch {
	case account == "":
	case len(account) > maxAccountBytes:
		return "", fmt.Sprintf("connected account id longer than %d bytes", maxAccountBytes)
	case !reconcile.IsConnectedAccount(account):
		return "", fmt.Sprintf("connected account %q is not an acct_ id", account)
	}
	return account, ""
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
// (an id, or an expanded object), else its customer_account (an Account
// billed as a customer, read as customerKeyOf reads it), or its own id
// when it is a customer.
func customerOf(o objectJSON) string {
	if o.Object == "customer" {
		return o.ID
	}
	if id := customerIDOf(o.Customer); id != "" {
		return id
	}
	if reconcile.IsConnectedAccount(o.CustomerAccount) {
		return o.CustomerAccount
	}
	return ""
}

// customerIDOf reads a customer field: an id, or an expanded object's id;
// "" when it is absent, null or neither.
func customerIDOf(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var id string // null leaves it empty
	if json.Unmarshal(raw, &id) == nil {
		return id
	}
	var expanded struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(raw, &expanded) == nil {
		return expanded.ID
	}
	return ""
}
