// Package stripe is billsync's Stripe adapter: webhook verification and event
// parsing, the API client (pinned API version, retries, shared rate limit)
// and the version-tolerant readers that turn subscriptions into snapshots.
//
// stripe-go types never leave this package: callers get reconcile types. It
// must never treat a webhook payload as the truth about a customer; an event
// only says which customer to look at.
package stripe

// Provider is the name billsync stores for Stripe rows.
const Provider = "stripe"
