package reconcile_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/reconcile"
)

var (
	t0          = time.Date(2026, 11, 14, 10, 0, 0, 0, time.UTC)
	periodStart = time.Date(2026, 11, 3, 0, 0, 0, 0, time.UTC)
	periodEnd   = time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	// nextEnd ends the period after periodStart–periodEnd.
	nextEnd = time.Date(2027, 1, 3, 0, 0, 0, 0, time.UTC)
	// november is t0's calendar month: the period of the default plan.
	november = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
)

// oneSub is customer with one subscription (sub_1) of one item on refs
// for the period start–end.
func oneSub(customer, status string, start, end time.Time, refs ...string) reconcile.Snapshot {
	return reconcile.Snapshot{Provider: "stripe", CustomerID: customer, UserRef: "u1",
		Subscriptions: []reconcile.Subscription{sub("sub_1", status, t0.Add(-30*24*time.Hour), item(start, end, refs...))}}
}

// snap is cus_1 with one subscription in the period periodStart–periodEnd.
func snap(status string, refs ...string) reconcile.Snapshot {
	return oneSub("cus_1", status, periodStart, periodEnd, refs...)
}

// snapOf is cus_1 with subs (listed newest first, as providers do).
func snapOf(subs ...reconcile.Subscription) reconcile.Snapshot {
	return reconcile.Snapshot{Provider: "stripe", CustomerID: "cus_1", UserRef: "u1", Subscriptions: subs}
}

func sub(id, status string, created time.Time, items ...reconcile.Item) reconcile.Subscription {
	return reconcile.Subscription{ID: id, Status: status, Created: created, Items: items}
}

// item is one unit of refs for the period start–end.
func item(start, end time.Time, refs ...string) reconcile.Item {
	return reconcile.Item{PriceRefs: refs, Quantity: 1, PeriodStart: start, PeriodEnd: end}
}

// parsePlans parses a plans file that must be valid.
func parsePlans(t *testing.T, yaml string) *reconcile.Plans {
	t.Helper()
	plans, err := reconcile.ParsePlans([]byte(yaml))
	require.NoError(t, err)
	return plans
}

