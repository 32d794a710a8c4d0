package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store"
	"github.com/billsync/billsync/store/storetest"
)

// reconcileAs applies snap to its customer's account as a worker does (a
// stored event, a claim, Apply with Decide on plans) and returns the
// outcome.
func reconcileAs(t *testing.T, st *store.Store, evt string, snap reconcile.Snapshot, plans *reconcile.Plans) reconcile.Outcome {
	t.Helper()
	receive(t, st, evt, snap.CustomerID)
	out, err := applySnap(context.Background(), st, claimOne(t, st), dbNow(t, st), snap, plans)
	require.NoError(t, err)
	return out
}

// TestFeaturesStoredWithThePlan: the resolved features and the mapped
// entitlements are written with the plan and read back as written.
func TestFeaturesStoredWithThePlan(t *testing.T) {
	ctx := context.Background()
	st := storetest.NewStore(t)
	snap := liveSnap("cus_1", "price_pro")
	snap.Entitlements = []reconcile.Entitlement{{Provider: "stripe", Key: "seats-50"}}
	out := reconcileAs(t, st, "evt_1", snap, testenv.FeaturePlans())
	a, err := st.Account(ctx, "stripe", "cus_1")
	require.NoError(t, err)
	require.Equal(t, out.After.Features, a.Features)
	require.Equal(t, []reconcile.Entitlement{{Provider: "stripe", Key: "seats-50"}}, a.Entitlements)
	seats, _ := reconcile.FeatureNamed(a.Features, "seats")
	require.Equal(t, "stripe:seats-50", seats.Source)
	require.EqualValues(t, 50, *seats.Limit)
}

// TestMeterGrantedOncePerPeriod: each meter's period is granted once,
// however many reconciles; an upgrade tops each meter up by the
// difference; the next period is granted again; the default meter's rows
// are those it had before features.
func TestMeterGrantedOncePerPeriod(t *testing.T) {
	ctx := context.Background()
	st := storetest.NewStore(t)
	plans := testenv.FeaturePlans()
	reconcileAs(t, st, "evt_1", liveSnap("cus_1", "price_pro"), plans)
	again := reconcileAs(t, st, "evt_2", liveSnap("cus_1", "price_pro"), plans)
	require.Equal(t, reconcile.ResultUnchanged, again.Result, again.Text)
	a, err := st.Account(ctx, "stripe", "cus_1")
	require.NoError(t, err)
	require.Equal(t, map[string]storetest.MeterRows{"": {Grants: 1, Sum: 500}, "ai_credits": {Grants: 1, Sum: 1000}},
		storetest.Meters(t, st, a.ID))

	up := reconcileAs(t, st, "evt_3", liveSnap("cus_1", "price_team"), plans)
	require.Contains(t, up.Text, "granted ai_credits +4000")
	require.Equal(t, map[string]storetest.MeterRows{"": {Grants: 2, Sum: 2000}, "ai_credits": {Grants: 2, Sum: 5000}},
		storetest.Meters(t, st, a.ID))

	down := reconcileAs(t, st, "evt_4", liveSnap("cus_1", "price_pro"), plans)
	require.Equal(t, map[string]storetest.MeterRows{"": {Grants: 2, Sum: 2000}, "ai_credits": {Grants: 2, Sum: 5000}},
		storetest.Meters(t, st, a.ID), "a downgrade claws nothing back: %s", down.Text)

	next := liveSnap("cus_1", "price_pro")
	next.Subscriptions[0].Items[0].PeriodStart, next.Subscriptions[0].Items[0].PeriodEnd = periodEnd, periodEnd.AddDate(0, 1, 0)
	reconcileAs(t, st, "evt_5", next, plans)
	reconcileAs(t, st, "evt_6", next, plans)
	require.Equal(t, map[string]storetest.MeterRows{"": {Grants: 3, Sum: 2500}, "ai_credits": {Grants: 3, Sum: 6000}},
		storetest.Meters(t, st, a.ID))
}

// TestUsageOnOneMeter: a debit of a meter never touches another: the
// default balance, the meter's figures and the rows each hold.
func TestUsageOnOneMeter(t *testing.T) {
	ctx := context.Background()
	st := storetest.NewStore(t)
	snap := liveSnap("cus_1", "price_pro")
	snap.UserRef = "u1"
	reconcileAs(t, st, "evt_1", snap, testenv.FeaturePlans())

	res, err := st.Debit(ctx, reconcile.Debit{UserRef: "u1", Feature: "ai_credits", Key: "a", Amount: 300}, reconcile.DecideDebit)
	require.NoError(t, err)
	require.EqualValues(t, 700, res.Balance)
	_, err = st.Debit(ctx, reconcile.Debit{UserRef: "u1", Key: "a", Amount: 100}, reconcile.DecideDebit)
	require.NoError(t, err, "the same idempotency key on the default meter is another debit")
	_, err = st.Debit(ctx, reconcile.Debit{UserRef: "u1", Feature: "ai_credits", Key: "big", Amount: 701}, reconcile.DecideDebit)
	require.ErrorIs(t, err, reconcile.ErrInsufficient, "the meter's balance, not the default one, decides")
	_, err = st.Debit(ctx, reconcile.Debit{UserRef: "u1", Feature: "sso_minutes", Key: "x", Amount: 1}, reconcile.DecideDebit)
	require.ErrorIs(t, err, reconcile.ErrInsufficient, "a meter never granted has nothing")

	u, err := st.UserAccount(ctx, "u1", "", "")
	require.NoError(t, err)
	require.EqualValues(t, 400, u.Balance)
	require.Equal(t, []reconcile.MeterBalance{{Meter: "ai_credits", Granted: 1000, Used: 300, Balance: 700}}, u.Meters)
	d, err := st.AccountDetail(ctx, u.Account.ID)
	require.NoError(t, err)
	require.EqualValues(t, 400, d.Balance)
	require.Equal(t, u.Meters, d.Meters)
	require.Equal(t, map[string]storetest.MeterRows{"": {Grants: 1, Usages: 1, Sum: 400}, "ai_credits": {Grants: 1, Usages: 1, Sum: 700}},
		storetest.Meters(t, st, u.Account.ID))
	b, err := st.Balance(ctx, u.Account.ID)
	require.NoError(t, err)
	require.EqualValues(t, 400, b)
}

// TestSweepSettledPerMeter: the sweep's lock-free check counts an account
// right only when every meter's period is granted: a lost meter grant is
// written by the sweep.
func TestSweepSettledPerMeter(t *testing.T) {
	ctx := context.Background()
	st := storetest.NewStore(t)
	plans := testenv.FeaturePlans()
	reconcileAs(t, st, "evt_1", liveSnap("cus_1", "price_pro"), plans)
	a, err := st.Account(ctx, "stripe", "cus_1")
	require.NoError(t, err)
	ch := reconcile.Decide(a, liveSnap("cus_1", "price_pro"), plans, a.ObservedAt.Add(time.Second))
	granted, err := st.Granted(ctx, []int64{a.ID, a.ID}, ch.Grants())
	require.NoError(t, err)
	require.Equal(t, []int64{500, 1000}, granted)
	_, err = st.Pool().Exec(ctx, `DELETE FROM ledger WHERE meter = 'ai_credits'`)
	require.NoError(t, err)
	granted, err = st.Granted(ctx, []int64{a.ID, a.ID}, ch.Grants())
	require.NoError(t, err)
	require.Equal(t, []int64{500, 0}, granted)
}
