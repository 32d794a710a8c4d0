package reconcile

import "time"

// The read models of support: what the admin API, the console and the CLI
// show of an account, its events, its ledger, its history and the failing
// reconciles. Nothing here is written back; every change goes through a
// reconcile.

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
	// Meter is the metered feature the row belongs to; "" the default
	// meter (the plan's allowance).
	Meter string `json:"meter,omitempty"`
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

// DetailLimit bounds each list of an AccountDetail (ledger, events,
// history): support staff read the newest rows; the tables keep every one.
const DetailLimit = 100

// AccountDetail is everything billsync holds about one account, newest
// first: what support staff read before (and after) a resync.
type AccountDetail struct {
	Account Account `json:"account"`
	Balance int64   `json:"balance"`
	// Meters are the named meters' figures in the current period.
	Meters  []MeterBalance `json:"meters,omitempty"`
	Ledger  []LedgerEntry  `json:"ledger"`
	Events  []StoredEvent  `json:"events"`
	History []LogEntry     `json:"history"`
}