func TestDecide(t *testing.T) {
	plans := examplePlans()
	onFree := reconcile.Account{ID: 7, Provider: "stripe", CustomerID: "cus_1", UserRef: "u1", Plan: "free",
		Status: "active", SubscriptionID: "sub_1", PeriodStart: periodStart, PeriodEnd: periodEnd, ObservedAt: t0}

	t.Run("NewCustomerWithoutSubscription", func(t *testing.T) {
		ch := reconcile.Decide(reconcile.Account{ID: 1}, reconcile.Snapshot{Provider: "stripe", CustomerID: "cus_1"}, plans, t0)
		require.Equal(t, reconcile.ResultApplied, ch.Result)
		require.Equal(t, "free", ch.Next.Plan)
		require.Empty(t, ch.Next.Status)
		// No provider period: the UTC calendar month.
		require.Equal(t, november, ch.Next.PeriodStart)
		require.Equal(t, time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), ch.Next.PeriodEnd)
		require.EqualValues(t, 10, ch.Grant.Allowance)
		require.Equal(t, t0, ch.Next.ObservedAt)
		require.Equal(t, "account created on plan free (no current subscription)", ch.Outcome)
	})
	t.Run("UpgradeTopsUpToTheNewAllowance", func(t *testing.T) {
		ch := reconcile.Decide(onFree, snap("active", "pro", "price_pro"), plans, t0.Add(time.Minute))
		require.Equal(t, reconcile.ResultApplied, ch.Result)
		require.Equal(t, "pro", ch.Next.Plan)
		require.Equal(t, periodStart, ch.Next.PeriodStart)
		require.EqualValues(t, 490, ch.Grant.TopUp(10), "free 10 then pro 500 in one period: +490")
		require.Equal(t, "plan set to pro, Pro allowance granted (+490)", ch.Describe(490))
		require.Equal(t, "grant:7:2026-11-03T00:00:00Z:pro:500", ch.Grant.Key(7))
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
	t.Run("SameStateIsNoChange", func(t *testing.T) {
		ch := reconcile.Decide(onFree, snap("active", "free"), plans, t0.Add(time.Minute))
		require.Equal(t, reconcile.ResultUnchanged, ch.Result)
		require.Equal(t, "no change: stripe says plan free (active) now, as already applied", ch.Describe(0))
		require.Equal(t, t0.Add(time.Minute), ch.Next.ObservedAt, "observed_at advances even when nothing else does")
	})
}

// TestDecideStatuses: which statuses keep their plan (the default policy)
// and what the others fall to: the default plan on the calendar month,
// with the provider's status and subscription recorded.
func TestDecideStatuses(t *testing.T) {
	plans := examplePlans()
	onPro := reconcile.Account{ID: 7, Provider: "stripe", CustomerID: "cus_1", UserRef: "u1", Plan: "pro",
		Status: "active", SubscriptionID: "sub_1", PeriodStart: periodStart, PeriodEnd: periodEnd, ObservedAt: t0}
	tests := []struct {
		status      string
		plan        string
		periodStart time.Time
		grant       int64 // -1: no grant
	}{
		{"active", "pro", periodStart, 500},
		{"trialing", "pro", periodStart, 500},
		{"past_due", "pro", periodStart, -1},
		{"unpaid", "free", november, 10},
		{"paused", "free", november, 10},
		{"incomplete", "free", november, 10},
		{"incomplete_expired", "free", november, 10},
		{"canceled", "free", november, 10},
	}
	for _, tt := range tests {
		t.Run(tt.status, func(t *testing.T) {
			ch := reconcile.Decide(onPro, snap(tt.status, "pro"), plans, t0.Add(time.Minute))
			require.Equal(t, tt.plan, ch.Next.Plan)
			require.Equal(t, tt.status, ch.Next.Status, "the provider's status is recorded")
			require.Equal(t, "sub_1", ch.Next.SubscriptionID)
			require.Equal(t, tt.periodStart, ch.Next.PeriodStart)
			if tt.grant < 0 {
				require.Nil(t, ch.Grant)
				return
			}
			require.NotNil(t, ch.Grant)
			require.Equal(t, tt.grant, ch.Grant.Allowance)
			require.Equal(t, tt.plan, ch.Grant.Plan)
			require.Equal(t, tt.periodStart, ch.Grant.PeriodStart)
			if tt.plan == "free" {
				require.Contains(t, ch.Outcome, "plan set to free")
			}
		})
	}
}

// TestDecideDeletedCustomer: a customer the provider deleted falls to the
// default plan, recorded as deleted, and the outcome says why.
func TestDecideDeletedCustomer(t *testing.T) {
	plans := examplePlans()
	onPro := reconcile.Account{ID: 7, Provider: "stripe", CustomerID: "cus_1", UserRef: "u1", Plan: "pro",
		Status: "active", SubscriptionID: "sub_1", PeriodStart: periodStart, PeriodEnd: periodEnd,
		CancelAtPeriodEnd: true, ObservedAt: t0}
	// Stripe cancels a deleted customer's subscriptions; even one still
	// listed as active must not keep the plan.
	for name, s := range map[string]reconcile.Snapshot{
		"NoSubscriptions":   {Provider: "stripe", CustomerID: "cus_1", UserRef: "u1", Deleted: true},
		"ActiveListedStill": func() reconcile.Snapshot { s := snap("active", "pro"); s.Deleted = true; return s }(),
	} {
		t.Run(name, func(t *testing.T) {
			ch := reconcile.Decide(onPro, s, plans, t0.Add(time.Minute))
			require.Equal(t, reconcile.ResultApplied, ch.Result)
			require.Equal(t, "free", ch.Next.Plan)
			require.Equal(t, reconcile.StatusDeleted, ch.Next.Status)
			require.Empty(t, ch.Next.SubscriptionID)
			require.False(t, ch.Next.CancelAtPeriodEnd)
			require.Equal(t, november, ch.Next.PeriodStart)
			require.Equal(t, november.AddDate(0, 1, 0), ch.Next.PeriodEnd)
			require.Equal(t, &reconcile.Grant{Plan: "free", Allowance: 10, PeriodStart: november, PeriodEnd: november.AddDate(0, 1, 0)}, ch.Grant)
			require.Regexp(t, `^customer deleted at stripe: plan set to free, status active → deleted`, ch.Outcome)

			// Seen again: nothing more to say.
			again := reconcile.Decide(ch.Next, s, plans, t0.Add(2*time.Minute))
			require.Equal(t, reconcile.ResultUnchanged, again.Result)
			require.Equal(t, "no change: stripe says plan free (deleted) now, as already applied", again.Outcome)
		})
	}
	t.Run("NewAccount", func(t *testing.T) {
		ch := reconcile.Decide(reconcile.Account{ID: 8}, reconcile.Snapshot{Provider: "stripe", CustomerID: "cus_2", Deleted: true}, plans, t0)
		require.Equal(t, "free", ch.Next.Plan)
		require.Equal(t, "customer deleted at stripe: account created on plan free (deleted)", ch.Outcome)
		require.EqualValues(t, 10, ch.Grant.Allowance)
	})
}

// TestDecideWaitsForPayment: a failed renewal (past_due: the period moved
// on, its invoice failed) keeps the plan and what it was granted, and the
// new period is granted once the subscription is active again.
func TestDecideWaitsForPayment(t *testing.T) {
	plans := examplePlans()
	onPro := reconcile.Account{ID: 7, Provider: "stripe", CustomerID: "cus_1", UserRef: "u1", Plan: "pro",
		Status: "active", SubscriptionID: "sub_1", PeriodStart: periodStart, PeriodEnd: periodEnd, ObservedAt: t0}
	pastDue := oneSub("cus_1", "past_due", periodEnd, nextEnd, "pro")

	ch := reconcile.Decide(onPro, pastDue, plans, t0.Add(time.Minute))
	require.Equal(t, reconcile.ResultApplied, ch.Result)
	require.Equal(t, "pro", ch.Next.Plan)
	require.Equal(t, "past_due", ch.Next.Status)
	require.Equal(t, periodStart, ch.Next.PeriodStart, "the period stays the one last granted")
	require.Equal(t, periodEnd, ch.Next.PeriodEnd)
	require.Nil(t, ch.Grant, "nothing new before the renewal is paid")
	require.Equal(t, "status active → past_due; sub_1 is past_due: the period from 2026-12-03 is granted once it is paid", ch.Outcome)

	again := reconcile.Decide(ch.Next, pastDue, plans, t0.Add(2*time.Minute))
	require.Equal(t, reconcile.ResultUnchanged, again.Result)
	require.Equal(t, periodStart, again.Next.PeriodStart)
	require.Nil(t, again.Grant)

	paid := reconcile.Decide(again.Next, oneSub("cus_1", "active", periodEnd, nextEnd, "pro"), plans, t0.Add(3*time.Minute))
	require.Equal(t, reconcile.ResultApplied, paid.Result)
	require.Equal(t, "active", paid.Next.Status)
	require.Equal(t, periodEnd, paid.Next.PeriodStart)
	require.Equal(t, &reconcile.Grant{Plan: "pro", Allowance: 500, PeriodStart: periodEnd, PeriodEnd: nextEnd}, paid.Grant)
	require.Equal(t, "status past_due → active, period now starts 2026-12-03, Pro allowance granted (+500)", paid.Describe(500))

	// Seen again: the same key, and the period already holds 500, so the
	// store grants nothing more.
	repeat := reconcile.Decide(paid.Next, oneSub("cus_1", "active", periodEnd, nextEnd, "pro"), plans, t0.Add(4*time.Minute))
	require.Equal(t, reconcile.ResultUnchanged, repeat.Result)
	require.Equal(t, paid.Grant.Key(7), repeat.Grant.Key(7))
	require.Zero(t, repeat.Grant.TopUp(500))

	t.Run("PastDueInTheGrantedPeriod", func(t *testing.T) {
		// An upgrade's invoice failed: the plan changes, nothing is granted
		// and no other period waits.
		ch := reconcile.Decide(onPro, snap("past_due", "team"), plans, t0.Add(time.Minute))
		require.Equal(t, "team", ch.Next.Plan)
		require.Equal(t, periodStart, ch.Next.PeriodStart)
		require.Nil(t, ch.Grant)
		require.Equal(t, "plan set to team, status active → past_due", ch.Outcome)
	})
	t.Run("NewAccount", func(t *testing.T) {
		ch := reconcile.Decide(reconcile.Account{ID: 9}, pastDue, plans, t0)
		require.Equal(t, "pro", ch.Next.Plan)
		require.Equal(t, periodEnd, ch.Next.PeriodStart, "no period was granted before: the provider's")
		require.Nil(t, ch.Grant)
		require.Contains(t, ch.Outcome, "granted once it is paid")
	})
	t.Run("GrantWithoutWaiting", func(t *testing.T) {
		eager := parsePlans(t, "default: free\npolicy: {grant_waits_for_payment: false}\nplans:\n"+
			"  - {name: free, allowance: 10, stripe_prices: [free]}\n  - {name: pro, allowance: 500, stripe_prices: [pro]}\n")
		ch := reconcile.Decide(onPro, pastDue, eager, t0.Add(time.Minute))
		require.Equal(t, "pro", ch.Next.Plan)
		require.Equal(t, "past_due", ch.Next.Status)
		require.Equal(t, periodEnd, ch.Next.PeriodStart)
		require.Equal(t, &reconcile.Grant{Plan: "pro", Allowance: 500, PeriodStart: periodEnd, PeriodEnd: nextEnd}, ch.Grant)
	})
	t.Run("UnpaidKeptByPolicyWaitsToo", func(t *testing.T) {
		lenient := parsePlans(t, "default: free\npolicy: {keep_plan: [active, past_due, unpaid]}\nplans:\n"+
			"  - {name: free, allowance: 10, stripe_prices: [free]}\n  - {name: pro, allowance: 500, stripe_prices: [pro]}\n")
		ch := reconcile.Decide(onPro, oneSub("cus_1", "unpaid", periodEnd, nextEnd, "pro"), lenient, t0.Add(time.Minute))
		require.Equal(t, "pro", ch.Next.Plan)
		require.Equal(t, periodStart, ch.Next.PeriodStart)
		require.Nil(t, ch.Grant)
		// trialing is not in this keep_plan: the default plan.
		ch = reconcile.Decide(onPro, snap("trialing", "pro"), lenient, t0.Add(time.Minute))
		require.Equal(t, "free", ch.Next.Plan)
	})
}

// TestDecidePausedCollection: pause_collection keeps the plan by default
// but grants nothing new while paused; the policy can demote instead, or
// grant anyway.
func TestDecidePausedCollection(t *testing.T) {
	onPro := reconcile.Account{ID: 7, Provider: "stripe", CustomerID: "cus_1", UserRef: "u1", Plan: "pro",
		Status: "active", SubscriptionID: "sub_1", PeriodStart: periodStart, PeriodEnd: periodEnd, ObservedAt: t0}
	paused := oneSub("cus_1", "active", periodEnd, nextEnd, "pro")
	paused.Subscriptions[0].CollectionPaused = true
	const planList = "plans:\n  - {name: free, allowance: 10, stripe_prices: [free]}\n  - {name: pro, allowance: 500, stripe_prices: [pro]}\n"
	tests := []struct {
		name        string
		policy      string
		plan        string
		periodStart time.Time
		grant       *reconcile.Grant
	}{
		{"DefaultKeepsAndWaits", "", "pro", periodStart, nil},
		{"Demoted", "policy: {paused_collection_keeps_plan: false}\n", "free", november,
			&reconcile.Grant{Plan: "free", Allowance: 10, PeriodStart: november, PeriodEnd: november.AddDate(0, 1, 0)}},
		{"KeptAndGranted", "policy: {grant_waits_for_payment: false}\n", "pro", periodEnd,
			&reconcile.Grant{Plan: "pro", Allowance: 500, PeriodStart: periodEnd, PeriodEnd: nextEnd}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plans := parsePlans(t, "default: free\n"+tt.policy+planList)
			require.Equal(t, tt.plan == "pro", plans.Keeps(paused.Subscriptions[0]))
			ch := reconcile.Decide(onPro, paused, plans, t0.Add(time.Minute))
			require.Equal(t, tt.plan, ch.Next.Plan)
			require.Equal(t, "active", ch.Next.Status)
			require.Equal(t, tt.periodStart, ch.Next.PeriodStart)
			require.Equal(t, tt.grant, ch.Grant)
		})
	}
}

