package reconcile_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/reconcile"
)

func TestParsePlans(t *testing.T) {
	plans, err := reconcile.ParsePlans(reconcile.ExamplePlans)
	require.NoError(t, err)
	require.Equal(t, "free", plans.Default().Name)
	require.EqualValues(t, 10, plans.Default().Allowance)
	for _, refs := range [][]string{{"pro"}, {"nope", "price_pro"}} {
		p, ok := plans.ForPrice("stripe", "", refs)
		require.True(t, ok, refs)
		require.Equal(t, "pro", p.Name)
	}
	p, ok := plans.ForPrice("kinde", "", []string{"customer_team_plan"})
	require.True(t, ok)
	require.EqualValues(t, 2000, p.Allowance)
	_, ok = plans.ForPrice("stripe", "", []string{"customer_team_plan"})
	require.False(t, ok, "a Kinde code must not match a Stripe price")
}

// TestPlansKeeps: which subscriptions keep their plan, by the default
// policy and by one the plans file sets.
func TestPlansKeeps(t *testing.T) {
	defaults := examplePlans()
	custom, err := reconcile.ParsePlans([]byte("default: free\n" +
		"policy: {keep_plan: [active, unpaid], paused_collection_keeps_plan: false}\nplans:\n  - name: free\n"))
	require.NoError(t, err)
	tests := []struct {
		status         string
		paused         bool
		byDefault, set bool
	}{
		{"active", false, true, true},
		{"trialing", false, true, false},
		{"past_due", false, true, false},
		{"unpaid", false, false, true},
		{"paused", false, false, false},
		{"incomplete", false, false, false},
		{"incomplete_expired", false, false, false},
		{"canceled", false, false, false},
		{"", false, false, false},
		{"active", true, true, false},
		{"past_due", true, true, false},
	}
	for _, tt := range tests {
		sub := reconcile.Subscription{Status: tt.status, CollectionPaused: tt.paused}
		require.Equal(t, tt.byDefault, defaults.Keeps(sub), "default policy: %s paused=%t", tt.status, tt.paused)
		require.Equal(t, tt.set, custom.Keeps(sub), "custom policy: %s paused=%t", tt.status, tt.paused)
	}
}

// TestParsePlansExtras: the optional per-plan keys are read.
func TestParsePlansExtras(t *testing.T) {
	plans, err := reconcile.ParsePlans([]byte("default: a\nplans:\n" +
		"  - {name: a, allowance: 5}\n  - {name: b, allowance: 100, rank: 3, trial_allowance: 7, seat_allowance: 2}\n"))
	require.NoError(t, err)
	a, _ := plans.Named("a")
	require.Nil(t, a.Rank)
	require.Nil(t, a.TrialAllowance)
	require.Zero(t, a.SeatAllowance)
	b, _ := plans.Named("b")
	require.Equal(t, 3, *b.Rank)
	require.EqualValues(t, 7, *b.TrialAllowance)
	require.EqualValues(t, 2, b.SeatAllowance)
}

func TestParsePlansRejects(t *testing.T) {
	tests := map[string]struct{ yaml, want string }{
		"ErrUnknownKey":       {"default: free\nplans:\n  - name: free\n    allowence: 10\n", "allowence"},
		"ErrNoDefault":        {"plans:\n  - name: free\n", "no default"},
		"ErrUndefinedDef":     {"default: gold\nplans:\n  - name: free\n", `"gold" is not defined`},
		"ErrDuplicatePlan":    {"default: free\nplans:\n  - name: free\n  - name: free\n", "defined twice"},
		"ErrDuplicatePrice":   {"default: a\nplans:\n  - {name: a, stripe_prices: [p]}\n  - {name: b, stripe_prices: [p]}\n", "already maps"},
		"ErrNegative":         {"default: a\nplans:\n  - {name: a, allowance: -1}\n", "negative"},
		"ErrEmpty":            {"", "plans"},
		"ErrUnknownPolicyKey": {"default: free\npolicy: {keep_plans: [active]}\nplans:\n  - name: free\n", "keep_plans"},
		"ErrUnknownStatus": {"default: free\npolicy: {keep_plan: [active, overdue]}\nplans:\n  - name: free\n",
			`unknown status "overdue"`},
		"ErrEmptyKeepPlan": {"default: free\npolicy: {keep_plan: []}\nplans:\n  - name: free\n", "keep_plan is empty"},
		"ErrNegativeTrial": {"default: a\nplans:\n  - {name: a, trial_allowance: -1}\n", "trial_allowance -1 is negative"},
		"ErrNegativeSeat":  {"default: a\nplans:\n  - {name: a, seat_allowance: -5}\n", "seat_allowance -5 is negative"},
		"ErrPolicyNotBool": {"default: a\npolicy: {grant_waits_for_payment: sometimes}\nplans:\n  - {name: a}\n", "sometimes"},
		"ErrRankNotNumber": {"default: a\nplans:\n  - {name: a, rank: high}\n", "high"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := reconcile.ParsePlans([]byte(tt.yaml))
			require.ErrorContains(t, err, tt.want)
		})
	}
}

