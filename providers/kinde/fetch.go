package kinde

import (
	"context"
	"slices"
	"time"

	"github.com/billsync/billsync/providers/internal/attempt"
	"github.com/billsync/billsync/reconcile"
)

var _ reconcile.Provider = (*Client)(nil)

// Fetch returns the customer's snapshot now: every agreement that has not
// expired is a current subscription (status active: Kinde reports no
// other) with one item, its plan code, for the agreement's period when it
// has one (else Decide uses the calendar month). An agreement that expires
// later is one cancelled at its end. No agreement at all gives the default
// plan. Kinde answers the agreements of a customer it does not know with
// an empty list, so such a customer is not told apart from one without a
// plan.
func (c *Client) Fetch(ctx context.Context, customerID string) (snap reconcile.Snapshot, err error) {
	attempt.Timed(ctx, &c.latency, func(ctx context.Context) { snap, err = c.fetch(ctx, customerID) })
	return snap, err
}

// CustomerOf: Kinde's events name their customer, so no Kinde event is
// stored under a related object; one that were would be ignored.
func (c *Client) CustomerOf(_ context.Context, obj reconcile.Related) (string, error) {
	return "", reconcile.Permanent("kinde: events name their customer; %s is not read", obj)
}

func (c *Client) fetch(ctx context.Context, customerID string) (reconcile.Snapshot, error) {
	if customerID == "" {
		return reconcile.Snapshot{}, reconcile.Permanent("kinde: empty customer id")
	}
	agreements, err := c.agreements(ctx, customerID)
	if err != nil {
		return reconcile.Snapshot{}, err
	}
	snap := snapshotOf(customerID, agreements, c.now())
	if c.cfg.Entitlements { // off: none from Kinde
		if snap.Entitlements, err = c.entitlements(ctx, customerID); err != nil {
			return reconcile.Snapshot{}, err
		}
	}
	return snap, nil
}

func snapshotOf(customerID string, agreements []agreement, now time.Time) reconcile.Snapshot {
	// Kinde's agreements do not name the app's user or organisation: the
	// account takes it from the customer's events.
	snap := reconcile.Snapshot{Provider: Provider, CustomerID: customerID, UserRefFromEvents: true}
	for _, a := range agreements {
		if !a.Expires.IsZero() && !a.Expires.After(now) {
			continue // ended
		}
		item := reconcile.Item{PriceRefs: []string{a.PlanCode}, Quantity: 1}
		if !a.PeriodStart.IsZero() && a.PeriodEnd.After(a.PeriodStart) {
			item.PeriodStart, item.PeriodEnd = a.PeriodStart, a.PeriodEnd
		}
		snap.Subscriptions = append(snap.Subscriptions, reconcile.Subscription{
			ID: a.ID, Status: "active", Created: a.Created, Items: []reconcile.Item{item},
			CancelAtPeriodEnd: !a.Expires.IsZero(),
		})
	}
	// Newest first, as the snapshot promises.
	slices.SortStableFunc(snap.Subscriptions, func(x, y reconcile.Subscription) int { return y.Created.Compare(x.Created) })
	return snap
}
