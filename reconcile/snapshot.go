package reconcile

import "time"

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
	// Entitlements are the features the provider grants the customer now
	// (Stripe's active entitlements, Kinde's entitlements). A provider
	// whose entitlements are not enabled reports none.
	Entitlements []Entitlement
	// KeepEntitlements says this read did not ask for the entitlements
	// although they are enabled (a sweep's bulk listing): the account
	// keeps the ones it had, and Entitlements means nothing.
	KeepEntitlements bool
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
	// Product is the provider's id of the price's product (Stripe's
	// prod_…) and ProductPlan the value of its metadata ProductPlanKey
	// (billsync_plan), "" when it has none. A Stripe client reads them
	// only when the plans file maps products (Plans.ReadsProductPlans):
	// otherwise both are "".
	Product, ProductPlan string
	// Quantity is the number of units (seats) bought; 1 when the provider
	// says none (Decide reads anything below 1 as 1). It matters only to a
	// plan with a seat_allowance.
	Quantity int64
	// PeriodStart and PeriodEnd are the item's current billing period (the
	// subscription's, on provider versions that keep it there); both zero
	// when the provider has none (then the calendar month is used).
	PeriodStart, PeriodEnd time.Time
}
