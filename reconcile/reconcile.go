// Package reconcile is billsync's domain: accounts, events, snapshots, plans
// and the rules that keep an account equal to what its provider says.
//
// It defines the interfaces the adapters implement (the store, the providers)
// and imports none of them: no SQL, no HTTP, no provider SDK types here. A
// webhook is only a signal; state changes only by reconciling against a
// snapshot fetched from the provider's API.
//
// Where things are: the nouns (account.go, event.go, job.go, related.go's
// objects an event names instead of its customer, snapshot.go,
// plan.go, feature.go, outcome.go, support.go's read models), the
// interfaces the adapters implement (store.go, provider.go), the pure
// decisions (decide.go, feature.go's ResolveFeatures and Check, usage.go's
// DecideDebit, stale.go), the limits on outside input
// (limit.go), and the running parts: the worker (worker.go), reconciling one
// customer on demand (ondemand.go), and the sweep (sweep.go, sweeplist.go's
// parts, sweeprun.go's start, refusal and stop).
package reconcile