// FuzzParsePlans: any file either parses into plans that keep their
// promises (a defined default, no negative allowance) or is refused.
func FuzzParsePlans(f *testing.F) {
	f.Add(reconcile.ExamplePlans)
	f.Add([]byte("default: a\nplans:\n  - {name: a, allowance: 5, stripe_prices: [x, y]}\n"))
	f.Add([]byte("default: a\nplans: [{name: a}, {name: a}]\n"))
	f.Add([]byte("{"))
	f.Add([]byte(connectPlans))
	f.Add([]byte("default: a\npolicy: {keep_plan: [active, unpaid], grant_waits_for_payment: false}\n" +
		"plans:\n  - {name: a, rank: 1, trial_allowance: 0, seat_allowance: 3}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		plans, err := reconcile.ParsePlans(data)
		if err != nil {
			return
		}
		def := plans.Default()
		require.NotEmpty(t, def.Name)
		require.GreaterOrEqual(t, def.Allowance, int64(0))
		if def.TrialAllowance != nil {
			require.GreaterOrEqual(t, *def.TrialAllowance, int64(0))
		}
		require.GreaterOrEqual(t, def.SeatAllowance, int64(0))
		// Every plan a rule maps to is defined, whichever account asks.
		for _, pl := range plans.List() {
			for _, r := range pl.StripeAccounts {
				for _, ref := range r.Prices {
					for _, account := range r.Accounts {
						if account == reconcile.AccountsAll || account == reconcile.AccountsPlatform {
							account = ""
						}
						got, ok := plans.ForPrice("stripe", account, []string{ref})
						require.True(t, ok, "%s maps for %s", ref, account)
						_, defined := plans.Named(got.Name)
						require.True(t, defined)
					}
				}
			}
		}
	})
}

// TestPlansList: every plan in the file's order, with what it maps, as
// `plans check` compares them with the provider's prices; a copy.
func TestPlansList(t *testing.T) {
	plans, err := reconcile.ParsePlans([]byte("default: free\nplans:\n" +
		"  - {name: team, allowance: 2000, stripe_prices: [price_team, team], kinde_plans: [k_team]}\n" +
		"  - {name: free, allowance: 10, stripe_prices: [free]}\n"))
	require.NoError(t, err)
	list := plans.List()
	require.Len(t, list, 2)
	require.Equal(t, "team", list[0].Name)
	require.Equal(t, []string{"price_team", "team"}, list[0].StripePrices)
	require.Equal(t, []string{"k_team"}, list[0].KindePlans)
	require.Equal(t, "free", list[1].Name)
	require.EqualValues(t, 10, list[1].Allowance)

	list[0].StripePrices[0] = "changed"
	list[1].Name = "changed"
	require.Equal(t, "price_team", plans.List()[0].StripePrices[0], "List hands out a copy")
	require.Equal(t, "free", plans.List()[1].Name)
	p, ok := plans.ForPrice("stripe", "", []string{"price_team"})
	require.True(t, ok)
	require.Equal(t, "price_team", p.StripePrices[0])
}

// connectPlans maps prices per Stripe account: acct_A and acct_B share a
// price id that means different plans, every account's lookup key "pro"
// means pro, and a product's billsync_plan maps for all.
const connectPlans = `default: free
plans:
  - name: free
    stripe_prices: [free]
  - name: pro
    allowance: 500
    stripe_prices: [price_pro]
    stripe_accounts:
      - accounts: [all]
        prices: [pro]
        products: [pro]
      - accounts: [acct_A]
        prices: [price_same]
  - name: team
    allowance: 2000
    stripe_accounts:
      - accounts: [acct_B, platform]
        prices: [price_same]
      - accounts: [acct_C]
        prices: [pro]
        products: [team, team-v2]
`

