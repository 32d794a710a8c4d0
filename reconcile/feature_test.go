package reconcile_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/reconcile"
)

func n(v int64) *int64 { return &v }

// featureOf returns the account's feature key, failing when absent.
func featureOf(t *testing.T, a reconcile.Account, key string) reconcile.Feature {
	t.Helper()
	f, ok := reconcile.FeatureNamed(a.Features, key)
	require.True(t, ok, "feature %s in %+v", key, a.Features)
	return f
}

// TestPlansWithoutFeatures: a plans file without features: resolves no
// feature, gives no meter grant, and keeps the default grant's key as it
// was (grant:{account}:{period_start}:{plan}:{allowance}).
func TestPlansWithoutFeatures(t *testing.T) {
	plans := examplePlans()
	require.Empty(t, plans.FeatureDefs())
	ch := reconcile.Decide(reconcile.Account{ID: 7}, snap("active", "price_pro"), plans, t0)
	require.Empty(t, ch.Next.Features)
	require.Empty(t, ch.Meters)
	require.Len(t, ch.Grants(), 1)
	require.Equal(t, "grant:7:2026-11-03T00:00:00Z:pro:500", ch.Grant.Key(7))
	require.Equal(t, "usage:7:k1", reconcile.Debit{Key: "k1"}.LedgerKey(7))
}

// TestExamplePlansFeatureBlock: the features block commented out in
// plans.example.yaml parses once uncommented, so the example is true.
func TestExamplePlansFeatureBlock(t *testing.T) {
	ex := string(reconcile.ExamplePlans)
	start := strings.Index(ex, "# features:\n")
	end := strings.Index(ex, "# and, under each plan:\n")
	require.True(t, start > 0 && end > start, "the example has its features block")
	var block strings.Builder
	for line := range strings.Lines(ex[start:end]) {
		block.WriteString(strings.TrimPrefix(strings.TrimPrefix(line, "#"), " "))
	}
	perPlan := strings.TrimPrefix(strings.SplitN(ex[end:], "\n", 3)[1], "# ")
	withFeatures := strings.Replace(ex, "    kinde_plans: [customer_pro_plan]\n", "    kinde_plans: [customer_pro_plan]\n"+perPlan+"\n", 1)
	plans := parsePlans(t, withFeatures+"\n"+block.String())
	ch := reconcile.Decide(reconcile.Account{ID: 7}, snap("active", "price_pro"), plans, t0)
	require.Equal(t, reconcile.Feature{Key: "seats", Type: reconcile.FeatureLimit, Limit: n(5), Source: "plan:pro"}, featureOf(t, ch.Next, "seats"))
}

// TestParsePlansFeaturesRefused: a typo in features must not grant
// anything: each mistake is an error, all reported at once.
func TestParsePlansFeaturesRefused(t *testing.T) {
	base := "default: free\nplans:\n  - name: free\n    features: %s\nfeatures:\n%s"
	tests := map[string]struct{ plan, defs, want string }{
		"undeclared":        {"{expor: true}", "  - {key: export, type: boolean}\n", `feature "expor" is not declared`},
		"boolean number":    {"{export: 5}", "  - {key: export, type: boolean}\n", "boolean: give true or false"},
		"limit bool":        {"{seats: true}", "  - {key: seats, type: limit}\n", "limit: give a whole number"},
		"negative":          {"{seats: -1}", "  - {key: seats, type: limit}\n", "is negative"},
		"unknown type":      {"{}", "  - {key: seats, type: number}\n", `type "number"`},
		"bad key":           {"{}", "  - {key: 'a:b', type: boolean}\n", `key "a:b"`},
		"declared twice":    {"{}", "  - {key: x, type: boolean}\n  - {key: x, type: boolean}\n", "declared twice"},
		"lookup key twice":  {"{}", "  - {key: x, type: boolean, stripe: {k: true}}\n  - {key: y, type: boolean, stripe: {k: true}}\n", `lookup key "k" already grants`},
		"stripe limit bool": {"{}", "  - {key: seats, type: limit, stripe: {k: true}}\n", "limit: give a whole number"},
		"not a value":       {"{export: maybe}", "  - {key: export, type: boolean}\n", "neither true/false nor a whole number"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := reconcile.ParsePlans([]byte(strings.Replace(strings.Replace(base, "%s", tt.plan, 1), "%s", tt.defs, 1)))
			require.ErrorContains(t, err, tt.want)
		})
	}
}

