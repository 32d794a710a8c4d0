package reconcile

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"time"
)

// Event is one verified webhook event, as the intake stores it. It is only a
// trigger: the fields are read to deduplicate and to know which customer to
// reconcile, never to change an account.
type Event struct {
	Provider  string
	DedupeKey string // unique per provider: the same for every copy
	EventID   string // the provider's own event id (may equal DedupeKey)
	Type      string
	// CustomerID is the provider's customer the event names; empty if
	// none. An event naming an object whose customer only the provider's
	// API tells (a Stripe thin event's subscription) holds the object's
	// Related key instead: the worker resolves it (see Related).
	CustomerID string
	// Time is when the provider says the change happened; zero if unknown.
	Time       time.Time
	APIVersion string
	Payload    []byte // the raw verified body
	// Expect is what the event's own object says its subscription is now;
	// nil when it says nothing billsync can check a fetch against.
	Expect *Expectation
	// UserRef is the app's reference for the customer as the event names
	// it, for providers whose API does not carry it (Kinde: data.user_id
	// or data.org_code); empty otherwise.
	UserRef string
	// IgnoreReason, when set, stores the event as ignored with this reason
	// and queues nothing.
	IgnoreReason string
	// Authorization, when set, is the event's word about a connected
	// account (Stripe's account.application.authorized or .deauthorized):
	// the store records it with the event, in its transaction (see
	// ConnectedAccountStore). Such an event names no customer.
	Authorization *Authorization
	// Transaction: the event records a payment (a transaction, for a
	// provider that allocates reads per transaction); the store counts
	// each stored once, by the day it arrived.
	Transaction bool
}

// Expectation is what an event's own object says one subscription is now.
// It never changes an account: a fetch that plainly contradicts it is read
// again once, in case the provider's API lagged behind its webhook.
type Expectation struct {
	SubscriptionID string `json:"subscription_id"`
	Status         string `json:"status,omitempty"`
	// Prices are the subscription's items' prices, one reference each.
	Prices []string `json:"prices,omitempty"`
}

// EventStatus is where a stored event stands.
type EventStatus string

const (
	EventPending EventStatus = "pending" // waiting for its customer's reconcile
	EventApplied EventStatus = "applied" // answered by a reconcile that read the provider
	EventIgnored EventStatus = "ignored" // unusable, or its customer's state cannot be applied; the outcome says why
	EventDead    EventStatus = "dead"    // its customer's reconcile gave up; revived by a sweep, resync or new webhook
)

// Receipt is one webhook receipt: an event as billsync received it, from
// one HTTP request (or one events-feed listing); copies are several
// receipts of one event. (An app delivery, AppDelivery, is the other way.)
type Receipt struct {
	Event      Event
	DeliveryID string // a provider delivery id, when it sends one
	RemoteAddr string
	// Source is where the event came from: SourceWebhook (empty means it
	// too) or SourceFeed. Its receipt says so, and its queue row's trigger.
	Source string
}

// Sources of a receipt.
const (
	SourceWebhook = "webhook" // a provider's HTTP delivery to the intake
	SourceFeed    = "feed"    // the events feed's listing (eventsfeed.go)
)

// Stored is what the intake learned by storing a receipt.
type Stored struct {
	InboxID   int64 // billsync's inbox_events.id (not the provider's Event.EventID)
	Duplicate bool  // the event was already stored; this was a copy
	SeenCount int
	Status    EventStatus // pending or ignored
}

// Inbox stores receipts. StoreReceipt must have committed before it
// returns a nil error: the caller answers 200 on that promise. It must not
// keep d.Event.Payload after it returns: the intake reuses that memory.
type Inbox interface {
	StoreReceipt(ctx context.Context, d Receipt) (Stored, error)
}

// DedupeKeyOf returns the dedupe key of a provider's event id: the id
// itself when it is storable as is, else "sha256:" and its hash, so copies
// of an id that had to be cut or escaped still meet.
func DedupeKeyOf(id string) string {
	if clean, problem := Storable(id); problem == "" {
		return clean
	}
	return "sha256:" + SHA256Hex([]byte(id))
}

// SHA256Hex is the hex SHA-256 of b.
func SHA256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