// TestPlansForItem: which plan a Stripe price means depends on the
// customer's account; an account's own rule beats one for all, and a
// connected account's price id never maps another account's price.
func TestPlansForItem(t *testing.T) {
	plans, err := reconcile.ParsePlans([]byte(connectPlans))
	require.NoError(t, err)
	tests := []struct {
		name, account string
		item          reconcile.Item
		want          string // "" for none
	}{
		{"SamePriceIDAccountA", "acct_A", reconcile.Item{PriceRefs: []string{"price_same"}}, "pro"},
		{"SamePriceIDAccountB", "acct_B", reconcile.Item{PriceRefs: []string{"price_same"}}, "team"},
		{"SamePriceIDPlatform", "", reconcile.Item{PriceRefs: []string{"price_same"}}, "team"},
		{"SamePriceIDOtherAccount", "acct_D", reconcile.Item{PriceRefs: []string{"price_same"}}, ""},
		{"LookupKeyForAll", "acct_D", reconcile.Item{PriceRefs: []string{"pro", "price_1x"}}, "pro"},
		{"LookupKeyForAllOnPlatform", "", reconcile.Item{PriceRefs: []string{"pro", "price_1x"}}, "pro"},
		{"AccountRuleBeatsAll", "acct_C", reconcile.Item{PriceRefs: []string{"pro"}}, "team"},
		{"StripePricesArePlatformOnly", "acct_D", reconcile.Item{PriceRefs: []string{"price_pro"}}, ""},
		{"StripePricesOnPlatform", "", reconcile.Item{PriceRefs: []string{"price_pro"}}, "pro"},
		{"ProductForAll", "acct_D", reconcile.Item{PriceRefs: []string{"price_9"}, Product: "prod_9", ProductPlan: "pro"}, "pro"},
		{"ProductOfAccount", "acct_C", reconcile.Item{PriceRefs: []string{"price_9"}, ProductPlan: "team-v2"}, "team"},
		{"ProductOfAnotherAccount", "acct_D", reconcile.Item{PriceRefs: []string{"price_9"}, ProductPlan: "team-v2"}, ""},
		{"PriceBeatsProductInOneScope", "acct_A", reconcile.Item{PriceRefs: []string{"price_same"}, ProductPlan: "team"}, "pro"},
		{"AccountProductBeatsAllPrice", "acct_C", reconcile.Item{PriceRefs: []string{"price_9"}, ProductPlan: "team"}, "team"},
		{"NoProductPlanNoMatch", "acct_D", reconcile.Item{PriceRefs: []string{"price_9"}, Product: "prod_9"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, ok := plans.ForItem("stripe", tt.account, tt.item)
			require.Equal(t, tt.want != "", ok)
			require.Equal(t, tt.want, p.Name)
		})
	}
	_, ok := plans.ForItem("kinde", "", reconcile.Item{PriceRefs: []string{"pro"}})
	require.False(t, ok, "Stripe rules never map a Kinde plan code")
	require.True(t, plans.ReadsProductPlans())
	require.False(t, examplePlans().ReadsProductPlans(), "a file without products reads no product")
	noProducts, err := reconcile.ParsePlans([]byte("default: a\nplans:\n  - name: a\n    stripe_accounts: [{accounts: [all], prices: [a]}]\n"))
	require.NoError(t, err)
	require.False(t, noProducts.ReadsProductPlans())
}

