package stripe

import (
	"context"
	"log/slog"

	"golang.org/x/time/rate"

	"github.com/billsync/billsync/reconcile"
)

// listing resolves customers from a listing of every subscription (newest
// first across all customers) by the rule Fetch uses (pick): the newest
// live subscription, else the newest of the rest.
//
// Because the listing is newest first, the first live subscription met for
// a customer is the one pick would choose: nothing later can outrank it. So
// such a customer is resolved on the page it is met, and every later (older)
// subscription of theirs is skipped. A customer whose subscriptions met so
// far are all ended could still have an older live one on a later page, so
// the newest ended one is staged and the customer is resolved only at the
// end of the listing, when all their subscriptions are known.
//
// Memory, chosen over staging in PostgreSQL for simplicity: one set entry
// per customer met (measured ≈ 60 bytes: the id and the map's overhead)
// plus one compact entry per customer with no live subscription met yet
// (only what a customer without a live subscription is decided by: status,
// subscription id, cancel flag, user reference; period and prices play no
// part, the default plan on the calendar month applies). 1M subscriptions
// are at most 1M customers. Measured heap per customer (synthetic
// subscriptions, ids of Stripe's length): 59 bytes live, 193 bytes staged,
// so ≈ 60 MB for 1M live customers and ≈ 195 MB in the worst case of a
// million distinct customers who all cancelled (the 200 MB RSS target is
// then tight; staging in PostgreSQL is the next step if that case is real).
// Raw JSON is never kept past its page.
type listing struct {
	userRefKey string
	log        *slog.Logger
	met        map[string]struct{} // customers resolved or left out
	staged     map[string]ended    // customers with only ended subscriptions so far
}

// ended is what decides a customer whose subscriptions are all ended.
type ended struct {
	subscriptionID, status, userRef, email string
	cancelAtPeriodEnd                      bool
}

func newListing(userRefKey string, log *slog.Logger) *listing {
	return &listing{userRefKey: userRefKey, log: log, met: map[string]struct{}{}, staged: map[string]ended{}}
}

// add reads one listed subscription and returns its customer's snapshot when
// this subscription resolves them.
func (l *listing) add(raw []byte) (reconcile.Snapshot, bool) {
	customer, ok := customerIDOf(raw)
	if !ok {
		return reconcile.Snapshot{}, false
	}
	if _, done := l.met[customer]; done {
		return reconcile.Snapshot{}, false
	}
	if deleted, _ := boolAt(raw, "customer", "deleted"); deleted {
		// Fetch calls a deleted customer unknown: left out, so the sweep
		// reconciles its account one by one and records why.
		l.met[customer] = struct{}{}
		delete(l.staged, customer)
		return reconcile.Snapshot{}, false
	}
	chosen, err := pick([][]byte{raw}) // the same id/status checks as Fetch
	var snap reconcile.Snapshot
	if err == nil {
		snap, err = snapshotOf(chosen)
	}
	if err != nil {
		// Fetch would fail the customer permanently: left out, so Fetch
		// reconciles it and records the reason.
		l.log.Warn("stripe subscription left out of the sweep listing", "customer", customer, slog.Any("error", err))
		l.met[customer] = struct{}{}
		delete(l.staged, customer)
		return reconcile.Snapshot{}, false
	}
	snap.UserRef, _ = stringAt(raw, "customer", "metadata", l.userRefKey)
	snap.Email, _ = stringAt(raw, "customer", "email")
	if !snap.Live() {
		if _, ok := l.staged[customer]; !ok { // the newest ended one
			l.staged[customer] = ended{snap.SubscriptionID, snap.Status, snap.UserRef, snap.Email, snap.CancelAtPeriodEnd}
		}
		return reconcile.Snapshot{}, false
	}
	l.met[customer] = struct{}{}
	delete(l.staged, customer)
	return snap, true
}

// rest returns the staged customers: at the end of the listing all their
// subscriptions are known and none is live.
func (l *listing) rest() []reconcile.Snapshot {
	snaps := make([]reconcile.Snapshot, 0, len(l.staged))
	for customer, e := range l.staged {
		snaps = append(snaps, reconcile.Snapshot{Provider: Provider, CustomerID: customer, UserRef: e.userRef, Email: e.email,
			SubscriptionID: e.subscriptionID, Status: e.status, CancelAtPeriodEnd: e.cancelAtPeriodEnd})
	}
	return snaps
}

// listLimiterKey carries List's own rate limiter to attemptTransport.
type listLimiterKey struct{}

// listLimiter returns the limiter List put on ctx, or nil.
func listLimiter(ctx context.Context) *rate.Limiter {
	l, _ := ctx.Value(listLimiterKey{}).(*rate.Limiter)
	return l
}
