package reconcile

import (
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
)

// What the app is told (docs/app-changes.md). One event type, with the
// fields that changed named, so that a field added to Account later is
// announced without a new type. Keep the names stable: apps parse them.
const (
	AccountChangeType = "account.updated"
	AppChangeVersion  = 1
	// TriggerUsage is the trigger of a change made by the app's own debit.
	TriggerUsage = "usage"
)

// Ledger entry kinds, as the ledger table and the app change name them.
const (
	LedgerGrant = "grant"
	LedgerUsage = "usage"
)

// AccountState is an account as the app sees it: its fields and its
// current period's balances.
type AccountState struct {
	Account
	Balance int64 `json:"balance"` // the default meter's
	// Meters are the named meters' balances (by meter key) in the current
	// period: those with ledger rows in it; nil when none.
	Meters map[string]int64 `json:"meters,omitempty"`
}

// LedgerMove is the ledger entry a change wrote: a grant or a debit, under
// its idempotency key, on one meter.
type LedgerMove struct {
	Meter       string    `json:"meter,omitempty"` // "" (absent): the default meter
	Kind        string    `json:"kind"`            // LedgerGrant or LedgerUsage
	Key         string    `json:"key"`
	Delta       int64     `json:"delta"`
	Plan        string    `json:"plan,omitempty"`
	PeriodStart time.Time `json:"period_start"`
}

// Why says what led to a change.
type Why struct {
	Trigger string `json:"trigger"` // webhook, sweep, resync, replay, usage
	Actor   string `json:"actor"`   // worker, sweep, cli:<user>, admin-api, console:<user>, app
	// EventIDs are the provider event ids the change answered (at most
	// MaxWhyEvents of them); Events counts them all.
	EventIDs []string `json:"event_ids"`
	Events   int      `json:"events"`
}

// MaxWhyEvents caps the event ids a change names: a sweep may answer
// thousands of pending events of one customer.
const MaxWhyEvents = 20

// AccountChange is one committed change of an account, as the app is told of
// it (by webhook and by the change feed).
type AccountChange struct {
	// ID is global and unique; it grows in write order, which is not
	// commit order (the feed's cursor is what orders).
	ID      int64     `json:"id"`
	Type    string    `json:"type"`
	Version int       `json:"version"`
	Time    time.Time `json:"time"` // when the change was written (database time)
	// Seq numbers the account's changes 1, 2, 3… in commit order: an app
	// discards a change whose Seq is not above the last it applied.
	Seq       int64  `json:"seq"`
	AccountID int64  `json:"account_id"`
	Provider  string `json:"provider"`
	// ConnectedAccount is the Stripe Connect account holding the
	// customer (see Connected); "" (absent) for the platform's own.
	ConnectedAccount string `json:"connected_account,omitempty"`
	UserRef          string `json:"user_ref"`
	// Created: the account is new (Before is null).
	Created bool          `json:"created"`
	Changed []string      `json:"changed"` // JSON names of the fields of After that differ from Before
	Before  *AccountState `json:"before"`
	After   AccountState  `json:"after"`
	// Ledger is the default meter's move, as version 1 always had it:
	// an app that knows only the default meter reads this one.
	Ledger *LedgerMove `json:"ledger,omitempty"`
	// LedgerMoves are every ledger row the change wrote, on any meter:
	// the default meter's first, then the named ones by the order the
	// grants were written.
	LedgerMoves []LedgerMove `json:"ledger_moves,omitempty"`
	Why         Why          `json:"why"`
}

// notAnnounced are the account fields whose change alone is not news to
// the app: the row id never changes, and observed_at moves on every
// reconcile.
var notAnnounced = map[string]bool{"id": true, "observed_at": true}

// AccountChangeOf returns what the app is told when an account goes from before
// to after (before nil: the account is new) writing the ledger moves
// (on any meter), and false when nothing the app sees changed: a
// reconcile that changes nothing tells nothing. Every field of
// AccountState counts, by its JSON name, so a field added to Account is
// announced without a change here. Times are compared as instants and
// told in UTC.
func AccountChangeOf(before *AccountState, after AccountState, moves []LedgerMove, why Why) (AccountChange, bool) {
	after = utcState(after)
	ch := AccountChange{Type: AccountChangeType, Version: AppChangeVersion, AccountID: after.ID, Provider: after.Provider,
		UserRef: after.UserRef, Created: before == nil, After: after, Why: why}
	ch.ConnectedAccount, _ = SplitConnected(after.CustomerID)
	moves = slices.Clone(moves)
	for i := range moves {
		moves[i].PeriodStart = moves[i].PeriodStart.UTC()
		if moves[i].Meter == "" && ch.Ledger == nil {
			ch.Ledger = &moves[i]
		}
	}
	if len(moves) > 0 {
		ch.LedgerMoves = moves
	}
	if ch.Why.EventIDs == nil {
		ch.Why.EventIDs = []string{}
	}
	var from AccountState
	if before != nil {
		from = utcState(*before)
		ch.Before = &from
	}
	ch.Changed = changedFields(reflect.ValueOf(from), reflect.ValueOf(after))
	if ch.Changed == nil {
		ch.Changed = []string{}
	}
	return ch, ch.Created || len(ch.Changed) > 0
}

