package store_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store"
	"github.com/billsync/billsync/store/storetest"
)

// changeCount is how many changes the store holds now (committed rows,
// without waiting for the feed to show them).
func changeCount(t *testing.T, st *store.Store) int {
	t.Helper()
	return storetest.Counts(t, st)["account_changes"]
}

// meteredAccount is a pro account of user u1 on the feature plans: 500 on
// the default meter, 1000 ai_credits.
func meteredAccount(t *testing.T, st *store.Store) int64 {
	t.Helper()
	snap := liveSnap("cus_1", "price_pro")
	snap.UserRef = "u1"
	reconcileAs(t, st, "evt_1", snap, testenv.FeaturePlans())
	a, err := st.Account(context.Background(), "stripe", "cus_1")
	require.NoError(t, err)
	return a.ID
}

// TestMeterDebitChange: a named meter's debit writes exactly one change:
// the default balance unchanged, the meter's balance before → after, the
// move naming its meter and no default ledger; a repeated key writes
// nothing; a default debit keeps the meters as they are.
func TestMeterDebitChange(t *testing.T) {
	ctx := context.Background()
	st := storetest.NewStore(t)
	id := meteredAccount(t, st)
	require.Equal(t, 1, changeCount(t, st))

	debit := reconcile.Debit{UserRef: "u1", Feature: "ai_credits", Key: "a", Amount: 50}
	_, err := st.Debit(ctx, debit, reconcile.DecideDebit)
	require.NoError(t, err)
	require.Equal(t, 2, changeCount(t, st), "one change per meter debit")
	ch := allChanges(t, st, 2)[1]
	require.Equal(t, []string{"meters"}, ch.Changed)
	require.Equal(t, int64(500), ch.Before.Balance)
	require.Equal(t, int64(500), ch.After.Balance)
	require.Equal(t, map[string]int64{"ai_credits": 1000}, ch.Before.Meters)
	require.Equal(t, map[string]int64{"ai_credits": 950}, ch.After.Meters)
	require.Nil(t, ch.Ledger, "ledger is the default meter's: it did not move")
	require.Equal(t, []reconcile.LedgerMove{{Meter: "ai_credits", Kind: "usage", Key: fmt.Sprintf("usage.ai_credits:%d:a", id),
		Delta: -50, Plan: "pro", PeriodStart: periodStart}}, ch.LedgerMoves)
	require.Equal(t, reconcile.Why{Trigger: "usage", Actor: "app", EventIDs: []string{}}, ch.Why)

	res, err := st.Debit(ctx, debit, reconcile.DecideDebit)
	require.NoError(t, err)
	require.True(t, res.Replayed)
	_, err = st.Debit(ctx, reconcile.Debit{UserRef: "u1", Feature: "ai_credits", Key: "big", Amount: 951}, reconcile.DecideDebit)
	require.ErrorIs(t, err, reconcile.ErrInsufficient)
	require.Equal(t, 2, changeCount(t, st), "a repeated key or a refused debit writes no change")

	_, err = st.Debit(ctx, reconcile.Debit{UserRef: "u1", Key: "a", Amount: 4}, reconcile.DecideDebit)
	require.NoError(t, err)
	def := allChanges(t, st, 3)[2]
	require.Equal(t, []string{"balance"}, def.Changed)
	require.Equal(t, map[string]int64{"ai_credits": 950}, def.Before.Meters)
	require.Equal(t, def.Before.Meters, def.After.Meters)
	require.Equal(t, int64(-4), def.Ledger.Delta)
	require.Equal(t, []reconcile.LedgerMove{*def.Ledger}, def.LedgerMoves)
}