// TestDecideSeveralSubscriptions: the best plan among every subscription
// that keeps its plan wins, whatever order they were bought in.
func TestDecideSeveralSubscriptions(t *testing.T) {
	plans := examplePlans()
	older, newer := t0.Add(-60*24*time.Hour), t0.Add(-24*time.Hour)
	laterStart := periodStart.AddDate(0, 0, 10)
	laterEnd := periodEnd.AddDate(0, 0, 10)
	onPro := reconcile.Account{ID: 7, Provider: "stripe", CustomerID: "cus_1", UserRef: "u1", Plan: "pro",
		Status: "active", SubscriptionID: "sub_pro", PeriodStart: periodStart, PeriodEnd: periodEnd, ObservedAt: t0}
	tests := []struct {
		name        string
		snap        reconcile.Snapshot
		plan        string
		sub         string
		periodStart time.Time
		grant       int64
	}{
		{"AddOnAfterProDoesNotFreeze", snapOf(
			sub("sub_addon", "active", newer, item(laterStart, laterEnd, "storage_addon")),
			sub("sub_pro", "active", older, item(periodStart, periodEnd, "pro"))),
			"pro", "sub_pro", periodStart, 500},
		{"NewerFreeDoesNotDemote", snapOf(
			sub("sub_free", "active", newer, item(laterStart, laterEnd, "free")),
			sub("sub_pro", "active", older, item(periodStart, periodEnd, "pro"))),
			"pro", "sub_pro", periodStart, 500},
		{"OlderTeamBeatsNewerPro", snapOf(
			sub("sub_pro", "active", newer, item(laterStart, laterEnd, "pro")),
			sub("sub_team", "active", older, item(periodStart, periodEnd, "team"))),
			"team", "sub_team", periodStart, 2000},
		{"SamePlanTheNewerDecides", snapOf(
			sub("sub_old", "active", older, item(periodStart, periodEnd, "pro")),
			sub("sub_new", "active", newer, item(laterStart, laterEnd, "pro"))),
			"pro", "sub_new", laterStart, 500},
		{"CanceledTeamDoesNotCount", snapOf(
			sub("sub_team", "canceled", newer, item(laterStart, laterEnd, "team")),
			sub("sub_pro", "active", older, item(periodStart, periodEnd, "pro"))),
			"pro", "sub_pro", periodStart, 500},
		{"UnpaidTeamDoesNotCountButPastDueWaits", snapOf(
			sub("sub_team", "unpaid", newer, item(laterStart, laterEnd, "team")),
			sub("sub_pro", "past_due", older, item(periodStart, periodEnd, "pro"))),
			"pro", "sub_pro", periodStart, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ch := reconcile.Decide(onPro, tt.snap, plans, t0.Add(time.Minute))
			require.NotEqual(t, reconcile.ResultIgnored, ch.Result, ch.Outcome)
			require.Empty(t, ch.Unmapped)
			require.Equal(t, tt.plan, ch.Next.Plan)
			require.Equal(t, tt.sub, ch.Next.SubscriptionID)
			require.Equal(t, tt.periodStart, ch.Next.PeriodStart)
			if tt.grant < 0 {
				require.Nil(t, ch.Grant)
				return
			}
			require.Equal(t, tt.grant, ch.Grant.Allowance)
			require.Equal(t, tt.periodStart, ch.Grant.PeriodStart)
		})
	}
	t.Run("DecidingSubscriptionGivesStatusAndCancel", func(t *testing.T) {
		team := sub("sub_team", "trialing", older, item(periodStart, periodEnd, "team"))
		team.CancelAtPeriodEnd = true
		ch := reconcile.Decide(onPro, snapOf(sub("sub_pro", "active", newer, item(laterStart, laterEnd, "pro")), team), plans, t0.Add(time.Minute))
		require.Equal(t, "team", ch.Next.Plan)
		require.Equal(t, "trialing", ch.Next.Status)
		require.True(t, ch.Next.CancelAtPeriodEnd)
	})
	t.Run("NoneKeepsThePlanTheNewestIsRecorded", func(t *testing.T) {
		ch := reconcile.Decide(onPro, snapOf(
			sub("sub_old", "unpaid", older, item(periodStart, periodEnd, "pro")),
			sub("sub_new", "incomplete_expired", newer, item(laterStart, laterEnd, "team"))), plans, t0.Add(time.Minute))
		require.Equal(t, "free", ch.Next.Plan)
		require.Equal(t, "incomplete_expired", ch.Next.Status)
		require.Equal(t, "sub_new", ch.Next.SubscriptionID)
		require.Equal(t, november, ch.Next.PeriodStart)
		require.EqualValues(t, 10, ch.Grant.Allowance)
	})
	t.Run("UnmappedPricesOfEndedSubscriptionsAreNotAlerted", func(t *testing.T) {
		ch := reconcile.Decide(onPro, snapOf(sub("sub_x", "canceled", newer, item(periodStart, periodEnd, "price_gone"))), plans, t0.Add(time.Minute))
		require.Equal(t, reconcile.ResultApplied, ch.Result)
		require.Equal(t, "free", ch.Next.Plan)
		require.Empty(t, ch.Unmapped)
	})
}