// TestResolveTwoSubscriptionsOneLimit: two live subscriptions grant seats
// (pro: 5, the add-on: 20): the answer is 20, from the add-on, though pro
// decides the plan; the plan without a feature answers not allowed.
func TestResolveTwoSubscriptionsOneLimit(t *testing.T) {
	plans := featurePlans()
	s := snapOf(
		sub("sub_addon", "active", t0.Add(-time.Hour), item(periodStart, periodEnd, "price_seats_addon")),
		sub("sub_pro", "active", t0.Add(-2*time.Hour), item(periodStart, periodEnd, "price_pro")),
	)
	ch := reconcile.Decide(reconcile.Account{ID: 7}, s, plans, t0)
	require.Equal(t, "pro", ch.Next.Plan, "the add-on grants more seats, not a better plan")
	require.Equal(t, reconcile.Feature{Key: "seats", Type: reconcile.FeatureLimit, Limit: n(20), Source: "plan:seats_addon"}, featureOf(t, ch.Next, "seats"))
	require.Equal(t, reconcile.Feature{Key: "export", Type: reconcile.FeatureBoolean, Source: "plan:pro"}, featureOf(t, ch.Next, "export"))

	// The same two, given in the other order: the same answer.
	s.Subscriptions[0], s.Subscriptions[1] = s.Subscriptions[1], s.Subscriptions[0]
	require.Equal(t, ch.Next.Features, reconcile.Decide(reconcile.Account{ID: 7}, s, plans, t0).Next.Features)

	free := reconcile.Decide(reconcile.Account{ID: 8}, snap("active", "price_free"), plans, t0)
	u := reconcile.UserAccount{Account: free.Next}
	for _, key := range []string{"export", "seats", "sso"} {
		check, err := plans.CheckNamed(key, u)
		require.NoError(t, err)
		require.False(t, check.Allowed, key)
		require.Nil(t, check.Source, key)
	}
	_, err := plans.CheckNamed("exprot", u)
	var unknown *reconcile.UnknownFeatureError
	require.ErrorAs(t, err, &unknown)
	require.ErrorIs(t, err, reconcile.ErrNotFound)
	require.Equal(t, []string{"ai_credits", "export", "seats", "sso"}, unknown.Known)
}

// TestResolveSources: on/off is on if any source grants it, a limit is
// the largest (an unlimited one beats any number), each answer names its
// source, and entitlements the plans file does not map are dropped.
func TestResolveSources(t *testing.T) {
	plans := featurePlans()
	got := reconcile.ResolveFeatures(plans, []string{"free"}, []reconcile.Entitlement{
		{Provider: "stripe", Key: "export"},
		{Provider: "stripe", Key: "seats-50"},
		{Provider: "kinde", Key: "seats", Limit: n(30)},
		{Provider: "stripe", Key: "unmapped"},
	})
	require.Equal(t, []reconcile.Feature{
		{Key: "ai_credits", Type: reconcile.FeatureMetered, Limit: n(20), Source: "plan:free"},
		{Key: "export", Type: reconcile.FeatureBoolean, Source: "stripe:export"},
		{Key: "seats", Type: reconcile.FeatureLimit, Limit: n(50), Source: "stripe:seats-50"},
	}, got)

	unlimited := reconcile.ResolveFeatures(plans, []string{"team"}, []reconcile.Entitlement{{Provider: "kinde", Key: "seats"}})
	require.Contains(t, unlimited, reconcile.Feature{Key: "seats", Type: reconcile.FeatureLimit, Source: "kinde:seats"})
	// A meter from a provider with no number grants nothing more.
	meter := reconcile.ResolveFeatures(plans, []string{"free"}, []reconcile.Entitlement{{Provider: "kinde", Key: "ai_credits"}, {Provider: "kinde", Key: "ai_credits", Limit: n(99)}})
	require.Contains(t, meter, reconcile.Feature{Key: "ai_credits", Type: reconcile.FeatureMetered, Limit: n(99), Source: "kinde:ai_credits"})
}

