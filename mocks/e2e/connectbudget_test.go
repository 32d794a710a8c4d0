package e2e_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/providers/stripe"
	"github.com/billsync/billsync/reconcile"
)

// TestConnectReadsHaveTheirOwnBudget: Stripe allocates a platform's reads
// on behalf of its connected accounts apart from its own, 500 a
// transaction of the connected accounts'. With a payment of the platform's
// own customer and 22 of a connected account's, delivered to the intake
// and reconciled by the worker, the budget recorded in the database holds
// the reads sent with Stripe-Account in the Connect budget (exactly the
// reads the fake answered on the account's behalf), the platform's own
// apart (what the fake answered the platform), and each allocation
// follows its own transactions: 22 × 500 for the connected accounts, the
// 10,000 floor for the platform's one.
func TestConnectReadsHaveTheirOwnBudget(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, testenv.Stripe, testenv.Options{Stripe: testenv.StripeOptions{
		Connect: reconcile.ConnectPolicy{Mode: reconcile.ConnectAll}}})
	const account, paid = "acct_budget", 22
	own := h.Customer("u_own")
	h.Subscribe(own, "price_pro")
	h.ConnectedAccount(account)
	for i := range paid {
		id := fmt.Sprintf("cus_%d", i)
		h.ConnectedCustomer(account, id, "u_"+id)
		h.ConnectedSubscribe(account, id, "price_pro")
	}
	h.Delivered()
	h.Stripe.Fake.ResetUsage()

	client, ok := h.Client.(*stripe.Client)
	require.True(t, ok, "billsync's Stripe client")
	spending, err := reconcile.NewSpending(reconcile.SpendingConfig{Store: h.Store, Client: client, Worker: true})
	require.NoError(t, err)
	w := h.Worker(reconcile.WorkerConfig{Name: "w", Concurrency: 4, Backoff: []time.Duration{time.Millisecond}})
	h.Drain(w)
	require.Equal(t, "pro", h.state(reconcile.Connected(account, "cus_0")).Plan)

	v, err := spending.Report(ctx)
	require.NoError(t, err)
	onBehalf, platform := h.Stripe.Fake.Account(account).Usage().Reads, h.Stripe.Fake.Account("").Usage().Reads
	require.Positive(t, onBehalf)
	require.Equal(t, onBehalf, v.Connect.Total, "every read on the account's behalf, in the Connect budget: %v", v.Connect.Reads)
	require.Equal(t, platform, v.Total, "the platform's own reads alone in its budget: %v", v.Reads)
	require.EqualValues(t, paid, v.Connect.Transactions)
	require.EqualValues(t, 1, v.Transactions)
	require.Equal(t, float64(paid*stripe.ReadsPerTransaction), v.Connect.Allocation, "500 × the connected accounts' transactions")
	require.Equal(t, float64(stripe.MinReadAllocation), v.Allocation, "the platform's one transaction: the floor")
	require.Equal(t, v.Connect.Allocation, spending.ConnectAllocation())
	t.Logf("Connect budget: %d reads %v, %d transactions, allocation %.0f; platform's: %d reads %v, %d transactions, allocation %.0f",
		v.Connect.Total, v.Connect.Reads, v.Connect.Transactions, v.Connect.Allocation, v.Total, v.Reads, v.Transactions, v.Allocation)
}
