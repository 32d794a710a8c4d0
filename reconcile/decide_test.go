package reconcile_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/reconcile"
)

var (
	t0          = time.Date(2026, 11, 14, 10, 0, 0, 0, time.UTC)
	periodStart = time.Date(2026, 11, 3, 0, 0, 0, 0, time.UTC)
	periodEnd   = time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
)

func snap(status string, refs ...string) reconcile.Snapshot {
	return reconcile.Snapshot{Provider: "stripe", CustomerID: "cus_1", UserRef: "u1", SubscriptionID: "sub_1",
		Status: status, PriceRefs: refs, PeriodStart: periodStart, PeriodEnd: periodEnd}
}

func TestDecide(t *testing.T) {
	plans := examplePlans(t)
	onFree := reconcile.Account{ID: 7, Provider: "stripe", CustomerID: "cus_1", UserRef: "u1", Plan: "free",
		Status: "active", SubscriptionID: "sub_1", PeriodStart: periodStart, PeriodEnd: periodEnd, ObservedAt: t0}

	t.Run("NewCustomerWithoutSubscription", func(t *testing.T) {
		ch := reconcile.Decide(reconcile.Account{ID: 1}, reconcile.Snapshot{Provider: "stripe", CustomerID: "cus_1"}, plans, t0)
		require.Equal(t, reconcile.ResultApplied, ch.Result)
		require.Equal(t, "free", ch.Next.Plan)
		// No provider period: the UTC calendar month.
		require.Equal(t, time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), ch.Next.PeriodStart)
		require.Equal(t, time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), ch.Next.PeriodEnd)
		require.EqualValues(t, 10, ch.Grant.Allowance)
		require.Equal(t, t0, ch.Next.ObservedAt)
	})
	t.Run("UpgradeTopsUpToTheNewAllowance", func(t *testing.T) {
		ch := reconcile.Decide(onFree, snap("active", "pro", "price_pro"), plans, t0.Add(time.Minute))
		require.Equal(t, reconcile.ResultApplied, ch.Result)
		require.Equal(t, "pro", ch.Next.Plan)
		require.Equal(t, periodStart, ch.Next.PeriodStart)
		require.EqualValues(t, 490, ch.Grant.TopUp(10), "free 10 then pro 500 in one period: +490")
		require.Equal(t, "plan set to pro, Pro allowance granted (+490)", ch.Describe(490))
		require.Equal(t, "grant:7:2026-11-03T00:00:00Z:pro", ch.Grant.Key(7))
	})
	t.Run("DowngradeNeverClawsBack", func(t *testing.T) {
		onPro := onFree
		onPro.Plan = "pro"
		ch := reconcile.Decide(onPro, snap("active", "free"), plans, t0.Add(time.Minute))
		require.Equal(t, "free", ch.Next.Plan)
		require.Zero(t, ch.Grant.TopUp(500))
	})
	t.Run("OlderSnapshotIsStale", func(t *testing.T) {
		for _, at := range []time.Time{t0.Add(-time.Second), t0} { // same instant too: no tie may regress
			ch := reconcile.Decide(onFree, snap("canceled", "free"), plans, at)
			require.Equal(t, reconcile.ResultStale, ch.Result)
			require.Equal(t, onFree, ch.Next)
			require.Contains(t, ch.Outcome, "stale: a newer snapshot")
		}
	})
	t.Run("UnmappedPriceIsIgnored", func(t *testing.T) {
		ch := reconcile.Decide(onFree, snap("active", "price_x"), plans, t0.Add(time.Minute))
		require.Equal(t, reconcile.ResultIgnored, ch.Result)
		require.Equal(t, "ignored: price price_x maps to no plan", ch.Outcome)
		require.Nil(t, ch.Grant)
	})
	t.Run("CanceledFallsBackToDefault", func(t *testing.T) {
		onPro := onFree
		onPro.Plan = "pro"
		ch := reconcile.Decide(onPro, snap("canceled", "pro"), plans, t0.Add(time.Minute))
		require.Equal(t, "free", ch.Next.Plan)
		require.Equal(t, "canceled", ch.Next.Status)
		require.Equal(t, time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), ch.Next.PeriodStart)
		require.Contains(t, ch.Outcome, "plan set to free")
	})
	t.Run("SameStateIsNoChange", func(t *testing.T) {
		ch := reconcile.Decide(onFree, snap("active", "free"), plans, t0.Add(time.Minute))
		require.Equal(t, reconcile.ResultUnchanged, ch.Result)
		require.Equal(t, "no change: stripe says plan free (active) now, as already applied", ch.Describe(0))
		require.Equal(t, t0.Add(time.Minute), ch.Next.ObservedAt, "observed_at advances even when nothing else does")
	})
	t.Run("PastDueKeepsThePlan", func(t *testing.T) {
		ch := reconcile.Decide(onFree, snap("past_due", "pro"), plans, t0.Add(time.Minute))
		require.Equal(t, "pro", ch.Next.Plan)
	})
}
