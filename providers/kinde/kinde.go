// Package kinde is billsync's Kinde adapter: it verifies Kinde's webhooks
// (RS256 JWTs checked against the Kinde domain's key set) and reads a
// customer's current billing state from the Management API.
package kinde

import "github.com/billsync/billsync/reconcile"

// Provider is the provider name billsync stores for Kinde.
const Provider = reconcile.ProviderKinde
