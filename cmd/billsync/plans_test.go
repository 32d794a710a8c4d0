package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	stripeapi "github.com/stripe/stripe-go/v82"

	stripemock "github.com/billsync/billsync/mocks/stripe"
	"github.com/billsync/billsync/mocks/testenv"
)

func TestPlansCheck(t *testing.T) {
	// Not parallel: the command reads its configuration from the environment.
	var priceLists atomic.Int32
	h := testenv.ForTest(t, testenv.Stripe, testenv.Options{Wrap: func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodGet && r.URL.Path == "/v1/prices" {
				priceLists.Add(1)
			}
			next.ServeHTTP(w, r)
		})
	}})
	ctx := context.Background()
	price := func(lookupKey string, active bool) string {
		p := &stripeapi.PriceCreateParams{Currency: stripeapi.String("usd"), UnitAmount: stripeapi.Int64(100),
			ProductData: &stripeapi.PriceCreateProductDataParams{Name: stripeapi.String("Seats")},
			Recurring:   &stripeapi.PriceCreateRecurringParams{Interval: stripeapi.String("month")},
			Active:      stripeapi.Bool(active)}
		if lookupKey != "" {
			p.LookupKey = stripeapi.String(lookupKey)
		}
		created, err := h.Stripe.API.V1Prices.Create(ctx, p)
		require.NoError(t, err)
		return created.ID
	}
	newSeats := price("", true)    // a new price nobody mapped
	price("archived_addon", false) // inactive: not reported
	for i := range 150 {           // 4 harness prices + 151 new ones active: two pages
		price(fmt.Sprint("team_v", i), true)
	}
	plansFile := filepath.Join(t.TempDir(), "plans.yaml")
	var yaml bytes.Buffer
	yaml.WriteString("default: free\nplans:\n")
	yaml.WriteString("  - {name: free, allowance: 10, stripe_prices: [free, price_free]}\n")
	yaml.WriteString("  - {name: pro, allowance: 500, stripe_prices: [pro, pro_2019]}\n")
	yaml.WriteString("  - {name: team, allowance: 5000, stripe_prices: [price_team, legacy_gold")
	for i := range 150 {
		fmt.Fprintf(&yaml, ", team_v%d", i)
	}
	yaml.WriteString("]}\n")
	require.NoError(t, os.WriteFile(plansFile, yaml.Bytes(), 0o600))

	t.Setenv("STRIPE_API_KEY", stripemock.DefaultAPIKey)
	t.Setenv("STRIPE_API_KEY_FILE", "")
	t.Setenv("BILLSYNC_PLANS", plansFile)
	t.Setenv("STRIPE_API_URL", h.URL)

	var out bytes.Buffer
	err := run(ctx, []string{"plans", "check", "-stripe-rate", "1000"}, &out, &out)
	require.ErrorIs(t, err, errUnmappedPrices, out.String())
	require.Equal(t, int32(2), priceLists.Load(), "one list call per 100 prices (155 active)")
	require.Equal(t, "active Stripe prices: 155\n"+
		"active prices that map to no plan (1): add their lookup key or id to a plan's stripe_prices\n"+
		"  "+newSeats+"\n"+
		"plan references that match no active price (1): archived prices, or typos\n"+
		"  plan pro: pro_2019\n", out.String())

	t.Run("AllMapped", func(t *testing.T) {
		yaml.Reset()
		fmt.Fprintf(&yaml, "default: free\nplans:\n  - {name: free, allowance: 10, stripe_prices: [free, %s]}\n", newSeats)
		fmt.Fprintf(&yaml, "  - {name: pro, allowance: 500, stripe_prices: [pro, team, legacy_gold")
		for i := range 150 {
			fmt.Fprintf(&yaml, ", team_v%d", i)
		}
		yaml.WriteString("]}\n")
		require.NoError(t, os.WriteFile(plansFile, yaml.Bytes(), 0o600))
		out.Reset()
		require.NoError(t, run(ctx, []string{"plans", "check"}, &out, &out))
		require.Equal(t, "active Stripe prices: 155\nevery active price maps to a plan\n", out.String())
	})

	// A price mapped by its product's metadata (billsync_plan), not by
	// its lookup key or id: the list expands the products.
	t.Run("MappedByProduct", func(t *testing.T) {
		p, err := h.Stripe.API.V1Prices.Retrieve(ctx, newSeats, nil)
		require.NoError(t, err)
		h.Stripe.Fake.SetProductMetadata(p.Product.ID, map[string]string{"billsync_plan": "seats"})
		yaml.Reset()
		yaml.WriteString("default: free\nplans:\n  - {name: free, allowance: 10, stripe_prices: [free]}\n")
		yaml.WriteString("  - {name: seats, stripe_accounts: [{accounts: all, products: [seats]}]}\n")
		fmt.Fprintf(&yaml, "  - {name: pro, allowance: 500, stripe_prices: [pro, team, legacy_gold")
		for i := range 150 {
			fmt.Fprintf(&yaml, ", team_v%d", i)
		}
		yaml.WriteString("]}\n")
		require.NoError(t, os.WriteFile(plansFile, yaml.Bytes(), 0o600))
		out.Reset()
		lists := priceLists.Load()
		require.NoError(t, run(ctx, []string{"plans", "check"}, &out, &out))
		require.Equal(t, "active Stripe prices: 155\nevery active price maps to a plan\n", out.String())
		require.Equal(t, lists+2, priceLists.Load(), "the products come with the prices: no request more")
	})

	t.Run("Usage", func(t *testing.T) {
		out.Reset()
		require.ErrorIs(t, run(ctx, []string{"plans"}, &out, &out), errUsage)
	})
}
