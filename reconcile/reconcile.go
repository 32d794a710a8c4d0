// Package reconcile is billsync's domain: accounts, events, snapshots, plans
// and the rules that keep an account equal to what its provider says.
//
// It defines the interfaces the adapters implement (the store, the providers)
// and imports none of them: no SQL, no HTTP, no provider SDK types here. A
// webhook is only a signal; state changes only by reconciling against a
// snapshot fetched from the provider's API.
//
// Where things are:
//   - the nouns: account.go, event.go, job.go, related.go (the object a
//     thin event names before its customer is known), snapshot.go, plan.go,
//     feature.go, outcome.go, accountchange.go (what the app is told of a
//     change), support.go and overview.go (the read models of support and
//     of the console's first page);
//   - the interfaces the adapters implement: store.go, provider.go, and
//     error.go's failure classes;
//   - the pure decisions: decide.go, feature.go's ResolveFeatures and
//     Check, usage.go's DecideDebit, stale.go, and limit.go's limits on
//     outside input;
//   - the running parts: the worker (worker.go), reconciling one customer
//     on demand (ondemand.go), the sweep (sweep.go, sweeplist.go's parts,
//     sweeprun.go's start, refusal and stop), the provider's events feed
//     (eventsfeed.go), the app deliverer (appdeliver.go), the requests in flight
//     sized to a provider's budget (budget.go) and the budget every replica
//     shares (spend.go), what a prune may forget (retention.go), and the
//     broadcast that wakes change-feed long polls (signal.go).
package reconcile
