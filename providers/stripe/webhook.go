package stripe

import (
	"crypto/sha256"
	"encoding/hex"
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
// events.
type Verifier struct {
	secrets   []string
	tolerance time.Duration
}

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
// event to ignore, never an error, so nothing from Stripe is lost.
func (v *Verifier) Verify(header http.Header, body []byte) (reconcile.Delivery, error) {
	sig := header.Get("Stripe-Signature")
	if sig == "" {
		return reconcile.Delivery{}, fmt.Errorf("%w: missing Stripe-Signature header", reconcile.ErrBadSignature)
	}
	var err error
	for _, secret := range v.secrets {
		if err = webhook.ValidatePayloadWithTolerance(body, sig, secret, v.tolerance); err == nil {
			break
		}
	}
	if err != nil {
		return reconcile.Delivery{}, fmt.Errorf("%w: %w", reconcile.ErrBadSignature, err)
	}
	return reconcile.Delivery{Event: ParseEvent(body)}, nil
}

// eventJSON is the part of a Stripe event billsync reads. Only fields that
// have been stable across every API version are used.
type eventJSON struct {
	ID         string `json:"id"`
	Object     string `json:"object"`
	Type       string `json:"type"`
	Created    int64  `json:"created"`
	APIVersion string `json:"api_version"`
	Data       struct {
		Object objectJSON `json:"object"`
	} `json:"data"`
}

// objectJSON is the event's data.object, read only for the customer it names.
type objectJSON struct {
	ID       string          `json:"id"`
	Object   string          `json:"object"`
	Customer json.RawMessage `json:"customer"`
}

// ParseEvent reads a verified event body. It never fails: an event billsync
// cannot use comes back with IgnoreReason set, so it is stored (and answered
// 200) instead of being retried by Stripe forever.
func ParseEvent(body []byte) reconcile.Event {
	ev := reconcile.Event{Provider: Provider, Payload: body}
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
		sum := sha256.Sum256(body)
		ev.DedupeKey = "body:" + hex.EncodeToString(sum[:])
		ev.EventID = ev.DedupeKey
		ev.Type = "unreadable"
		ev.IgnoreReason = "unreadable event: no event id in a JSON body"
		if err != nil {
			ev.IgnoreReason = "unreadable event: " + err.Error()
		}
		return ev
	}
	ev.DedupeKey, ev.EventID, ev.Type, ev.APIVersion = raw.ID, raw.ID, raw.Type, raw.APIVersion
	if raw.Created > 0 {
		ev.Time = time.Unix(raw.Created, 0).UTC()
	}
	if ev.Type == "" {
		ev.Type = "unknown"
	}
	if !relevant(raw.Type) {
		ev.IgnoreReason = fmt.Sprintf("event type %q does not affect billing state", raw.Type)
		return ev
	}
	ev.CustomerID = customerOf(raw.Data.Object)
	if ev.CustomerID == "" {
		ev.IgnoreReason = "event names no customer"
	}
	return ev
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
