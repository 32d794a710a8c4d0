package testenv_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/providers/stripe"
	"github.com/billsync/billsync/reconcile"
)

// TestConnectedHelpers: the harness's Connect helpers make a connected
// account with the Env's prices, a customer with a chosen id in it (keyed
// as billsync keys it), and subscribe and move it there, as billsync's
// client then reads on the account's behalf.
func TestConnectedHelpers(t *testing.T) {
	t.Parallel()
	h := testenv.ForTest(t, testenv.Stripe, testenv.Options{})
	h.ConnectedAccount("acct_env")
	key := h.ConnectedCustomer("acct_env", "cus_env", "u_env")
	require.Equal(t, "acct_env/cus_env", key)
	sub := h.ConnectedSubscribe("acct_env", "cus_env", "price_free")
	h.ConnectedChangePrice("acct_env", sub, "price_pro")

	client := h.NewStripeClient(stripe.Config{Connect: reconcile.ConnectPolicy{Mode: reconcile.ConnectAll}})
	snap, err := client.Fetch(context.Background(), key)
	require.NoError(t, err)
	require.Equal(t, key, snap.CustomerID)
	require.Equal(t, "u_env", snap.UserRef)
	require.Len(t, snap.Subscriptions, 1)
	require.Contains(t, snap.Subscriptions[0].Items[0].PriceRefs, "price_pro")
	_, err = client.Fetch(context.Background(), "cus_env")
	require.ErrorIs(t, err, reconcile.ErrCustomerUnknown, "not the platform's")
}
