// Package stripe is billsync's Stripe adapter: webhook verification and event
// parsing (snapshot and thin events), the API client (pinned API version,
// retries, shared and per-endpoint rate limits) and the version-tolerant
// readers that turn a customer and its subscriptions into a snapshot.
//
// stripe-go types never leave this package: callers get reconcile types. It
// must never treat a webhook payload as the truth about a customer; an event
// only says which customer to look at.
package stripe

import "github.com/billsync/billsync/reconcile"

// Provider is the name billsync stores for Stripe rows.
const Provider = reconcile.ProviderStripe