var timeType = reflect.TypeFor[time.Time]()

// changedFields lists the JSON names of the fields of two values of one
// struct type that differ, walking embedded structs as encoding/json
// flattens them.
func changedFields(a, b reflect.Value) []string {
	var out []string
	t := a.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		if f.Anonymous && f.Type.Kind() == reflect.Struct {
			out = append(out, changedFields(a.Field(i), b.Field(i))...)
			continue
		}
		name := jsonName(f)
		if name == "" || notAnnounced[name] {
			continue
		}
		x, y := a.Field(i), b.Field(i)
		same := false
		if f.Type == timeType {
			same = x.Interface().(time.Time).Equal(y.Interface().(time.Time))
		} else {
			same = reflect.DeepEqual(x.Interface(), y.Interface())
		}
		if !same {
			out = append(out, name)
		}
	}
	return out
}

func jsonName(f reflect.StructField) string {
	tag := f.Tag.Get("json")
	if tag == "-" {
		return ""
	}
	if name, _, _ := strings.Cut(tag, ","); name != "" {
		return name
	}
	return f.Name
}

// utcState returns s with every time field of its account in UTC, and
// no meters as nil (an empty map is not a change).
func utcState(s AccountState) AccountState {
	if len(s.Meters) == 0 {
		s.Meters = nil
	}
	v := reflect.ValueOf(&s.Account).Elem()
	for i := range v.NumField() {
		if f := v.Field(i); f.Type() == timeType && f.CanSet() {
			f.Set(reflect.ValueOf(f.Interface().(time.Time).UTC()))
		}
	}
	return s
}

// ChangeCursor is a position in the change feed: changes are read in
// (XID, ID) order, XID being the writing transaction's id. The zero
// cursor is the feed's start.
type ChangeCursor struct {
	XID uint64
	ID  int64
}

// String renders the cursor as the feed hands it out: "<xid>-<id>".
func (c ChangeCursor) String() string {
	return strconv.FormatUint(c.XID, 10) + "-" + strconv.FormatInt(c.ID, 10)
}

// ParseChangeCursor reads a cursor the feed handed out; "" is the start.
// Anything else is ErrInvalid.
func ParseChangeCursor(s string) (ChangeCursor, error) {
	if s == "" {
		return ChangeCursor{}, nil
	}
	x, i, ok := strings.Cut(s, "-")
	xid, err1 := strconv.ParseUint(x, 10, 63) // the database keeps it as a bigint
	id, err2 := strconv.ParseInt(i, 10, 64)
	if !ok || err1 != nil || err2 != nil || id < 0 || strings.HasPrefix(x, "+") || strings.HasPrefix(i, "+") {
		return ChangeCursor{}, fmt.Errorf("%w: cursor %q is not one the feed handed out (<xid>-<id>)", ErrInvalid, s)
	}
	return ChangeCursor{XID: xid, ID: id}, nil
}

// ChangeFeedEntry is a change as the feed and the webhooks carry it: Body is
// its JSON exactly as stored, the same bytes on every read.
type ChangeFeedEntry struct {
	AccountChange
	Body   []byte
	Cursor ChangeCursor
}

// Delivery statuses of a change to one app endpoint.
const (
	DeliveryPending   = "pending"
	DeliveryDelivered = "delivered"
	DeliveryDead      = "dead"
)

// AppDelivery is one change to be sent to one of the app's endpoints.
type AppDelivery struct {
	ChangeID  int64
	Endpoint  string
	AccountID int64
	Seq       int64
	Status    string
	Attempts  int // attempts made so far
	CreatedAt time.Time
	DueAt     time.Time
	LastError string
	Body      []byte // the change's JSON, the same bytes on every attempt
	// Imported: an import's change, delivered after every live one and
	// in at most ImportSlots of the deliverer's slots.
	Imported bool
}

// AppDeliveryAttempt is what one attempt to deliver got.
type AppDeliveryAttempt struct {
	At         time.Time
	StatusCode int // 0: no answer (connection error, timeout)
	Took       time.Duration
	Error      string // empty for a 2xx
}

// AppDeliveryStats sums the deliveries to the app for metrics and the console.
type AppDeliveryStats struct {
	// LastChangeID is the newest change's id: changes written so far
	// (ids of rolled-back writes are skipped, so it may run a little
	// ahead of the rows).
	LastChangeID             int64
	Pending, Delivered, Dead int64
	// OldestUndelivered is when the oldest change not yet delivered was
	// written (a pending delivery's, or one not yet fanned out to an
	// endpoint); zero when there is none.
	OldestUndelivered time.Time
}