// TestDecideUnmapped: subscriptions that keep their plan but whose prices
// all map to no plan leave the account as it was, and name the prices.
func TestDecideUnmapped(t *testing.T) {
	plans := examplePlans()
	onFree := reconcile.Account{ID: 7, Provider: "stripe", CustomerID: "cus_1", UserRef: "u1", Plan: "free",
		Status: "active", SubscriptionID: "sub_1", PeriodStart: periodStart, PeriodEnd: periodEnd, ObservedAt: t0}
	tests := []struct {
		name     string
		snap     reconcile.Snapshot
		unmapped []string
		outcome  string
	}{
		{"One", snap("active", "price_x"), []string{"price_x"}, "ignored: price price_x maps to no plan"},
		{"EveryRefNamedInWords", snap("active", "pro_v2", "price_v2"), []string{"pro_v2"}, "ignored: price pro_v2 / price_v2 maps to no plan"},
		{"Several", snapOf(
			sub("sub_2", "past_due", t0, item(periodStart, periodEnd, "price_y")),
			sub("sub_1", "active", t0.Add(-time.Hour), item(periodStart, periodEnd, "price_x"), item(periodStart, periodEnd, "seat_x"))),
			[]string{"price_y", "price_x", "seat_x"}, "ignored: prices price_y, price_x, seat_x map to no plan"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ch := reconcile.Decide(onFree, tt.snap, plans, t0.Add(time.Minute))
			require.Equal(t, reconcile.ResultIgnored, ch.Result)
			require.Equal(t, tt.outcome, ch.Outcome)
			require.Equal(t, tt.unmapped, ch.Unmapped)
			require.Nil(t, ch.Grant)
			require.Equal(t, onFree, ch.Next)
			out := ch.Done(onFree, 0)
			require.Equal(t, tt.unmapped, out.Unmapped, "the outcome carries the prices for the alert and the metric")
			require.Equal(t, reconcile.EventIgnored, out.EventStatus())
		})
	}
}

