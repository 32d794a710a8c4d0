package store_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store"
	"github.com/billsync/billsync/store/scratch"
	"github.com/billsync/billsync/store/storetest"
)

// allChanges reads the whole feed, once every write so far is shown (the
// feed holds a change back while an older transaction of the cluster is
// open, and parallel tests share the cluster).
func allChanges(t *testing.T, st *store.Store, want int) []reconcile.ChangeFeedEntry {
	t.Helper()
	var got []reconcile.ChangeFeedEntry
	storetest.WaitFor(t, fmt.Sprintf("%d changes in the feed", want), func() bool {
		var err error
		got, err = st.Changes(context.Background(), reconcile.ChangeCursor{}, 1000)
		require.NoError(t, err)
		return len(got) >= want
	})
	require.Len(t, got, want)
	return got
}

// TestChangesOfAnAccount: a new account, a no-change reconcile, an
// upgrade, a debit and a replayed debit write exactly the changes the app
// must hear of, numbered 1, 2, 3 with what changed and why.
func TestChangesOfAnAccount(t *testing.T) {
	ctx := context.Background()
	st := storetest.NewStore(t)
	plans := testenv.Plans()
	id := grantedAccount(t, st, "cus_1", "u1", "price_free")

	first := allChanges(t, st, 1)[0]
	require.True(t, first.Created)
	require.Nil(t, first.Before)
	require.Equal(t, reconcile.AccountChangeType, first.Type)
	require.Equal(t, int64(1), first.Seq)
	require.Equal(t, id, first.AccountID)
	require.Equal(t, "u1", first.UserRef)
	require.Equal(t, "free", first.After.Plan)
	require.Equal(t, int64(10), first.After.Balance)
	require.Equal(t, reconcile.LedgerMove{Kind: "grant", Key: fmt.Sprintf("grant:%d:2026-11-03T00:00:00Z:free:10", id),
		Delta: 10, Plan: "free", PeriodStart: periodStart}, *first.Ledger)
	require.Equal(t, reconcile.Why{Trigger: "webhook", Actor: "worker", EventIDs: []string{"evt_cus_1"}, Events: 1}, first.Why)

	// The same state again: the account's observed_at moves, nothing else.
	receive(t, st, "evt_again", "cus_1")
	same := liveSnap("cus_1", "price_free")
	same.UserRef = "u1"
	out, err := applySnap(ctx, st, claimOne(t, st), dbNow(t, st), same, plans)
	require.NoError(t, err)
	require.Equal(t, reconcile.ResultUnchanged, out.Result)
	require.Len(t, allChanges(t, st, 1), 1, "a reconcile that changes nothing writes no change")

	receive(t, st, "evt_up", "cus_1")
	up := liveSnap("cus_1", "price_pro")
	up.UserRef = "u1"
	_, err = applySnap(ctx, st, claimOne(t, st), dbNow(t, st), up, plans)
	require.NoError(t, err)
	_, err = st.Debit(ctx, reconcile.Debit{UserRef: "u1", Key: "k1", Amount: 4}, reconcile.DecideDebit)
	require.NoError(t, err)
	_, err = st.Debit(ctx, reconcile.Debit{UserRef: "u1", Key: "k1", Amount: 4}, reconcile.DecideDebit)
	require.NoError(t, err) // a replay: no change
	_, err = st.Debit(ctx, reconcile.Debit{UserRef: "u1", Key: "k2", Amount: 4000}, reconcile.DecideDebit)
	require.ErrorIs(t, err, reconcile.ErrInsufficient) // refused: no change

	all := allChanges(t, st, 3)
	upgrade, debit := all[1], all[2]
	require.Equal(t, int64(2), upgrade.Seq)
	require.Equal(t, []string{"plan", "balance"}, upgrade.Changed)
	require.Equal(t, "free", upgrade.Before.Plan)
	require.Equal(t, int64(10), upgrade.Before.Balance)
	require.Equal(t, "pro", upgrade.After.Plan)
	require.Equal(t, int64(500), upgrade.After.Balance)
	require.Equal(t, int64(490), upgrade.Ledger.Delta)
	require.Equal(t, []string{"evt_up"}, upgrade.Why.EventIDs)

	require.Equal(t, int64(3), debit.Seq)
	require.Equal(t, []string{"balance"}, debit.Changed)
	require.Equal(t, int64(500), debit.Before.Balance)
	require.Equal(t, int64(496), debit.After.Balance)
	require.Equal(t, reconcile.LedgerMove{Kind: "usage", Key: fmt.Sprintf("usage:%d:k1", id), Delta: -4, Plan: "pro",
		PeriodStart: periodStart}, *debit.Ledger)
	require.Equal(t, reconcile.Why{Trigger: "usage", Actor: "app", EventIDs: []string{}}, debit.Why)

	mine, err := st.AccountChanges(ctx, id, 10)
	require.NoError(t, err)
	require.Len(t, mine, 3)
	require.Equal(t, int64(3), mine[0].Seq, "newest first")
	require.Equal(t, debit.Body, mine[0].Body, "the same bytes on every read")
}

