package stripe_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	stripemock "github.com/billsync/billsync/mocks/stripe"
)

// TestEmail: Fetch and List both carry the customer's email, which support
// staff search accounts by.
func TestEmail(t *testing.T) {
	t.Parallel()
	f := newFake(t, stripemock.Options{}, nil)
	cus := f.customer(t, map[string]string{"user_id": "u_ada"})
	f.subscribe(t, cus, "price_pro")
	c := newTestClient(t, testConfig(f.URL))

	snap, err := c.Fetch(context.Background(), cus)
	require.NoError(t, err)
	require.Equal(t, "ada@example.com", snap.Email)

	listed, _, _, err := c.ListPage(context.Background(), "")
	require.NoError(t, err)
	require.Len(t, listed, 1)
	require.Equal(t, "ada@example.com", listed[0].Email)
}