// TestDecideRank: an optional rank orders plans before their allowance.
func TestDecideRank(t *testing.T) {
	plans := parsePlans(t, `default: free
plans:
  - {name: free, allowance: 10, stripe_prices: [free]}
  - {name: pro, allowance: 500, rank: 2, stripe_prices: [pro]}
  - {name: team, allowance: 2000, rank: 1, stripe_prices: [team]}
  - {name: legacy, allowance: 5, rank: 0, stripe_prices: [legacy]}
  - {name: bulk, allowance: 9000, stripe_prices: [bulk]}
`)
	older, newer := t0.Add(-48*time.Hour), t0.Add(-time.Hour)
	tests := []struct {
		name string
		a, b string // a's subscription is the newer
		want string
	}{
		{"HigherRankBeatsLargerAllowance", "team", "pro", "pro"},
		{"HigherRankBeatsLargerAllowanceEitherOrder", "pro", "team", "pro"},
		{"RankedBeatsUnranked", "bulk", "legacy", "legacy"},
		{"UnrankedByAllowance", "free", "bulk", "bulk"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := snapOf(sub("sub_a", "active", newer, item(periodStart, periodEnd, tt.a)),
				sub("sub_b", "active", older, item(periodStart, periodEnd, tt.b)))
			ch := reconcile.Decide(reconcile.Account{ID: 1}, s, plans, t0)
			require.Equal(t, tt.want, ch.Next.Plan)
			want, _ := plans.Named(tt.want)
			require.Equal(t, want.Allowance, ch.Grant.Allowance)
		})
	}
}