var errCrash = errors.New("crash")

// TestChangeCommitsWithTheAccount: a crash between the account write and
// the change row, or right after the change row, leaves neither: the
// account, its grant and its change are one transaction.
func TestChangeCommitsWithTheAccount(t *testing.T) {
	ctx := context.Background()
	for name, crash := range map[string]func(st *store.Store, fn func() error){
		"AfterAccountWrite": scratch.CrashAfterAccountWrite,
		"AfterChangeWrite":  func(st *store.Store, fn func() error) { st.SetAfterChangeWrite(fn) },
	} {
		t.Run(name, func(t *testing.T) {
			st, job := claimedJob(t)
			crash(st, func() error { return errCrash })
			_, err := applySnap(ctx, st, job, dbNow(t, st), liveSnap("cus_1", "price_pro"), testenv.Plans())
			require.ErrorIs(t, err, errCrash)
			_, err = st.Account(ctx, "stripe", "cus_1")
			require.ErrorIs(t, err, reconcile.ErrNotFound, "no account without its change")
			require.Zero(t, storetest.Counts(t, st)["account_changes"], "no change without its account")

			crash(st, nil)
			_, err = applySnap(ctx, st, job, dbNow(t, st), liveSnap("cus_1", "price_pro"), testenv.Plans())
			require.NoError(t, err)
			require.Equal(t, "pro", storetest.Customer(t, st, "stripe", "cus_1").Plan)
			require.Len(t, allChanges(t, st, 1), 1)
		})
	}
}

// readAll pages the feed from cursor to its current end.
func readAll(t *testing.T, st *store.Store, cur reconcile.ChangeCursor) ([]reconcile.ChangeFeedEntry, reconcile.ChangeCursor) {
	t.Helper()
	var out []reconcile.ChangeFeedEntry
	for {
		page, err := st.Changes(context.Background(), cur, 3)
		require.NoError(t, err)
		if len(page) == 0 {
			return out, cur
		}
		out = append(out, page...)
		cur = page[len(page)-1].Cursor
	}
}

// TestFeedNeverSkipsALateCommit holds one change's transaction open (its
// id is the lower) across another's commit: the feed shows neither until
// the first ends, so a reader that follows the feed gets both, in commit
// order of their transactions, each once. With ids as the cursor (the
// classic trap) the reader would have moved past the open one for good.
func TestFeedNeverSkipsALateCommit(t *testing.T) {
	ctx := context.Background()
	st := storetest.NewStore(t)
	idA := grantedAccount(t, st, "cus_a", "ua", "price_pro")
	idB := grantedAccount(t, st, "cus_b", "ub", "price_pro")
	start, cur := readAll(t, st, reconcile.ChangeCursor{})
	for len(start) < 2 { // both grants visible before the race starts
		var more []reconcile.ChangeFeedEntry
		more, cur = readAll(t, st, cur)
		start = append(start, more...)
	}

	held, release := holdFirstChangeWrite(st)
	errA := make(chan error, 1)
	go func() {
		_, err := st.Debit(ctx, reconcile.Debit{UserRef: "ua", Key: "a", Amount: 1}, reconcile.DecideDebit)
		errA <- err
	}()
	<-held // A wrote its change row (the lower id) and is still open
	_, err := st.Debit(ctx, reconcile.Debit{UserRef: "ub", Key: "b", Amount: 2}, reconcile.DecideDebit)
	require.NoError(t, err) // B committed first
	got, cur := readAll(t, st, cur)
	require.Empty(t, got, "B's change is held back while A, older, is in flight")

	close(release)
	require.NoError(t, <-errA)
	var seen []reconcile.ChangeFeedEntry
	storetest.WaitFor(t, "both changes in the feed", func() bool {
		var more []reconcile.ChangeFeedEntry
		more, cur = readAll(t, st, cur)
		seen = append(seen, more...)
		return len(seen) >= 2
	})
	require.Len(t, seen, 2)
	require.Equal(t, idA, seen[0].AccountID)
	require.Equal(t, idB, seen[1].AccountID)
	require.Less(t, seen[0].ID, seen[1].ID, "A took the lower id and committed last")
}