// TestDecideEntitlements: a feature removed at the provider is gone after
// the next reconcile; a read that did not ask for entitlements (the
// sweep's listing) keeps the account's; a deleted customer has none.
func TestDecideEntitlements(t *testing.T) {
	plans := featurePlans()
	withExport := snap("active", "price_free")
	withExport.Entitlements = []reconcile.Entitlement{{Provider: "stripe", Key: "export"}, {Provider: "stripe", Key: "other"}}
	first := reconcile.Decide(reconcile.Account{ID: 7}, withExport, plans, t0)
	require.Equal(t, "stripe:export", featureOf(t, first.Next, "export").Source)
	require.Equal(t, []reconcile.Entitlement{{Provider: "stripe", Key: "export"}}, first.Next.Entitlements, "only mapped ones are kept")

	listed := snap("active", "price_free")
	listed.KeepEntitlements = true // a listing that did not read them
	kept := reconcile.Decide(first.Next, listed, plans, t0.Add(time.Minute))
	require.Equal(t, reconcile.ResultUnchanged, kept.Result)
	require.Equal(t, first.Next.Features, kept.Next.Features)

	removed := snap("active", "price_free") // read now: none
	gone := reconcile.Decide(kept.Next, removed, plans, t0.Add(2*time.Minute))
	require.Equal(t, reconcile.ResultApplied, gone.Result)
	_, has := reconcile.FeatureNamed(gone.Next.Features, "export")
	require.False(t, has)
	require.Contains(t, gone.Outcome, "feature export lost")

	deleted := reconcile.Snapshot{Provider: "stripe", CustomerID: "cus_1", Deleted: true}
	require.Empty(t, reconcile.Decide(first.Next, deleted, plans, t0.Add(3*time.Minute)).Next.Entitlements)
}

// TestDecideMeters: each metered feature gets its own grant for the
// period, keyed apart from the default one; none while payment waits.
func TestDecideMeters(t *testing.T) {
	plans := featurePlans()
	ch := reconcile.Decide(reconcile.Account{ID: 7}, snap("active", "price_pro"), plans, t0)
	require.Equal(t, []reconcile.Grant{{Meter: "ai_credits", Plan: "pro", Source: "plan:pro", Allowance: 1000,
		PeriodStart: periodStart, PeriodEnd: periodEnd}}, ch.Meters)
	require.Equal(t, "grant:7:2026-11-03T00:00:00Z:pro:500", ch.Grant.Key(7), "the default meter's key is unchanged")
	require.Equal(t, "grant.ai_credits:7:2026-11-03T00:00:00Z:1000", ch.Meters[0].Key(7))
	require.Equal(t, "usage.ai_credits:7:k1", reconcile.Debit{Feature: "ai_credits", Key: "k1"}.LedgerKey(7))

	out := ch.Done(reconcile.Account{ID: 7}, 500, 1000)
	require.Contains(t, out.Text, "Pro allowance granted (+500), granted ai_credits +1000")
	require.EqualValues(t, 500, out.Granted)

	waiting := reconcile.Decide(ch.Next, oneSub("cus_1", "past_due", periodEnd, nextEnd, "price_pro"), plans, t0.Add(time.Hour))
	require.Nil(t, waiting.Grant)
	require.Empty(t, waiting.Meters, "past_due waits for every meter")
}

// TestDecideDebitMeter: a debit of a meter is decided on that meter's
// balance; a feature that is not metered or not declared is refused
// before.
func TestDecideDebitMeter(t *testing.T) {
	plans := featurePlans()
	acc := reconcile.Account{ID: 7, Plan: "pro", PeriodStart: periodStart}
	d := reconcile.Debit{UserRef: "u1", Feature: "ai_credits", Key: "k1", Amount: 30}
	require.NoError(t, plans.CheckDebit(d))
	res, err := reconcile.DecideDebit(d, reconcile.DebitState{Account: acc, Balance: 100})
	require.NoError(t, err)
	require.Equal(t, reconcile.LedgerEntry{Key: "usage.ai_credits:7:k1", Kind: "usage", Plan: "pro", Delta: -30,
		PeriodStart: periodStart, Meter: "ai_credits"}, res.Entry)
	_, err = reconcile.DecideDebit(d, reconcile.DebitState{Account: acc, Balance: 29})
	var short *reconcile.InsufficientError
	require.ErrorAs(t, err, &short)
	require.Equal(t, "ai_credits", short.Feature)

	require.ErrorIs(t, plans.CheckDebit(reconcile.Debit{Feature: "seats"}), reconcile.ErrInvalid)
	require.ErrorIs(t, plans.CheckDebit(reconcile.Debit{Feature: "nope"}), reconcile.ErrUnknownFeature)
	require.ErrorIs(t, reconcile.Debit{UserRef: "u", Key: "k", Amount: 1, Feature: "a:b"}.Validate(), reconcile.ErrInvalid)
}

// TestFeaturesFileIsValid: the fixture parses (panics otherwise) and is
// the example plans plus features: the same plans, prices and codes.
func TestFeaturesFileIsValid(t *testing.T) {
	fp, ex := featurePlans(), examplePlans()
	for _, pl := range ex.List() {
		got, ok := fp.Named(pl.Name)
		require.True(t, ok, pl.Name)
		require.Equal(t, pl.Allowance, got.Allowance)
		require.Equal(t, pl.StripePrices, got.StripePrices)
	}
	require.True(t, bytes.Contains(featurePlansYAML(), []byte("features:")))
}