// TestDecideMixedIntervals: the period is the period of the item whose
// price decided the plan, not the first item's.
func TestDecideMixedIntervals(t *testing.T) {
	plans := examplePlans()
	yearStart, yearEnd := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC), time.Date(2027, 3, 1, 0, 0, 0, 0, time.UTC)
	s := snapOf(sub("sub_1", "active", t0.Add(-time.Hour),
		item(yearStart, yearEnd, "storage_addon_yearly"), // maps to no plan
		item(periodStart, periodEnd, "pro")))
	ch := reconcile.Decide(reconcile.Account{ID: 1}, s, plans, t0)
	require.Equal(t, "pro", ch.Next.Plan)
	require.Equal(t, periodStart, ch.Next.PeriodStart)
	require.Equal(t, periodEnd, ch.Next.PeriodEnd)
	require.Equal(t, periodStart, ch.Grant.PeriodStart, "pro is granted monthly, not yearly")

	t.Run("YearlyFreeItemLosesToMonthlyPro", func(t *testing.T) {
		s := snapOf(sub("sub_1", "active", t0.Add(-time.Hour), item(yearStart, yearEnd, "free"), item(periodStart, periodEnd, "pro")))
		ch := reconcile.Decide(reconcile.Account{ID: 1}, s, plans, t0)
		require.Equal(t, "pro", ch.Next.Plan)
		require.Equal(t, periodStart, ch.Next.PeriodStart)
	})
	t.Run("DecidingItemWithoutPeriodUsesTheCalendarMonth", func(t *testing.T) {
		s := snapOf(sub("sub_1", "active", t0.Add(-time.Hour), item(yearStart, yearEnd, "storage_addon_yearly"), item(time.Time{}, time.Time{}, "pro")))
		ch := reconcile.Decide(reconcile.Account{ID: 1}, s, plans, t0)
		require.Equal(t, "pro", ch.Next.Plan)
		require.Equal(t, november, ch.Next.PeriodStart)
	})
}