// lockWaiters counts the sessions of st's database waiting for a lock.
func lockWaiters(t *testing.T, st *store.Store) int {
	return count(t, st, `SELECT count(*) FROM pg_stat_activity
		WHERE wait_event_type = 'Lock' AND datname = current_database()`)
}

// TestFeedKeepsAnAccountsOrderWhateverTheTransactionIDs: a reconcile's
// transaction takes its id at its first write (the lock on its queue row)
// and then waits for the account behind a debit that queued earlier and
// takes its id only when it gets the lock: the reconcile's change has the
// account's next seq but the older transaction id. The feed still gives
// the account's changes in seq order. Ordered by the writing transaction's
// id alone, it gave seq 3 before seq 2.
func TestFeedKeepsAnAccountsOrderWhateverTheTransactionIDs(t *testing.T) {
	ctx := context.Background()
	st := storetest.NewStore(t)
	id := grantedAccount(t, st, "cus_1", "u1", "price_free")
	holder, err := st.Pool().Begin(ctx)
	require.NoError(t, err)
	defer holder.Rollback(ctx) //nolint:errcheck // rolled back below; this is for a failure before
	_, err = holder.Exec(ctx, `SELECT 1 FROM accounts WHERE id = $1 FOR UPDATE`, id)
	require.NoError(t, err)

	debited := make(chan error, 1)
	go func() {
		_, err := st.Debit(ctx, reconcile.Debit{UserRef: "u1", Key: "d", Amount: 1}, reconcile.DecideDebit)
		debited <- err
	}()
	storetest.WaitFor(t, "the debit waits for the account", func() bool { return lockWaiters(t, st) == 1 })

	receive(t, st, "evt_2", "cus_1")
	job := claimOne(t, st)
	applied := make(chan error, 1)
	go func() {
		snap := liveSnap("cus_1", "price_pro")
		snap.UserRef = "u1"
		_, err := applySnap(ctx, st, job, dbNow(t, st), snap, testenv.Plans())
		applied <- err
	}()
	storetest.WaitFor(t, "the reconcile waits behind the debit", func() bool { return lockWaiters(t, st) == 2 })
	require.NoError(t, holder.Rollback(ctx))
	require.NoError(t, <-debited)
	require.NoError(t, <-applied)

	got := allChanges(t, st, 3)
	for i, c := range got {
		require.Equal(t, int64(i+1), c.Seq, "change %d of the feed", i)
	}
	require.Equal(t, reconcile.TriggerUsage, got[1].Why.Trigger, "the debit had the lock first")
}

