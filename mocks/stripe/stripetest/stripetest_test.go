package stripetest_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/billsync/billsync/mocks/stripe/stripetest"
	"github.com/billsync/billsync/reconcile"
)

// TestPricesAreTheExamplePlans: the fake's prices are exactly the Stripe
// prices the example plans name (each plan's id and lookup key), plus the
// one legacy price that maps to no plan.
func TestPricesAreTheExamplePlans(t *testing.T) {
	var file struct {
		Plans []struct {
			Name         string   `yaml:"name"`
			StripePrices []string `yaml:"stripe_prices"`
		} `yaml:"plans"`
	}
	require.NoError(t, yaml.Unmarshal(reconcile.ExamplePlans, &file))
	want := map[string][]string{}
	for _, p := range file.Plans {
		want[p.Name] = p.StripePrices
	}
	plans, err := reconcile.ParsePlans(reconcile.ExamplePlans)
	require.NoError(t, err)

	got := map[string][]string{}
	var unmapped []string
	for _, p := range stripetest.Prices() {
		byID, okID := plans.ForPrice("stripe", []string{p.ID})
		byKey, okKey := plans.ForPrice("stripe", []string{p.LookupKey})
		require.Equal(t, okID, okKey, "%s: its id and lookup key must agree", p.ID)
		if !okID {
			unmapped = append(unmapped, p.ID)
			continue
		}
		require.Equal(t, byID.Name, byKey.Name, p.ID)
		got[byID.Name] = append(got[byID.Name], p.LookupKey, p.ID)
	}
	require.Equal(t, want, got)
	require.Equal(t, []string{"price_legacy"}, unmapped)
}