// TestDecideTrial: a trial grants the plan's trial allowance (by default
// the allowance) for the trial period, and the first paid period, another
// period, is granted again.
func TestDecideTrial(t *testing.T) {
	trialStart, trialEnd := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 11, 15, 0, 0, 0, 0, time.UTC)
	paidEnd := trialEnd.AddDate(0, 1, 0)
	tests := []struct {
		name       string
		plans      string
		trialGrant int64
	}{
		{"DefaultFullAllowance", "", 500},
		{"TrialAllowance", "trial_allowance: 50, ", 50},
		{"NothingInTrial", "trial_allowance: 0, ", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plans := parsePlans(t, "default: free\nplans:\n  - {name: free, allowance: 10, stripe_prices: [free]}\n"+
				"  - {name: pro, allowance: 500, "+tt.plans+"stripe_prices: [pro]}\n")
			trial := oneSub("cus_1", "trialing", trialStart, trialEnd, "pro")
			trial.Subscriptions[0].TrialEnd = trialEnd
			ch := reconcile.Decide(reconcile.Account{ID: 7}, trial, plans, t0)
			require.Equal(t, "pro", ch.Next.Plan)
			require.Equal(t, "trialing", ch.Next.Status)
			require.Equal(t, trialStart, ch.Next.PeriodStart)
			require.Equal(t, &reconcile.Grant{Plan: "pro", Allowance: tt.trialGrant, PeriodStart: trialStart, PeriodEnd: trialEnd}, ch.Grant)

			paid := reconcile.Decide(ch.Next, oneSub("cus_1", "active", trialEnd, paidEnd, "pro"), plans, t0.Add(time.Hour))
			require.Equal(t, trialEnd, paid.Next.PeriodStart)
			require.Equal(t, &reconcile.Grant{Plan: "pro", Allowance: 500, PeriodStart: trialEnd, PeriodEnd: paidEnd}, paid.Grant)
			require.NotEqual(t, ch.Grant.Key(7), paid.Grant.Key(7), "the trial and the first paid period are two grants")
			require.EqualValues(t, 500, paid.Grant.TopUp(0), "the new period starts empty")
		})
	}
}

// TestDecideSeats: seat_allowance adds per unit of the deciding item's
// quantity.
func TestDecideSeats(t *testing.T) {
	plans := parsePlans(t, `default: free
plans:
  - {name: free, allowance: 10, stripe_prices: [free]}
  - {name: pro, allowance: 500, stripe_prices: [pro]}
  - {name: seats, allowance: 100, seat_allowance: 20, trial_allowance: 0, stripe_prices: [seat]}
`)
	tests := []struct {
		name     string
		status   string
		quantity int64
		withPro  bool // a pro subscription too
		plan     string
		grant    int64
	}{
		{"FiftySeats", "active", 50, false, "seats", 100 + 50*20},
		{"ZeroQuantityReadAsOne", "active", 0, false, "seats", 120},
		{"OneSeatLosesToPro", "active", 1, true, "pro", 500},         // 120 < 500
		{"TwentyFiveSeatsBeatPro", "active", 25, true, "seats", 600}, // compared by what they grant
		{"TrialStillCountsSeats", "trialing", 50, false, "seats", 50 * 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			seat := item(periodStart, periodEnd, "seat")
			seat.Quantity = tt.quantity
			s := snapOf(sub("sub_seats", tt.status, t0, seat))
			if tt.withPro {
				s.Subscriptions = append(s.Subscriptions, sub("sub_pro", "active", t0.Add(-time.Hour), item(periodStart, periodEnd, "pro")))
			}
			ch := reconcile.Decide(reconcile.Account{ID: 1}, s, plans, t0)
			require.Equal(t, tt.plan, ch.Next.Plan)
			require.Equal(t, tt.grant, ch.Grant.Allowance)
		})
	}
	t.Run("HugeQuantitySaturates", func(t *testing.T) {
		seat := item(periodStart, periodEnd, "seat")
		seat.Quantity = math.MaxInt64 / 10 // × 20 overflows
		ch := reconcile.Decide(reconcile.Account{ID: 1}, snapOf(sub("sub_seats", "active", t0, seat)), plans, t0)
		require.Equal(t, int64(math.MaxInt64), ch.Grant.Allowance, "an absurd quantity must not wrap to a negative grant")
	})
	t.Run("MoreSeatsMidPeriodAreAGrantOfTheirOwn", func(t *testing.T) {
		seat := item(periodStart, periodEnd, "seat")
		seat.Quantity = 50
		fifty := reconcile.Decide(reconcile.Account{ID: 1}, snapOf(sub("sub_seats", "active", t0, seat)), plans, t0)
		seat.Quantity = 60
		sixty := reconcile.Decide(fifty.Next, snapOf(sub("sub_seats", "active", t0, seat)), plans, t0.Add(time.Minute))
		require.Equal(t, fifty.Grant.PeriodStart, sixty.Grant.PeriodStart)
		require.EqualValues(t, 200, sixty.Grant.TopUp(fifty.Grant.Allowance))
		require.NotEqual(t, fifty.Grant.Key(1), sixty.Grant.Key(1), "one key would drop the top-up as a repeat")
	})
}

