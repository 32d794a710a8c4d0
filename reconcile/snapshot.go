package reconcile

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Snapshot is a customer's current billing state as read from the
// provider's API, in billsync's own words. It is the only input that changes
// an account. The provider reports; Decide chooses (which subscription and
// item decide the plan is policy, in the plans file, not the provider's).
type Snapshot struct {
	Provider   string
	CustomerID string
	// UserRef is the app's own reference for the customer (Stripe: a
	// metadata key), empty when the provider has none.
	UserRef string
	// Email is the customer's email at the provider, empty if none: how
	// support staff find an account.
	Email string
	// UserRefFromEvents says the provider's API does not carry the app's
	// reference (Kinde): UserRef is then what the customer's newest event
	// named, and when it is empty the account keeps the one it has.
	UserRefFromEvents bool
	// Deleted reports that the provider deleted the customer (Stripe answers
	// retrieve with deleted: true and has canceled its subscriptions). Such
	// a customer falls to the default plan; one that never existed is
	// ErrCustomerUnknown instead.
	Deleted bool
	// Subscriptions are the customer's current subscriptions, every status
	// but the ended ones (Stripe: all but canceled), newest first. Empty
	// when the customer has none: the default plan applies. Decide weighs
	// all of them: those the plans file's policy keeps (Plans.Keeps) give
	// the best plan any of their items maps to; a provider must not pick
	// one for it.
	Subscriptions []Subscription
}

// Subscription is one of a customer's subscriptions.
type Subscription struct {
	ID string
	// Status is the provider's status (active, trialing, past_due, unpaid,
	// paused, incomplete, incomplete_expired, canceled; Kinde's own words
	// mapped onto these).
	Status  string
	Created time.Time
	// Items are the subscription's priced lines (a plan, add-ons, seats).
	Items []Item
	// CancelAtPeriodEnd: the subscription ends when its period does
	// (cancel_at_period_end, or a cancel_at no later than the period end).
	CancelAtPeriodEnd bool
	// TrialEnd is when the trial ends; zero when there is none.
	TrialEnd time.Time
	// CollectionPaused: the provider keeps the subscription but collects no
	// payment (Stripe: pause_collection set).
	CollectionPaused bool
}

// Item is one priced line of a subscription.
type Item struct {
	// PriceRefs identify the item's price, most specific first (Stripe:
	// lookup key, price id, legacy plan id; Kinde: plan code). Plans map
	// one of them to a plan.
	PriceRefs []string
	// Quantity is the number of units (seats) bought; 1 when the provider
	// says none (Decide reads anything below 1 as 1). It matters only to a
	// plan with a seat_allowance.
	Quantity int64
	// PeriodStart and PeriodEnd are the item's current billing period (the
	// subscription's, on provider versions that keep it there); both zero
	// when the provider has none (then the calendar month is used).
	PeriodStart, PeriodEnd time.Time
}

// Provider reads a customer's current state from a billing provider.
type Provider interface {
	Name() string
	// Fetch returns the customer's snapshot now. A customer the provider does
	// not know is ErrCustomerUnknown; data billsync cannot read is a
	// *PermanentError; anything else is transient and retried.
	Fetch(ctx context.Context, customerID string) (Snapshot, error)
}

// Lister is the optional bulk read the nightly sweep uses where a provider
// allows it: every customer's snapshot, a page at a time.
type Lister interface {
	// ListPage reads the page of the listing at cursor ("" its start):
	// the snapshots of its customers, the cursor after it, and whether a
	// page follows. next is a place to resume even when more is false
	// (resuming there lists nothing); it holds no newline.
	ListPage(ctx context.Context, cursor string) (snaps []Snapshot, next string, more bool, err error)
}

// Splitter is a Lister whose listing divides into parts listed at the same
// time: one request at a time, at a provider's latency, uses a small share
// of the sweep's rate budget.
type Splitter interface {
	// Split divides what remains of a listing after a page (next, with
	// more true) into the part the caller keeps listing and a part given
	// to another lister; between them they list each remaining customer
	// once. given is "" when the rest is not divided; kept is then where
	// the caller goes on (next, or next with what Split learnt). It may
	// ask the provider (a few small requests).
	Split(ctx context.Context, next string) (kept, given string, err error)
}

// ErrCustomerUnknown means the provider has no such customer: permanent.
var ErrCustomerUnknown = errors.New("customer unknown to the provider")

// PermanentError is a failure that retrying cannot fix (a required field
// absent, a malformed object). The events it answers end as ignored with
// Reason.
type PermanentError struct {
	Reason string
}

func (e *PermanentError) Error() string { return e.Reason }

// Permanent returns a *PermanentError with a formatted reason.
func Permanent(format string, args ...any) error {
	return &PermanentError{Reason: fmt.Sprintf(format, args...)}
}

// IsPermanent reports whether err cannot be fixed by retrying.
func IsPermanent(err error) bool {
	var p *PermanentError
	return errors.As(err, &p) || errors.Is(err, ErrCustomerUnknown)
}
