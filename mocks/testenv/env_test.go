package testenv_test

import (
	"io"
	"net/http"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store/storetest"
)

func TestMain(m *testing.M) { os.Exit(storetest.Main(m)) }

// TestEndToEnd: for each provider, a customer moves to Pro at the fake; its
// webhooks reach the intake, the worker fetches through billsync's client
// and the account ends on Pro with Pro's allowance, every event applied.
func TestEndToEnd(t *testing.T) {
	for _, provider := range testenv.Providers {
		t.Run(provider, func(t *testing.T) {
			t.Parallel()
			h := testenv.ForTest(t, provider, testenv.Options{Store: storetest.NewStore(t)})
			var customer string
			var events int
			switch provider {
			case testenv.Stripe:
				customer = h.Customer("user_1")
				h.Subscribe(customer, "price_pro")
				events = 3 // customer.created, customer.subscription.created, invoice.paid
			case testenv.Kinde:
				customer = "customer_1"
				h.SetPlan(customer, testenv.ProPlan)
				h.Send("customer.plan_changed", customer)
				events = 1
			}
			h.Delivered()
			h.DrainAll(h.Worker(reconcile.WorkerConfig{}), 0)
			require.Equal(t, storetest.CustomerState{Plan: "pro", Status: "active", Balance: 500, Grants: 1,
				Events: map[string]int{"applied": events}}, storetest.Customer(t, h.Store, provider, customer))
			outcomes := h.TakeOutcomes()
			require.Len(t, outcomes, 1, "one reconcile for the customer's events")
			require.Equal(t, reconcile.ResultApplied, outcomes[0].Result)
			require.Empty(t, h.TakeOutcomes(), "taken")
		})
	}
}

// TestIntakeAsServeAssemblesIt: the intake is billsync as serve assembles
// it (package app), not a second wiring: it counts each delivery on
// /metrics as serve does.
func TestIntakeAsServeAssemblesIt(t *testing.T) {
	h := testenv.ForTest(t, testenv.Stripe, testenv.Options{Store: storetest.NewStore(t)})
	h.Customer("user_1")
	h.Delivered()
	res, err := http.Get(h.IntakeURL + "/metrics")
	require.NoError(t, err)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, string(body), `billsync_webhook_receipts_total{answer="stored",provider="stripe"} 1`)
}

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
	plans := testenv.Plans()

	got := map[string][]string{}
	var unmapped []string
	for _, p := range testenv.Prices() {
		byID, okID := plans.ForPrice("stripe", "", []string{p.ID})
		byKey, okKey := plans.ForPrice("stripe", "", []string{p.LookupKey})
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

// TestPlanCodesAreTheExamplePlans: the Kinde plan codes name the example
// plans of the same name.
func TestPlanCodesAreTheExamplePlans(t *testing.T) {
	for code, name := range map[string]string{testenv.FreePlan: "free", testenv.ProPlan: "pro", testenv.TeamPlan: "team"} {
		p, ok := testenv.Plans().ForPrice(testenv.Kinde, "", []string{code})
		require.True(t, ok, code)
		require.Equal(t, name, p.Name, code)
	}
}

// TestOptionsRefused: a Network with no intake behind it, or a provider
// the harness does not fake, is refused before anything starts.
func TestOptionsRefused(t *testing.T) {
	_, err := testenv.New("paddle", testenv.Options{})
	require.ErrorContains(t, err, `unknown provider "paddle"`)
	for _, opts := range []testenv.Options{{Network: http.NotFoundHandler()}, {Network: http.NotFoundHandler(), Store: storetest.NewStore(t), NoIntake: true}} {
		_, err = testenv.New(testenv.Stripe, opts)
		require.ErrorContains(t, err, "Network needs an intake")
	}
}
