package stripe

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

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

// MaxFieldBytes bounds every text field billsync stores from an event (id,
// type, API version, customer). Stripe's own are under 100 bytes; PostgreSQL
// cannot index a key of more than about 2,700 bytes, and the dedupe key has a
// unique index.
const MaxFieldBytes = 255

// Event times outside [minEventTime, maxEventTime) are absurd: Stripe did not
// exist before 2000, and PostgreSQL's timestamptz cannot hold most int64
// seconds at all (max int64 came back as 1969).
var (
	minEventTime = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	maxEventTime = time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)
)

// ParseEvent reads a verified event body. It never fails: an event billsync
// cannot use comes back with IgnoreReason set, so it is stored (and answered
// 200) instead of being retried by Stripe forever. Every event it returns
// can be stored: text fields hold no NUL byte and at most MaxFieldBytes, and
// Time is zero or within 2000..2200. The payload is kept byte for byte.
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
		ev.DedupeKey = "body:" + sha256Hex(body)
		ev.EventID = ev.DedupeKey
		ev.Type = "unreadable"
		ev.IgnoreReason = "unreadable event: no event id in a JSON body"
		if err != nil {
			ev.IgnoreReason, _ = storable("unreadable event: " + err.Error())
		}
		return ev
	}
	// Fields PostgreSQL's text cannot hold (NUL) or index (huge) are stored
	// escaped and cut, and the event is ignored with the first such reason.
	var reason string
	field := func(name, s string) string {
		clean, problem := storable(s)
		if problem != "" && reason == "" {
			reason = name + " " + problem
		}
		return clean
	}
	ev.EventID = field("event id", raw.ID)
	ev.DedupeKey = raw.ID
	if ev.EventID != raw.ID {
		// Copies must still meet: the hash of the full id is unique, short
		// and free of NUL.
		ev.DedupeKey = "sha256:" + sha256Hex([]byte(raw.ID))
	}
	ev.Type = cmp.Or(field("event type", raw.Type), "unknown")
	ev.APIVersion = field("api_version", raw.APIVersion)
	if raw.Created != 0 {
		if t := time.Unix(raw.Created, 0).UTC(); raw.Created > 0 && !t.Before(minEventTime) && t.Before(maxEventTime) {
			ev.Time = t
		} else if reason == "" {
			reason = fmt.Sprintf("event time (created %d) is outside the years 2000-2200", raw.Created)
		}
	}
	if reason != "" {
		ev.IgnoreReason = reason
		return ev
	}
	if !relevant(raw.Type) {
		ev.IgnoreReason = fmt.Sprintf("event type %q does not affect billing state", raw.Type)
		return ev
	}
	customer, problem := storable(customerOf(raw.Data.Object))
	switch {
	case problem != "":
		ev.IgnoreReason = "customer id " + problem
	case customer == "":
		ev.IgnoreReason = "event names no customer"
	default:
		ev.CustomerID = customer
	}
	return ev
}

// storable returns s fit for a PostgreSQL text column: NUL bytes escaped as
// \x00 and at most MaxFieldBytes (cut on a rune boundary). problem says what
// had to change; it is empty when s is returned as is. encoding/json has
// already replaced invalid UTF-8.
func storable(s string) (clean, problem string) {
	if strings.IndexByte(s, 0) >= 0 {
		s, problem = strings.ReplaceAll(s, "\x00", `\x00`), "contains a NUL byte"
	}
	if len(s) > MaxFieldBytes {
		if problem == "" {
			problem = fmt.Sprintf("longer than %d bytes", MaxFieldBytes)
		}
		cut := MaxFieldBytes
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut]
	}
	return s, problem
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
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
