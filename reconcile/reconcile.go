// Package reconcile is billsync's domain: accounts, events, snapshots, plans
// and the rules that keep an account equal to what its provider says.
//
// It defines the interfaces the adapters implement (the store, the providers)
// and imports none of them: no SQL, no HTTP, no provider SDK types here. A
// webhook is only a signal; state changes only by reconciling against a
// snapshot fetched from the provider's API.
package reconcile