// TestFeedUnderConcurrentWriters: writers on many accounts commit in
// whatever order the scheduler makes (a random pause inside each change's
// transaction shuffles it) while a reader follows the feed all along: it
// sees every committed change exactly once, and each account's in seq
// order.
func TestFeedUnderConcurrentWriters(t *testing.T) {
	ctx := context.Background()
	st := storetest.NewStore(t)
	const accounts, debits = 6, 15
	for i := range accounts {
		grantedAccount(t, st, fmt.Sprintf("cus_%d", i), fmt.Sprintf("u%d", i), "price_pro")
	}
	st.SetAfterChangeWrite(func() error {
		time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond) // a shuffle, not a wait
		return nil
	})
	var wg sync.WaitGroup
	for i := range accounts {
		for w := range 2 {
			wg.Go(func() {
				for k := range debits {
					_, err := st.Debit(ctx, reconcile.Debit{UserRef: fmt.Sprintf("u%d", i),
						Key: fmt.Sprintf("w%d-%d", w, k), Amount: 1}, reconcile.DecideDebit)
					if err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()

	seen := map[int64]int{}
	lastSeq := map[int64]int64{}
	var cur reconcile.ChangeCursor
	read := func() {
		page, _ := readAll(t, st, cur)
		for _, c := range page {
			seen[c.ID]++
			require.Greater(t, c.Seq, lastSeq[c.AccountID], "an account's changes in seq order")
			lastSeq[c.AccountID] = c.Seq
			cur = c.Cursor
		}
	}
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
		}
		read()
	}
	total := accounts * (1 + 2*debits)
	storetest.WaitFor(t, "every change read", func() bool { read(); return len(seen) >= total })
	require.Len(t, seen, total)
	for id, n := range seen {
		require.Equal(t, 1, n, "change %d read %d times", id, n)
	}
	require.Len(t, allChanges(t, st, total), total, "none read that was not written")
}

// TestDeliveriesInOrderPerAccount: each change is queued for each app
// endpoint with the change; an account's next change is not claimable
// while its earlier one is pending (leased or waiting to retry), other
// accounts' are; a delivered or dead one lets the next go.
func TestDeliveriesInOrderPerAccount(t *testing.T) {
	ctx := context.Background()
	st := storetest.OpenStoreWithEndpoints(t, storetest.URL(t), store.Options{}, "http://app/hook")
	grantedAccount(t, st, "cus_a", "ua", "price_pro")
	grantedAccount(t, st, "cus_b", "ub", "price_pro")
	for _, k := range []string{"1", "2"} {
		_, err := st.Debit(ctx, reconcile.Debit{UserRef: "ua", Key: k, Amount: 1}, reconcile.DecideDebit)
		require.NoError(t, err)
	}
	eps := []string{"http://app/hook"}
	storetest.FanOut(t, st, eps...)
	first, err := st.ClaimDeliveries(ctx, "r1", eps, 10, 10, time.Minute)
	require.NoError(t, err)
	require.Len(t, first, 2, "one per account: a's seq 1 and b's seq 1")
	for _, d := range first {
		require.Equal(t, int64(1), d.Seq)
	}
	other, err := st.ClaimDeliveries(ctx, "r2", eps, 10, 10, time.Minute)
	require.NoError(t, err)
	require.Empty(t, other, "leased ones are not claimed again; later ones wait")
	none, err := st.ClaimDeliveries(ctx, "r3", []string{"http://elsewhere"}, 10, 10, time.Minute)
	require.NoError(t, err)
	require.Empty(t, none)

	a := first[0]
	require.NoError(t, st.RecordDelivery(ctx, "r1", a, reconcile.AppDeliveryAttempt{StatusCode: 500, Error: "500"}, reconcile.DeliveryPending, time.Hour))
	require.ErrorIs(t, st.RecordDelivery(ctx, "r2", a, reconcile.AppDeliveryAttempt{StatusCode: 200}, reconcile.DeliveryDelivered, 0),
		reconcile.ErrHeld, "only the lease holder moves it")
	again, err := st.ClaimDeliveries(ctx, "r2", eps, 10, 10, time.Minute)
	require.NoError(t, err)
	require.Empty(t, again, "a retry waiting for its time holds its account's next")

	require.NoError(t, st.RecordDelivery(ctx, "r1", first[1], reconcile.AppDeliveryAttempt{StatusCode: 204}, reconcile.DeliveryDelivered, 0))
	stats, err := st.AppDeliveryStats(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(1), stats.Delivered)
	require.Equal(t, int64(3), stats.Pending)
	require.False(t, stats.OldestUndelivered.IsZero())

	attempts, err := st.DeliveryAttempts(ctx, a.ChangeID)
	require.NoError(t, err)
	require.Len(t, attempts[a.Endpoint], 2, "both attempts recorded, the refused one too")
	require.Equal(t, 500, attempts[a.Endpoint][0].StatusCode)
}

// holdFirstChangeWrite makes the store's first change write from now wait
// in its transaction, after its change row is written, until release is
// closed; held is closed once it waits.
func holdFirstChangeWrite(st *store.Store) (held, release chan struct{}) {
	held, release = make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	st.SetAfterChangeWrite(func() error {
		if first.CompareAndSwap(false, true) {
			close(held)
			<-release
		}
		return nil
	})
	return held, release
}
