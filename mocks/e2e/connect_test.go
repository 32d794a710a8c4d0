package e2e_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	stripeapi "github.com/stripe/stripe-go/v82"

	stripemock "github.com/billsync/billsync/mocks/stripe"
	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store/scratch"
	"github.com/billsync/billsync/store/storetest"
)

// TestConnectSeedScenarioOnTwoAccounts: the seed scenario (a customer
// moves from Free to Pro: copies of every webhook, reordered so the Free
// subscription's cancellation may come last, and the process crashing
// between the plan write and the ledger write) played on two connected
// accounts at once, each holding a customer with the same id and user
// reference. Each ends right (Pro, one Pro grant, every event applied),
// keyed under its own account, and neither touches the other: every
// read of a connected customer carried its own account's Stripe-Account
// (the platform's own customer endpoints were never read).
func TestConnectSeedScenarioOnTwoAccounts(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, testenv.Stripe, testenv.Options{Stripe: testenv.StripeOptions{
		Connect: reconcile.ConnectPolicy{Mode: reconcile.ConnectAll}}})
	accounts := []string{"acct_seed_a", "acct_seed_b"}
	keys := make([]string, len(accounts))
	free := make([]*stripeapi.Subscription, len(accounts))
	for i, a := range accounts {
		h.ConnectedAccount(a)
		keys[i] = h.ConnectedCustomer(a, "cus_same", "u_same")
		free[i] = h.ConnectedSubscribe(a, "cus_same", "price_free")
	}
	h.Delivered()
	w := h.Worker(reconcile.WorkerConfig{Name: "w", Concurrency: 4, Backoff: []time.Duration{time.Millisecond}})
	h.Drain(w)
	for _, key := range keys {
		require.Equal(t, "free", h.state(key).Plan)
	}

	// The scenario: copies, reordering, and a crash in the first apply.
	h.SetFaults(stripemock.Faults{DuplicateCopies: 2, ReorderDelay: 100 * time.Millisecond})
	var crashed atomic.Bool
	scratch.CrashAfterAccountWrite(h.Store, func() error {
		if crashed.CompareAndSwap(false, true) {
			return errors.New("killed between the plan write and the ledger write")
		}
		return nil
	})
	t.Cleanup(func() { scratch.CrashAfterAccountWrite(h.Store, nil) })
	h.Stripe.Fake.ResetUsage()
	var wg sync.WaitGroup
	errs := make([]error, len(accounts))
	for i, a := range accounts {
		wg.Go(func() {
			if errs[i] = h.Stripe.ConnectedCancel(ctx, a, free[i]); errs[i] == nil {
				_, errs[i] = h.Stripe.ConnectedSubscribe(ctx, a, "cus_same", "price_pro")
			}
		})
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	h.Delivered()
	storetest.WaitFor(t, "both accounts' customers reconciled", func() bool {
		h.Drain(w)
		depth, err := h.Store.QueueDepth(ctx)
		require.NoError(t, err)
		return depth.Pending == 0
	})
	require.True(t, crashed.Load(), "the crash was injected")

	rows := storetest.Accounts(t, h.Store)
	require.Len(t, rows, 2, "one account per (connected account, customer)")
	for i, key := range keys {
		s := h.state(key)
		require.Equal(t, "pro", s.Plan, key)
		require.Equal(t, int64(500), s.Balance, "%s: one Pro grant, never two", key)
		require.Equal(t, h.largestGrant(key), s.Balance, key)
		require.Len(t, s.Events, 1, "%s: every event applied: %v", key, s.Events)
		require.Positive(t, s.Events["applied"], key)
		require.Positive(t, h.Stripe.Fake.Account(accounts[i]).Usage().Reads, "%s read on its own account's behalf", accounts[i])
	}
	platform := h.Stripe.Fake.Account("").Usage()
	for op, u := range platform.Operations {
		require.NotContains(t, op, "/v1/customers", "a connected customer read without its Stripe-Account: %v", u)
	}
}
