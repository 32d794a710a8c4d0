package reconcile_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/reconcile"
)

// TestDecisionWrite: one decision forms the whole write of a reconcile
// from the state read under the lock (the account and its ledger): the
// account, the ledger rows with their keys and deltas, the outcome, and
// what the app is told, its before read, not rebuilt. No database.
func TestDecisionWrite(t *testing.T) {
	plans := featurePlans()
	job := reconcile.Job{ID: 1, Provider: "stripe", CustomerID: "cus_1", Trigger: reconcile.TriggerWebhook}
	pro := snap("active", "price_pro")
	onFree := reconcile.Account{ID: 7, Provider: "stripe", CustomerID: "cus_1", UserRef: "u1", Plan: "free",
		Status: "active", SubscriptionID: "sub_1", PeriodStart: periodStart, PeriodEnd: periodEnd, ObservedAt: t0}
	// free's period: 10 granted, 3 used; ai_credits 20 granted, 5 used.
	freeLedger := reconcile.Ledger{
		{PeriodStart: periodStart, Granted: 10, Balance: 7, Rows: 2},
		{PeriodStart: periodStart, Meter: "ai_credits", Granted: 20, Balance: 15, Rows: 2},
	}
	grantRow := func(key, meter string, delta int64, note string) reconcile.LedgerRow {
		return reconcile.LedgerRow{LedgerMove: reconcile.LedgerMove{Meter: meter, Kind: reconcile.LedgerGrant, Key: key,
			Delta: delta, Plan: "pro", PeriodStart: periodStart}, PeriodEnd: periodEnd, Note: note}
	}

	t.Run("NewAccount", func(t *testing.T) {
		d := reconcile.NewDecider(job, pro, plans, t0)
		require.Equal(t, periodStart, d.Period, "the store reads the snapshot's period beside the account's")
		w := d.Decide(reconcile.Locked{Account: reconcile.Account{ID: 7, Provider: "stripe", CustomerID: "cus_1"}})
		require.NotNil(t, w.Account)
		require.Equal(t, "pro", w.Account.Plan)
		require.EqualValues(t, 7, w.Account.ID)
		require.Equal(t, []reconcile.LedgerRow{
			grantRow("grant:7:2026-11-03T00:00:00Z:pro:500", "", 500, "top up to 500 for plan pro"),
			grantRow("grant.ai_credits:7:2026-11-03T00:00:00Z:1000", "ai_credits", 1000, "top up ai_credits to 1000 (plan:pro)"),
		}, w.Ledger)
		require.Equal(t, reconcile.ResultApplied, w.Outcome.Result)
		require.EqualValues(t, 500, w.Outcome.Granted)
		require.Equal(t, reconcile.EventApplied, w.EventStatus)
		require.Equal(t, "worker", w.Actor)
		require.NotNil(t, w.Change)
		require.True(t, w.Change.Created)
		require.Nil(t, w.Change.Before)
		require.EqualValues(t, 500, w.Change.After.Balance)
		require.Equal(t, map[string]int64{"ai_credits": 1000}, w.Change.After.Meters)
		require.Len(t, w.Change.LedgerMoves, 2)
		require.Equal(t, w.Ledger[0].LedgerMove, *w.Change.Ledger)
		require.Equal(t, reconcile.Why{Trigger: "webhook", Actor: "worker", EventIDs: []string{}}, w.Change.Why)
	})

	t.Run("UpgradeMidPeriod", func(t *testing.T) {
		w := reconcile.NewDecider(job, pro, plans, t0.Add(time.Minute)).Decide(reconcile.Locked{Account: onFree, Ledger: freeLedger})
		require.Equal(t, []reconcile.LedgerRow{
			grantRow("grant:7:2026-11-03T00:00:00Z:pro:500", "", 490, "top up to 500 for plan pro"),
			grantRow("grant.ai_credits:7:2026-11-03T00:00:00Z:1000", "ai_credits", 980, "top up ai_credits to 1000 (plan:pro)"),
		}, w.Ledger, "topped up from what the period holds, use not counted")
		require.True(t, strings.HasPrefix(w.Outcome.Text, "plan set to pro, "), w.Outcome.Text)
		require.True(t, strings.HasSuffix(w.Outcome.Text, "Pro allowance granted (+490), granted ai_credits +980"), w.Outcome.Text)
		require.NotNil(t, w.Change.Before)
		require.EqualValues(t, 7, w.Change.Before.Balance, "before is what the ledger held")
		require.Equal(t, map[string]int64{"ai_credits": 15}, w.Change.Before.Meters)
		require.EqualValues(t, 497, w.Change.After.Balance)
		require.Equal(t, map[string]int64{"ai_credits": 995}, w.Change.After.Meters)
		require.Contains(t, w.Change.Changed, "plan")
		require.Contains(t, w.Change.Changed, "balance")
	})

	t.Run("RepeatWritesNoRow", func(t *testing.T) {
		first := reconcile.NewDecider(job, pro, plans, t0.Add(time.Minute)).Decide(reconcile.Locked{Account: onFree, Ledger: freeLedger})
		// The same snapshot again, on what the first wrote.
		after := freeLedger.With(first.Change.LedgerMoves...)
		w := reconcile.NewDecider(job, pro, plans, t0.Add(2*time.Minute)).Decide(reconcile.Locked{Account: *first.Account, Ledger: after})
		require.Empty(t, w.Ledger)
		require.Equal(t, reconcile.ResultUnchanged, w.Outcome.Result)
		require.NotNil(t, w.Account, "an unchanged account is written: it was observed later")
		require.Nil(t, w.Change, "nothing the app sees changed")
	})

	t.Run("NewPeriodOnlyMovesTheLedger", func(t *testing.T) {
		onPro := onFree
		onPro.Plan, onPro.ObservedAt = "pro", t0
		d := reconcile.NewDecider(job, oneSub("cus_1", "active", periodEnd, nextEnd, "price_pro"), plans, t0.Add(time.Minute))
		require.Equal(t, periodEnd, d.Period)
		// The store read both periods: the old one's rows stay there.
		w := d.Decide(reconcile.Locked{Account: onPro, Ledger: freeLedger})
		require.Equal(t, []string{"grant:7:2026-12-03T00:00:00Z:pro:500", "grant.ai_credits:7:2026-12-03T00:00:00Z:1000"},
			[]string{w.Ledger[0].Key, w.Ledger[1].Key})
		require.Equal(t, []int64{500, 1000}, []int64{w.Ledger[0].Delta, w.Ledger[1].Delta})
		require.EqualValues(t, 7, w.Change.Before.Balance)
		require.EqualValues(t, 500, w.Change.After.Balance, "the new period starts from its own rows")
		require.Equal(t, map[string]int64{"ai_credits": 1000}, w.Change.After.Meters)
	})

	t.Run("StaleWritesNothing", func(t *testing.T) {
		w := reconcile.NewDecider(job, pro, plans, t0.Add(-time.Minute)).Decide(reconcile.Locked{Account: onFree, Ledger: freeLedger})
		require.Nil(t, w.Account)
		require.Empty(t, w.Ledger)
		require.Nil(t, w.Change)
		require.Equal(t, reconcile.ResultStale, w.Outcome.Result)
		require.Equal(t, reconcile.EventApplied, w.EventStatus)
	})

	t.Run("IgnoredWritesNothingButItsOutcome", func(t *testing.T) {
		sweep := reconcile.Job{Provider: "stripe", CustomerID: "cus_1", Trigger: reconcile.TriggerSweep}
		d := reconcile.NewDecider(sweep, snap("active", "price_unknown"), plans, t0.Add(time.Minute))
		require.True(t, d.Period.IsZero(), "an unmapped price puts the account in no period")
		w := d.Decide(reconcile.Locked{Account: onFree, Ledger: freeLedger})
		require.Nil(t, w.Account)
		require.Empty(t, w.Ledger)
		require.Nil(t, w.Change)
		require.Equal(t, reconcile.EventIgnored, w.EventStatus)
		require.Equal(t, "sweep", w.Actor)
	})
}

