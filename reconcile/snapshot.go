package reconcile

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Snapshot is a customer's current billing state as read from the
// provider's API, in billsync's own words. It is the only input that changes
// an account.
type Snapshot struct {
	Provider   string
	CustomerID string
	// UserRef is the app's own reference for the customer (Stripe: a
	// metadata key), empty when the provider has none.
	UserRef string
	// Email is the customer's email at the provider, empty if none: how
	// support staff find an account.
	Email string
	// SubscriptionID is the subscription the snapshot describes; empty when
	// the customer has none at all.
	SubscriptionID string
	// Status is the provider's subscription status (active, trialing,
	// past_due, canceled, …); empty when there is no subscription.
	Status string
	// PriceRefs identify the subscription's price, most specific first
	// (Stripe: lookup key, price id, legacy plan id; Kinde: plan code).
	// Plans map one of them to a plan.
	PriceRefs []string
	// PeriodStart and PeriodEnd are the provider's current billing period;
	// both zero when the provider has none (then the calendar month is used).
	PeriodStart, PeriodEnd time.Time
	CancelAtPeriodEnd      bool
}

// Live reports whether the subscription's status entitles the customer to
// its plan. past_due keeps the plan while the provider retries the payment;
// every other status falls back to the default plan.
func (s Snapshot) Live() bool {
	switch s.Status {
	case "active", "trialing", "past_due":
		return true
	}
	return false
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
// allows it: every customer's snapshot, a page at a time from cursor.
type Lister interface {
	List(ctx context.Context, cursor string, page func(snaps []Snapshot, next string) error) error
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
