package reconcile_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/reconcile"
)

// TestDecideEmail: the email is part of the state kept equal to the
// provider's, so a changed email alone is applied and said, and an equal
// one is no change.
func TestDecideEmail(t *testing.T) {
	plans := examplePlans()
	cur := reconcile.Account{ID: 7, Provider: "stripe", CustomerID: "cus_1", UserRef: "u1", Email: "old@example.com",
		Plan: "pro", Status: "active", SubscriptionID: "sub_1", PeriodStart: periodStart, PeriodEnd: periodEnd, ObservedAt: t0}
	s := snap("active", "pro")
	s.Email = "new@example.com"
	ch := reconcile.Decide(cur, s, plans, t0.Add(time.Minute))
	require.Equal(t, reconcile.ResultApplied, ch.Result)
	require.Equal(t, "new@example.com", ch.Next.Email)
	require.Equal(t, `email now "new@example.com"`, ch.Outcome)

	s.Email = cur.Email
	ch = reconcile.Decide(cur, s, plans, t0.Add(time.Minute))
	require.Equal(t, reconcile.ResultUnchanged, ch.Result)
	require.Contains(t, ch.Outcome, "no change")
}