// TestParsePlansAccountRules: the stripe_accounts rules a file may give,
// and those it may not.
func TestParsePlansAccountRules(t *testing.T) {
	rule := func(r string) string {
		return "default: a\nplans:\n  - name: a\n    stripe_accounts:\n      - " + r + "\n"
	}
	valid := map[string]string{
		"OneAccount":      rule("{accounts: [acct_1], prices: [price_1]}"),
		"Several":         rule("{accounts: [acct_1, acct_2, platform], prices: [pro], products: [pro]}"),
		"All":             rule("{accounts: [all], products: [a]}"),
		"OneWord":         rule("{accounts: acct_1, prices: [p]}"),
		"SameRefTwoScope": "default: a\nplans:\n  - {name: a, stripe_accounts: [{accounts: [all], prices: [p]}]}\n  - {name: b, stripe_accounts: [{accounts: [acct_1], prices: [p]}]}\n",
	}
	for name, yaml := range valid {
		t.Run(name, func(t *testing.T) {
			_, err := reconcile.ParsePlans([]byte(yaml))
			require.NoError(t, err)
		})
	}
	invalid := map[string]struct{ yaml, want string }{
		"ErrUnknownKey":      {rule("{accounts: [acct_1], price: [p]}"), "price"},
		"ErrNoAccounts":      {rule("{prices: [p]}"), "accounts is empty"},
		"ErrNotAnAccount":    {rule("{accounts: [cus_1], prices: [p]}"), `"cus_1" is not a connected account`},
		"ErrAllWithOthers":   {rule("{accounts: [all, acct_1], prices: [p]}"), "give it alone"},
		"ErrAccountTwice":    {rule("{accounts: [acct_1, acct_1], prices: [p]}"), "given twice"},
		"ErrMapsNothing":     {rule("{accounts: [acct_1]}"), "maps nothing"},
		"ErrEmptyPrice":      {rule("{accounts: [acct_1], prices: ['']}"), "an empty stripe price"},
		"ErrEmptyProduct":    {rule("{accounts: [acct_1], products: [' ']}"), "an empty product billsync_plan"},
		"ErrAccountsNotList": {rule("{accounts: {acct_1: yes}, prices: [p]}"), "cannot unmarshal"},
		"ErrDupInAccount": {"default: a\nplans:\n  - {name: a, stripe_accounts: [{accounts: [acct_1], prices: [p]}]}\n" +
			"  - {name: b, stripe_accounts: [{accounts: [acct_1, acct_2], prices: [p]}]}\n",
			`stripe price "p" already maps to plan "a" for connected account acct_1`},
		"ErrDupProductForAll": {"default: a\nplans:\n  - {name: a, stripe_accounts: [{accounts: [all], products: [x]}]}\n" +
			"  - {name: b, stripe_accounts: [{accounts: [all], products: [x]}]}\n",
			`product billsync_plan "x" already maps to plan "a" for all accounts`},
		"ErrDupWithStripePrices": {"default: a\nplans:\n  - {name: a, stripe_prices: [p]}\n" +
			"  - {name: b, stripe_accounts: [{accounts: [platform], prices: [p]}]}\n",
			`"p" already maps to plan "a" for the platform's customers`},
	}
	for name, tt := range invalid {
		t.Run(name, func(t *testing.T) {
			_, err := reconcile.ParsePlans([]byte(tt.yaml))
			require.ErrorContains(t, err, tt.want)
		})
	}
}

// TestExamplePlansConnectBlock: the stripe_accounts example commented out
// in plans.example.yaml parses once uncommented under pro, and maps what
// it says it maps.
func TestExamplePlansConnectBlock(t *testing.T) {
	ex := string(reconcile.ExamplePlans)
	start := strings.Index(ex, "#     stripe_accounts:\n")
	end := strings.Index(ex, "# (end of the stripe_accounts example)\n")
	require.True(t, start > 0 && end > start, "the example has its stripe_accounts block")
	var block strings.Builder
	for line := range strings.Lines(ex[start:end]) {
		block.WriteString(strings.TrimPrefix(strings.TrimPrefix(line, "#"), " "))
	}
	const pro = "    stripe_accounts: [{accounts: all, prices: [pro]}]   # Stripe Connect: every account's pro lookup key\n"
	require.Contains(t, ex, pro)
	plans, err := reconcile.ParsePlans([]byte(strings.Replace(ex, pro, block.String(), 1)))
	require.NoError(t, err)
	require.True(t, plans.ReadsProductPlans())
	for _, tt := range []struct {
		account string
		item    reconcile.Item
	}{
		{"acct_1Nv0FGQ9RKHgCVdK", reconcile.Item{PriceRefs: []string{"price_1PqRsTAbCdEf"}}},
		{"acct_other", reconcile.Item{PriceRefs: []string{"pro", "price_1x"}}},
		{"acct_other", reconcile.Item{PriceRefs: []string{"price_1x"}, ProductPlan: "pro"}},
	} {
		p, ok := plans.ForItem("stripe", tt.account, tt.item)
		require.True(t, ok, "%s %v", tt.account, tt.item)
		require.Equal(t, "pro", p.Name)
	}
	_, ok := plans.ForItem("stripe", "acct_other", reconcile.Item{PriceRefs: []string{"price_1PqRsTAbCdEf"}})
	require.False(t, ok, "one account's price id maps no other account's price")
}
