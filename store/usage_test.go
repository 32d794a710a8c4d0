package store_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store"
	"github.com/billsync/billsync/store/storetest"
)

// grantedAccount makes customer's account through Apply (a live
// subscription on price naming userRef) and returns its id.
func grantedAccount(t *testing.T, st *store.Store, customer, userRef, price string) int64 {
	t.Helper()
	ctx := context.Background()
	receive(t, st, "evt_"+customer, customer)
	job := claimOne(t, st)
	snap := liveSnap(customer, price)
	snap.UserRef = userRef
	out, err := applySnap(ctx, st, job, dbNow(t, st), snap, testenv.Plans())
	require.NoError(t, err)
	require.Equal(t, reconcile.ResultApplied, out.Result, out.Text)
	a, err := st.Account(ctx, "stripe", customer)
	require.NoError(t, err)
	return a.ID
}

func TestDebit(t *testing.T) {
	ctx := context.Background()
	st := storetest.NewStore(t)
	id := grantedAccount(t, st, "cus_1", "u1", "price_free") // 10

	u, err := st.UserAccount(ctx, "u1", "", "")
	require.NoError(t, err)
	require.Equal(t, id, u.Account.ID)
	require.Equal(t, "free", u.Account.Plan)
	require.Equal(t, int64(10), u.Balance)

	res, err := st.Debit(ctx, reconcile.Debit{UserRef: "u1", Key: "a", Amount: 4}, reconcile.DecideDebit)
	require.NoError(t, err)
	require.False(t, res.Replayed)
	require.Equal(t, int64(6), res.Balance)
	require.Equal(t, periodStart, res.Entry.PeriodStart.UTC())

	_, err = st.Debit(ctx, reconcile.Debit{UserRef: "u1", Key: "b", Amount: 3}, reconcile.DecideDebit)
	require.NoError(t, err)
	again, err := st.Debit(ctx, reconcile.Debit{UserRef: "u1", Key: "a", Amount: 4}, reconcile.DecideDebit)
	require.NoError(t, err)
	require.True(t, again.Replayed)
	again.Replayed = false
	require.Equal(t, res, again, "a repeat answers the first result, not today's balance")

	_, err = st.Debit(ctx, reconcile.Debit{UserRef: "u1", Key: "a", Amount: 5}, reconcile.DecideDebit)
	require.ErrorIs(t, err, reconcile.ErrKeyReused)

	_, err = st.Debit(ctx, reconcile.Debit{UserRef: "u1", Key: "c", Amount: 4}, reconcile.DecideDebit)
	var short *reconcile.InsufficientError
	require.ErrorAs(t, err, &short)
	require.Equal(t, reconcile.InsufficientError{AccountID: id, Balance: 3, Amount: 4}, *short)

	_, err = st.Debit(ctx, reconcile.Debit{UserRef: "nobody", Key: "c", Amount: 1}, reconcile.DecideDebit)
	require.ErrorIs(t, err, reconcile.ErrNotFound)
	_, err = st.Debit(ctx, reconcile.Debit{UserRef: "u1", Key: "", Amount: 1}, reconcile.DecideDebit)
	require.ErrorIs(t, err, reconcile.ErrInvalid)

	var rows int
	var b int64
	require.NoError(t, st.Pool().QueryRow(ctx, `SELECT count(*), sum(delta) FROM ledger WHERE account_id = $1`, id).Scan(&rows, &b))
	require.Equal(t, 3, rows) // the grant and two debits
	require.Equal(t, int64(3), b)
}

// TestDebitNeverGranted: an account with no period (never reconciled to a
// plan) has nothing to spend, and the refusal writes nothing.
func TestDebitNeverGranted(t *testing.T) {
	ctx := context.Background()
	st := storetest.NewStore(t)
	_, err := st.Pool().Exec(ctx, `INSERT INTO accounts (provider, customer_id, user_ref) VALUES ('stripe', 'cus_1', 'u1')`)
	require.NoError(t, err)
	before := storetest.Tables(t, st)
	_, err = st.Debit(ctx, reconcile.Debit{UserRef: "u1", Key: "a", Amount: 1}, reconcile.DecideDebit)
	require.ErrorIs(t, err, reconcile.ErrInsufficient)
	require.Equal(t, before, storetest.Tables(t, st))
}

