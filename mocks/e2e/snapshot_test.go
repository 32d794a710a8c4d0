package e2e_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/reconcile"
)

// The small builders these tests share with reconcile's pure tests
// (reconcile/decide_test.go, feature_test.go), which they cannot import.

// oneSub is customer with one subscription (sub_1, created a month before
// start) of one item on refs for the period start–end.
func oneSub(customer, status string, start, end time.Time, refs ...string) reconcile.Snapshot {
	return reconcile.Snapshot{Provider: "stripe", CustomerID: customer, UserRef: "u1",
		Subscriptions: []reconcile.Subscription{{ID: "sub_1", Status: status, Created: start.AddDate(0, -1, 0),
			Items: []reconcile.Item{{PriceRefs: refs, Quantity: 1, PeriodStart: start, PeriodEnd: end}}}}}
}

// parsePlans parses a plans file that must be valid.
func parsePlans(t *testing.T, yaml string) *reconcile.Plans {
	t.Helper()
	plans, err := reconcile.ParsePlans([]byte(yaml))
	require.NoError(t, err)
	return plans
}

func n(v int64) *int64 { return &v }