// TestMeterGrantsInOneChange: a reconcile that grants the default meter
// and a named one writes one change with both moves and both balances
// before → after; a renewal's before is the old period's; the same
// snapshot again writes nothing.
func TestMeterGrantsInOneChange(t *testing.T) {
	ctx := context.Background()
	st := storetest.NewStore(t)
	plans := testenv.FeaturePlans()
	id := meteredAccount(t, st)
	created := allChanges(t, st, 1)[0]
	require.Len(t, created.LedgerMoves, 2)
	require.Equal(t, map[string]int64{"ai_credits": 1000}, created.After.Meters)

	team := liveSnap("cus_1", "price_team")
	team.UserRef = "u1"
	reconcileAs(t, st, "evt_2", team, plans)
	require.Equal(t, 2, changeCount(t, st), "one change for the plan and both grants")
	up := allChanges(t, st, 2)[1]
	require.Equal(t, []string{"plan", "features", "balance", "meters"}, up.Changed)
	require.Equal(t, int64(500), up.Before.Balance)
	require.Equal(t, int64(2000), up.After.Balance)
	require.Equal(t, map[string]int64{"ai_credits": 1000}, up.Before.Meters)
	require.Equal(t, map[string]int64{"ai_credits": 5000}, up.After.Meters)
	def := reconcile.LedgerMove{Kind: "grant", Key: fmt.Sprintf("grant:%d:2026-11-03T00:00:00Z:team:2000", id),
		Delta: 1500, Plan: "team", PeriodStart: periodStart}
	ai := reconcile.LedgerMove{Meter: "ai_credits", Kind: "grant", Key: fmt.Sprintf("grant.ai_credits:%d:2026-11-03T00:00:00Z:5000", id),
		Delta: 4000, Plan: "team", PeriodStart: periodStart}
	require.Equal(t, []reconcile.LedgerMove{def, ai}, up.LedgerMoves)
	require.Equal(t, def, *up.Ledger)

	reconcileAs(t, st, "evt_3", team, plans)
	require.Equal(t, 2, changeCount(t, st), "a reconcile that changes nothing writes no change")

	_, err := st.Debit(ctx, reconcile.Debit{UserRef: "u1", Feature: "ai_credits", Key: "a", Amount: 100}, reconcile.DecideDebit)
	require.NoError(t, err)
	next := team
	next.Subscriptions = []reconcile.Subscription{team.Subscriptions[0]}
	next.Subscriptions[0].Items = []reconcile.Item{team.Subscriptions[0].Items[0]}
	next.Subscriptions[0].Items[0].PeriodStart, next.Subscriptions[0].Items[0].PeriodEnd = periodEnd, periodEnd.AddDate(0, 1, 0)
	reconcileAs(t, st, "evt_4", next, plans)
	renewed := allChanges(t, st, 4)[3]
	require.Equal(t, []string{"period_start", "period_end", "meters"}, renewed.Changed)
	require.Equal(t, map[string]int64{"ai_credits": 4900}, renewed.Before.Meters, "the old period's")
	require.Equal(t, map[string]int64{"ai_credits": 5000}, renewed.After.Meters)
	require.Equal(t, int64(2000), renewed.After.Balance)
	require.Len(t, renewed.LedgerMoves, 2)
	require.Equal(t, periodEnd, renewed.LedgerMoves[1].PeriodStart)
}

// TestFeatureChangeAnnounced: a feature gained or lost at Stripe (an
// entitlement) is a change naming features; an entitlement that raises a
// meter grants that meter alone, and the change carries that move with no
// default ledger.
func TestFeatureChangeAnnounced(t *testing.T) {
	st := storetest.NewStore(t)
	plans := testenv.FeaturePlans()
	free := liveSnap("cus_1", "price_free")
	free.UserRef = "u1"
	id := func() int64 {
		reconcileAs(t, st, "evt_1", free, plans)
		return allChanges(t, st, 1)[0].AccountID
	}()

	gained := free
	gained.Entitlements = []reconcile.Entitlement{{Provider: "stripe", Key: "export"}}
	reconcileAs(t, st, "evt_2", gained, plans)
	ch := allChanges(t, st, 2)[1]
	require.Equal(t, []string{"features", "entitlements"}, ch.Changed)
	_, on := reconcile.FeatureNamed(ch.After.Features, "export")
	require.True(t, on)
	require.Nil(t, ch.LedgerMoves)

	reconcileAs(t, st, "evt_3", free, plans)
	ch = allChanges(t, st, 3)[2]
	require.Equal(t, []string{"features", "entitlements"}, ch.Changed, "a feature lost")
	_, on = reconcile.FeatureNamed(ch.After.Features, "export")
	require.False(t, on)

	boost := free
	boost.Entitlements = []reconcile.Entitlement{{Provider: "stripe", Key: "ai-credits-boost"}}
	reconcileAs(t, st, "evt_4", boost, plans)
	ch = allChanges(t, st, 4)[3]
	require.Equal(t, []string{"features", "entitlements", "meters"}, ch.Changed)
	require.Equal(t, map[string]int64{"ai_credits": 20}, ch.Before.Meters)
	require.Equal(t, map[string]int64{"ai_credits": 2000}, ch.After.Meters)
	require.Equal(t, int64(10), ch.After.Balance)
	require.Nil(t, ch.Ledger)
	require.Equal(t, []reconcile.LedgerMove{{Meter: "ai_credits", Kind: "grant",
		Key: fmt.Sprintf("grant.ai_credits:%d:2026-11-03T00:00:00Z:2000", id), Delta: 1980, Plan: "free",
		PeriodStart: periodStart}}, ch.LedgerMoves)

	reconcileAs(t, st, "evt_5", boost, plans)
	require.Equal(t, 4, changeCount(t, st), "a reconcile that changes nothing writes no change")
}