// TestDebitSameKeyConcurrently: requests with one key at once debit once,
// and every one answers the same result. A transaction holding the
// account's row lock (as a reconcile does) stops them all at the same
// point; released together, they race for the key.
func TestDebitSameKeyConcurrently(t *testing.T) {
	ctx := context.Background()
	st := storetest.NewStore(t)
	id := grantedAccount(t, st, "cus_1", "u1", "price_pro")
	hold, err := st.Pool().Begin(ctx)
	require.NoError(t, err)
	defer hold.Rollback(ctx) //nolint:errcheck // committed below
	_, err = hold.Exec(ctx, `SELECT 1 FROM accounts WHERE id = $1 FOR UPDATE`, id)
	require.NoError(t, err)

	const n = 20
	results := make([]reconcile.DebitResult, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			results[i], errs[i] = st.Debit(ctx, reconcile.Debit{UserRef: "u1", Key: "once", Amount: 7}, reconcile.DecideDebit)
		})
	}
	// Every connection the pool has left is a debit waiting for the lock.
	waiting := int(st.Pool().Config().MaxConns) - 1
	storetest.WaitFor(t, "the debits wait for the account's row lock", func() bool {
		var w int
		require.NoError(t, hold.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE NOT granted AND locktype IN ('tuple', 'transactionid')`).Scan(&w))
		return w >= min(waiting, n)
	})
	require.NoError(t, hold.Commit(ctx))
	wg.Wait()

	replayed := 0
	for i := range n {
		require.NoError(t, errs[i])
		if results[i].Replayed {
			replayed++
		}
		results[i].Replayed = false
		require.Equal(t, results[0], results[i])
	}
	require.Equal(t, n-1, replayed)
	require.Equal(t, int64(493), results[0].Balance)
	b, err := st.Balance(ctx, id)
	require.NoError(t, err)
	require.Equal(t, int64(493), b)
}

// TestUserAccountOfTwoProviders: a user reference two accounts share is
// ambiguous unless the provider is named.
func TestUserAccountOfTwoProviders(t *testing.T) {
	ctx := context.Background()
	st := storetest.NewStore(t)
	a := grantedAccount(t, st, "cus_1", "u1", "price_pro")
	_, err := st.Pool().Exec(ctx, `INSERT INTO accounts (provider, customer_id, user_ref) VALUES ('kinde', 'k_1', 'u1')`)
	require.NoError(t, err)
	_, err = st.UserAccount(ctx, "u1", "", "")
	var amb *reconcile.AmbiguousError
	require.ErrorAs(t, err, &amb)
	require.Len(t, amb.Accounts, 2)
	_, err = st.Debit(ctx, reconcile.Debit{UserRef: "u1", Key: "k", Amount: 1}, reconcile.DecideDebit)
	require.True(t, errors.Is(err, reconcile.ErrAmbiguous), "%v", err)
	u, err := st.UserAccount(ctx, "u1", "stripe", "")
	require.NoError(t, err)
	require.Equal(t, a, u.Account.ID)
}

// TestDebitWritesWhatDecideSays: the store holds no debit rule of its own:
// it hands decide the state read under the row lock, writes the entry
// decide returns, and writes nothing when decide refuses.
func TestDebitWritesWhatDecideSays(t *testing.T) {
	ctx := context.Background()
	st := storetest.NewStore(t)
	id := grantedAccount(t, st, "cus_1", "u1", "price_free") // 10
	var seen reconcile.DebitState
	overdraw := func(d reconcile.Debit, cur reconcile.DebitState) (reconcile.DebitResult, error) {
		seen = cur
		res, err := reconcile.DecideDebit(d, reconcile.DebitState{Account: cur.Account, Prior: cur.Prior, Balance: 1 << 20})
		res.Balance = cur.Balance - d.Amount
		return res, err
	}
	res, err := st.Debit(ctx, reconcile.Debit{UserRef: "u1", Key: "big", Amount: 25}, overdraw)
	require.NoError(t, err)
	require.Equal(t, id, seen.Account.ID)
	require.Equal(t, int64(10), seen.Balance)
	require.Nil(t, seen.Prior)
	require.Equal(t, int64(-15), res.Balance)
	b, err := st.Balance(ctx, id)
	require.NoError(t, err)
	require.Equal(t, int64(-15), b, "the store wrote what decide said, short balance or not")

	// A repeat hands decide the first request's entry and balance.
	_, err = st.Debit(ctx, reconcile.Debit{UserRef: "u1", Key: "big", Amount: 25}, overdraw)
	require.NoError(t, err)
	require.NotNil(t, seen.Prior)
	require.Equal(t, int64(-25), seen.Prior.Delta)
	require.Equal(t, int64(-15), seen.PriorBalance)

	errNo := errors.New("no")
	before := storetest.Tables(t, st)
	_, err = st.Debit(ctx, reconcile.Debit{UserRef: "u1", Key: "other", Amount: 1},
		func(reconcile.Debit, reconcile.DebitState) (reconcile.DebitResult, error) {
			return reconcile.DebitResult{}, errNo
		})
	require.ErrorIs(t, err, errNo)
	require.Equal(t, before, storetest.Tables(t, st), "a refusal writes nothing")
}

// TestUserAccountOfConnectedAccounts: one user reference held by the
// platform's customer and by two connected accounts' customers (with the
// same customer id) is ambiguous until ?account= names one; each debit
// spends its own account's allowance.
func TestUserAccountOfConnectedAccounts(t *testing.T) {
	ctx := context.Background()
	st := storetest.NewStore(t)
	platform := grantedAccount(t, st, "cus_1", "u1", "price_pro")
	// A connected account's prices map by the lookup keys every account
	// shares (the fixture's stripe_accounts rules).
	a := grantedAccount(t, st, reconcile.Connected("acct_a", "cus_1"), "u1", "pro")
	b := grantedAccount(t, st, reconcile.Connected("acct_b", "cus_1"), "u1", "free")
	_, err := st.UserAccount(ctx, "u1", "", "")
	var amb *reconcile.AmbiguousError
	require.ErrorAs(t, err, &amb)
	require.Len(t, amb.Accounts, 3)
	for account, want := range map[string]int64{"acct_a": a, "acct_b": b, reconcile.PlatformAccount: platform} {
		u, err := st.UserAccount(ctx, "u1", "stripe", account)
		require.NoError(t, err, account)
		require.Equal(t, want, u.Account.ID, account)
	}
	_, err = st.UserAccount(ctx, "u1", "", "acct_c")
	require.ErrorIs(t, err, reconcile.ErrNotFound)

	res, err := st.Debit(ctx, reconcile.Debit{UserRef: "u1", Account: "acct_b", Key: "k", Amount: 1}, reconcile.DecideDebit)
	require.NoError(t, err)
	require.Equal(t, b, res.AccountID)
	_, err = st.Debit(ctx, reconcile.Debit{UserRef: "u1", Account: "cus_1", Key: "k", Amount: 1}, reconcile.DecideDebit)
	require.ErrorIs(t, err, reconcile.ErrInvalid)
}
