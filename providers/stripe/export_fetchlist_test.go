package stripe

import (
	"context"

	"github.com/billsync/billsync/reconcile"
)

// FetchCustomer is the customer retrieve with its subscriptions expanded
// (one operation), without entitlements.
func (c *Client) FetchCustomer(ctx context.Context, customerID string) (reconcile.Snapshot, error) {
	return c.fetchCustomer(ctx, customerID)
}

// FetchBySubscriptions is the customer's subscription list with the
// customer expanded (the other operation), without entitlements.
func (c *Client) FetchBySubscriptions(ctx context.Context, customerID string) (reconcile.Snapshot, error) {
	return c.fetchBySubscriptions(ctx, customerID)
}
