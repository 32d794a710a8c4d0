package reconcile_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/reconcile"
)

func examplePlans(t testing.TB) *reconcile.Plans {
	t.Helper()
	plans, err := reconcile.ParsePlans(reconcile.ExamplePlans)
	require.NoError(t, err)
	return plans
}

func TestParsePlans(t *testing.T) {
	plans := examplePlans(t)
	require.Equal(t, "free", plans.Default().Name)
	require.EqualValues(t, 10, plans.Default().Allowance)
	for _, refs := range [][]string{{"pro"}, {"nope", "price_pro"}} {
		p, ok := plans.ForPrice("stripe", refs)
		require.True(t, ok, refs)
		require.Equal(t, "pro", p.Name)
	}
	p, ok := plans.ForPrice("kinde", []string{"customer_team_plan"})
	require.True(t, ok)
	require.EqualValues(t, 2000, p.Allowance)
	_, ok = plans.ForPrice("stripe", []string{"customer_team_plan"})
	require.False(t, ok, "a Kinde code must not match a Stripe price")
}

func TestParsePlansRejects(t *testing.T) {
	tests := map[string]struct{ yaml, want string }{
		"ErrUnknownKey":     {"default: free\nplans:\n  - name: free\n    allowence: 10\n", "allowence"},
		"ErrNoDefault":      {"plans:\n  - name: free\n", "no default"},
		"ErrUndefinedDef":   {"default: gold\nplans:\n  - name: free\n", `"gold" is not defined`},
		"ErrDuplicatePlan":  {"default: free\nplans:\n  - name: free\n  - name: free\n", "defined twice"},
		"ErrDuplicatePrice": {"default: a\nplans:\n  - {name: a, stripe_prices: [p]}\n  - {name: b, stripe_prices: [p]}\n", "already maps"},
		"ErrNegative":       {"default: a\nplans:\n  - {name: a, allowance: -1}\n", "negative"},
		"ErrEmpty":          {"", "plans"},
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
	f.Fuzz(func(t *testing.T, data []byte) {
		plans, err := reconcile.ParsePlans(data)
		if err != nil {
			return
		}
		def := plans.Default()
		require.NotEmpty(t, def.Name)
		require.GreaterOrEqual(t, def.Allowance, int64(0))
	})
}
