package reconcile

import (
	"context"
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
	// CustomerID is the provider's customer the event names; empty if none.
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

// Delivery is one HTTP request carrying an event; copies are several
// deliveries of one event.
type Delivery struct {
	Event      Event
	DeliveryID string // a provider delivery id, when it sends one
	RemoteAddr string
}

// Stored is what the intake learned by storing a delivery.
type Stored struct {
	EventID   int64 // billsync's inbox_events.id
	Duplicate bool  // the event was already stored; this was a copy
	SeenCount int
	Status    EventStatus // pending or ignored
}

// Inbox stores deliveries. StoreDelivery must have committed before it
// returns a nil error: the caller answers 200 on that promise. It must not
// keep d.Event.Payload after it returns: the intake reuses that memory.
type Inbox interface {
	StoreDelivery(ctx context.Context, d Delivery) (Stored, error)
}

// StoredEvent is an event as billsync holds it: what support staff see and
// replay.
type StoredEvent struct {
	ID         int64       `json:"id"` // billsync's inbox_events.id
	Provider   string      `json:"provider"`
	DedupeKey  string      `json:"dedupe_key"`
	EventID    string      `json:"event_id"`
	Type       string      `json:"type"`
	CustomerID string      `json:"customer_id,omitempty"` // empty when the event names none
	Status     EventStatus `json:"status"`
	Outcome    string      `json:"outcome,omitempty"`
	SeenCount  int         `json:"seen_count"`
	ReceivedAt time.Time   `json:"received_at"`
}

// Retry is a customer whose reconcile failed: still queued and retried
// after a backoff (status pending), or given up on (dead) until a sweep,
// resync or replay revives it.
type Retry struct {
	Provider   string    `json:"provider"`
	CustomerID string    `json:"customer_id"`
	AccountID  int64     `json:"account_id,omitempty"` // 0 when billsync holds no account yet
	Trigger    string    `json:"trigger"`
	Status     string    `json:"status"` // pending or dead
	Attempts   int       `json:"attempts"`
	LastError  string    `json:"last_error"`
	DueAt      time.Time `json:"due_at"` // when the next attempt is due (pending)
}

// LedgerEntry is one ledger row, as support staff see it.
type LedgerEntry struct {
	Key         string    `json:"key"`
	Kind        string    `json:"kind"` // grant, usage, adjustment
	Plan        string    `json:"plan,omitempty"`
	Delta       int64     `json:"delta"`
	PeriodStart time.Time `json:"period_start"`
	Note        string    `json:"note,omitempty"`
	CreatedAt   time.Time `json:"created_at"`
}

// LogEntry is one reconcile_log row: who asked, why, and what it did.
type LogEntry struct {
	Trigger    string    `json:"trigger"`
	Actor      string    `json:"actor,omitempty"` // empty for rows older than actors
	Result     Result    `json:"result"`
	Outcome    string    `json:"outcome"`
	ObservedAt time.Time `json:"observed_at"`
	CreatedAt  time.Time `json:"created_at"`
}

// AccountDetail is everything billsync holds about one account, newest
// first: what support staff read before (and after) a resync.
// DetailLimit bounds each list of an AccountDetail (ledger, events,
// history): support staff read the newest rows; the tables keep every one.
const DetailLimit = 100

type AccountDetail struct {
	Account Account       `json:"account"`
	Balance int64         `json:"balance"`
	Ledger  []LedgerEntry `json:"ledger"`
	Events  []StoredEvent `json:"events"`
	History []LogEntry    `json:"history"`
}