// TestDecideDebitChange: a debit's write carries what the app is told:
// the meter's balance before (as read) and after.
func TestDecideDebitChange(t *testing.T) {
	acc := reconcile.Account{ID: 7, Provider: "stripe", CustomerID: "cus_1", UserRef: "u1", Plan: "pro",
		PeriodStart: periodStart, PeriodEnd: periodEnd, ObservedAt: t0}
	ledger := reconcile.Ledger{
		{PeriodStart: periodStart, Granted: 500, Balance: 400, Rows: 2},
		{PeriodStart: periodStart, Meter: "ai_credits", Granted: 1000, Balance: 1000, Rows: 1},
	}
	d := reconcile.Debit{UserRef: "u1", Feature: "ai_credits", Key: "k1", Amount: 30}
	res, err := reconcile.DecideDebit(d, reconcile.DebitState{Account: acc, Balance: 1000, Ledger: ledger})
	require.NoError(t, err)
	require.NotNil(t, res.Change)
	require.Equal(t, []reconcile.LedgerMove{{Meter: "ai_credits", Kind: reconcile.LedgerUsage, Key: "usage.ai_credits:7:k1",
		Delta: -30, Plan: "pro", PeriodStart: periodStart}}, res.Change.LedgerMoves)
	require.Equal(t, map[string]int64{"ai_credits": 1000}, res.Change.Before.Meters)
	require.Equal(t, map[string]int64{"ai_credits": 970}, res.Change.After.Meters)
	require.EqualValues(t, 400, res.Change.After.Balance)
	require.Equal(t, []string{"meters"}, res.Change.Changed)
	require.Equal(t, reconcile.Why{Trigger: reconcile.TriggerUsage, Actor: "app", EventIDs: []string{}}, res.Change.Why)

	replay, err := reconcile.DecideDebit(d, reconcile.DebitState{Account: acc, Prior: &res.Entry, PriorBalance: 970, Ledger: ledger})
	require.NoError(t, err)
	require.Nil(t, replay.Change, "a replay writes nothing, and tells nothing")
}