// TestDecideConnectedAccounts: a connected account's customer
// (acct_X/cus_Y) is put on the plan its own account's rules (then the
// rules for all) map its price to; a price none maps leaves the account
// as it was and names the account.
func TestDecideConnectedAccounts(t *testing.T) {
	plans := parsePlans(t, connectPlans)
	customer := func(key string, it reconcile.Item) reconcile.Snapshot {
		s := snapOf(sub("sub_1", "active", t0, it))
		s.CustomerID = key
		return s
	}
	priced := func(refs ...string) reconcile.Item { return item(periodStart, periodEnd, refs...) }
	product := func(plan string, refs ...string) reconcile.Item {
		it := priced(refs...)
		it.Product, it.ProductPlan = "prod_1", plan
		return it
	}
	tests := []struct {
		name     string
		snap     reconcile.Snapshot
		plan     string // "" when unmapped
		unmapped []string
		outcome  string
	}{
		{"SamePriceIDAccountA", customer("acct_A/cus_1", priced("price_same")), "pro", nil, ""},
		{"SamePriceIDAccountB", customer("acct_B/cus_1", priced("price_same")), "team", nil, ""},
		{"LookupKeyForAllAccounts", customer("acct_Z/cus_1", priced("pro", "price_z")), "pro", nil, ""},
		{"LookupKeyOnThePlatform", customer("cus_1", priced("pro", "price_z")), "pro", nil, ""},
		{"ProductMetadataForAll", customer("acct_Z/cus_1", product("pro", "price_z")), "pro", nil, ""},
		{"ProductMetadataOfAccount", customer("acct_C/cus_1", product("team-v2", "price_c")), "team", nil, ""},
		{"UnmappedNamesTheAccount", customer("acct_Z/cus_1", priced("price_same")), "", []string{"acct_Z/price_same"},
			"ignored: price price_same of connected account acct_Z maps to no plan"},
		{"UnmappedProductNamesIt", customer("acct_Z/cus_1", product("team-v2", "price_z")), "", []string{"acct_Z/price_z"},
			"ignored: price price_z (product prod_1: billsync_plan team-v2) of connected account acct_Z maps to no plan"},
		{"UnmappedOnThePlatformAsBefore", customer("cus_1", priced("price_x")), "", []string{"price_x"},
			"ignored: price price_x maps to no plan"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cur := reconcile.Account{ID: 7, Provider: "stripe", CustomerID: tt.snap.CustomerID, Plan: "free", ObservedAt: t0}
			ch := reconcile.Decide(cur, tt.snap, plans, t0.Add(time.Minute))
			require.Equal(t, tt.unmapped, ch.Unmapped)
			if tt.plan == "" {
				require.Equal(t, reconcile.ResultIgnored, ch.Result)
				require.Equal(t, cur, ch.Next, "the account is left as it was")
				require.Equal(t, tt.outcome, ch.Outcome)
				require.Equal(t, tt.unmapped, ch.Done(cur).Unmapped, "the alert and the metric name the account")
				return
			}
			require.Equal(t, reconcile.ResultApplied, ch.Result)
			require.Equal(t, tt.plan, ch.Next.Plan)
			require.Equal(t, tt.snap.CustomerID, ch.Next.CustomerID)
		})
	}
}
