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
	// IgnoreReason, when set, stores the event as ignored with this reason
	// and queues nothing.
	IgnoreReason string
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
	ID         int64 // billsync's inbox_events.id
	Provider   string
	DedupeKey  string
	EventID    string
	Type       string
	CustomerID string // empty when the event names none
	Status     EventStatus
	Outcome    string
	SeenCount  int
	ReceivedAt time.Time
}
