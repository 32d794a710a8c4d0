package stripe

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestProductCache: a product's plan is kept for the TTL (one without a
// plan for the shorter miss TTL), then read again; the cache never holds
// more than its size, dropping expired entries first.
func TestProductCache(t *testing.T) {
	now := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	pc := newProductCache(func() time.Time { return now }, 24*time.Hour, time.Hour, 3)

	pc.put("acct_A/prod_1", "pro")
	pc.put("prod_1", "")
	plan, ok := pc.get("acct_A/prod_1")
	require.True(t, ok)
	require.Equal(t, "pro", plan)
	plan, ok = pc.get("prod_1")
	require.True(t, ok, "a product with no plan is kept too")
	require.Empty(t, plan)
	_, ok = pc.get("acct_B/prod_1")
	require.False(t, ok, "another account's product of the same id is not this one")

	now = now.Add(time.Hour)
	_, ok = pc.get("prod_1")
	require.False(t, ok, "a product with no plan is read again after the miss TTL")
	_, ok = pc.get("acct_A/prod_1")
	require.True(t, ok, "a product's plan is kept longer")
	now = now.Add(23 * time.Hour)
	_, ok = pc.get("acct_A/prod_1")
	require.False(t, ok, "read again once the TTL has passed")

	pc.put("acct_A/prod_2", "team") // the first two have expired
	pc.put("acct_A/prod_3", "team") // full: both expired ones go
	require.Equal(t, 2, pc.len())
	pc.put("acct_A/prod_4", "team")
	_, ok = pc.get("acct_A/prod_2")
	require.True(t, ok, "an entry within its TTL stays while expired ones can go")
	for i := range 10 {
		pc.put(fmt.Sprintf("acct_A/prod_x%d", i), "pro")
		require.LessOrEqual(t, pc.len(), 3)
	}
	_, ok = pc.get("acct_A/prod_x9")
	require.True(t, ok, "the newest is kept")
}
