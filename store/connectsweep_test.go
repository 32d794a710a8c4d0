package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store/storetest"
)

// TestSweepRunsOfEachConnectedAccount: a connected account's sweep runs
// are its own. Its lease is its own (the platform's sweep and another
// account's run beside it, a second sweep of it does not); a run left
// running resumes only for its own account; its success imports only it;
// and the platform's counts (metrics, the app API's import state) leave
// it out.
func TestSweepRunsOfEachConnectedAccount(t *testing.T) {
	ctx := context.Background()
	st := storetest.NewStore(t)

	_, releaseA, err := st.SweepLock(ctx, "stripe", "acct_a")
	require.NoError(t, err)
	defer releaseA()
	_, _, err = st.SweepLock(ctx, "stripe", "acct_a")
	require.ErrorIs(t, err, reconcile.ErrLeaseHeld, "one sweep of an account at a time")
	_, releaseB, err := st.SweepLock(ctx, "stripe", "acct_b")
	require.NoError(t, err, "another account's sweep runs beside it")
	defer releaseB()
	_, releaseP, err := st.SweepLock(ctx, "stripe", "")
	require.NoError(t, err, "the platform's sweep runs beside it")
	defer releaseP()

	a, err := st.StartSweep(ctx, "stripe", "acct_a", reconcile.RunImport)
	require.NoError(t, err)
	require.Equal(t, "acct_a", a.Account)
	a.Cursor = "cus_9"
	_, err = st.SweepPage(ctx, a, []string{"acct_a/cus_9"})
	require.NoError(t, err)
	// acct_b's start neither resumes nor closes acct_a's run.
	b, err := st.StartSweep(ctx, "stripe", "acct_b", reconcile.RunSweep)
	require.NoError(t, err)
	require.False(t, b.Resumed)
	again, err := st.StartSweep(ctx, "stripe", "acct_a", reconcile.RunSweep)
	require.NoError(t, err)
	require.True(t, again.Resumed, "acct_a's run left running resumes")
	require.Equal(t, a.ID, again.ID)
	require.Equal(t, "cus_9", again.Cursor)

	require.NoError(t, st.FinishSweep(ctx, again, nil))
	for account, want := range map[string]bool{"acct_a": true, "acct_b": false, "": false} {
		imported, err := st.Imported(ctx, "stripe", account)
		require.NoError(t, err)
		require.Equal(t, want, imported, "imported %q", account)
	}
	stats, err := st.SweepStats(ctx)
	require.NoError(t, err)
	require.Empty(t, stats, "a connected account's runs are not the platform's sweeps")
	imports, err := st.Imports(ctx, []string{"stripe"})
	require.NoError(t, err)
	require.False(t, imports[0].Imported)
	require.Nil(t, imports[0].Running, "acct_b's running run is not the platform's import")
	runs, err := st.SweepRuns(ctx, 10)
	require.NoError(t, err)
	require.Len(t, runs, 2)
	require.Equal(t, "acct_b", runs[0].Account, "the console lists each run with its account")
}

// TestDueConnectSweeps: the accounts to sweep are the served ones that
// authorise the platform, most overdue first: never swept (and a run left
// running) first, then a failed run by its end plus the retry, then by
// the last run's start plus the interval.
func TestDueConnectSweeps(t *testing.T) {
	ctx := context.Background()
	st := storetest.NewStore(t)
	now, err := st.Now(ctx)
	require.NoError(t, err)
	var words []reconcile.Authorization
	for _, a := range []string{"acct_new", "acct_done", "acct_failed", "acct_gone", "acct_running"} {
		words = append(words, reconcile.Authorization{Account: a, Authorized: a != "acct_gone", At: now})
	}
	require.NoError(t, st.SaveAuthorizations(ctx, "stripe", words))
	run := func(account string, failure error, finish bool) {
		t.Helper()
		r, err := st.StartSweep(ctx, "stripe", account, reconcile.RunSweep)
		require.NoError(t, err)
		if finish {
			require.NoError(t, st.FinishSweep(ctx, r, failure))
		}
	}
	run("acct_done", nil, true)
	run("acct_failed", context.DeadlineExceeded, true)
	run("acct_gone", nil, true)
	run("acct_running", nil, false)

	all := reconcile.ConnectPolicy{Mode: reconcile.ConnectAll}
	q := reconcile.ConnectSweepQuery{Policy: all, Every: 24 * time.Hour, Retry: time.Hour, Limit: 10}
	due, served, err := st.DueConnectSweeps(ctx, "stripe", q)
	require.NoError(t, err)
	require.Equal(t, 4, served, "the authorising accounts")
	var order []string
	for _, d := range due {
		order = append(order, d.Account)
	}
	require.Equal(t, []string{"acct_new", "acct_running", "acct_failed", "acct_done"}, order,
		"never swept and left running first, then a failed run's retry (an hour), then a day after the last run")
	require.Nil(t, due[0].Last)
	require.Equal(t, "running", due[1].Last.Status)
	require.True(t, due[0].DueAt(q.Every, q.Retry).IsZero())
	require.True(t, due[1].DueAt(q.Every, q.Retry).IsZero(), "a run left running resumes at once")
	require.WithinDuration(t, *due[2].Last.FinishedAt, due[2].DueAt(q.Every, q.Retry).Add(-time.Hour), 0)
	require.WithinDuration(t, due[3].Last.StartedAt, due[3].DueAt(q.Every, q.Retry).Add(-24*time.Hour), 0)

	q.Skip = []string{"acct_new"}
	q.Policy = reconcile.ConnectPolicy{Mode: reconcile.ConnectListed, Listed: []string{"acct_new", "acct_done", "acct_gone"}}
	due, served, err = st.DueConnectSweeps(ctx, "stripe", q)
	require.NoError(t, err)
	require.Len(t, due, 1, "only the listed, authorising accounts not being swept")
	require.Equal(t, 1, served)
	require.Equal(t, "acct_done", due[0].Account)
}

// TestPruneKeepsEachAccountsNewestRuns: the prune deletes a connected
// account's finished runs older than the retention, except the account's
// newest run and its newest successful one (its schedule and its import
// state read them); the platform's runs, runs within the retention and a
// running run stay.
func TestPruneKeepsEachAccountsNewestRuns(t *testing.T) {
	ctx := context.Background()
	st := storetest.NewStore(t)
	run := func(account string, failure error) int64 {
		t.Helper()
		r, err := st.StartSweep(ctx, "stripe", account, reconcile.RunSweep)
		require.NoError(t, err)
		require.NoError(t, st.FinishSweep(ctx, r, failure))
		return r.ID
	}
	oldOK := run("acct_a", nil)
	newestOK := run("acct_a", nil)
	newest := run("acct_a", context.DeadlineExceeded)
	only := run("acct_b", nil)
	platform1, platform2 := run("", nil), run("", nil)
	running, err := st.StartSweep(ctx, "stripe", "acct_c", reconcile.RunSweep)
	require.NoError(t, err)
	for _, a := range []string{"acct_a", "acct_b", "acct_c", ""} {
		storetest.AgeSweepRuns(t, st, "stripe", a, 10*24*time.Hour)
	}
	recent := run("acct_b", nil) // within the retention: acct_b's newest now

	p, err := st.Prune(ctx, reconcile.Retention{OlderThan: 7 * 24 * time.Hour})
	require.NoError(t, err)
	require.EqualValues(t, 2, p.SweepRuns, "acct_a's oldest success and acct_b's old run")
	runs, err := st.SweepRuns(ctx, 100)
	require.NoError(t, err)
	var kept []int64
	for _, r := range runs {
		kept = append(kept, r.ID)
	}
	require.ElementsMatch(t, []int64{newestOK, newest, platform1, platform2, running.ID, recent}, kept, "pruned %d and %d", oldOK, only)
	imported, err := st.Imported(ctx, "stripe", "acct_a")
	require.NoError(t, err)
	require.True(t, imported, "an account's newest success is kept: it stays imported")
}

// TestEnqueueUnsweptOfEachAccount: a run queues the accounts of its own
// account that it did not list, none of another's: a connected account's
// run its own customers (found through accounts_connected), the
// platform's run its own, a customer billed as an account (a bare acct_
// key) among them.
func TestEnqueueUnsweptOfEachAccount(t *testing.T) {
	ctx := context.Background()
	st := storetest.NewStore(t)
	for _, c := range []string{"cus_1", "acct_z", "acct_a/cus_1", "acct_a/cus_2", "acct_b/cus_2", "acct_ab/cus_2"} {
		storetest.BareAccount(t, st, "stripe", c)
	}
	queued := func(account string, seen ...string) []string {
		t.Helper()
		run, err := st.StartSweep(ctx, "stripe", account, reconcile.RunSweep)
		require.NoError(t, err)
		_, err = st.SweepPage(ctx, run, seen)
		require.NoError(t, err)
		before := map[string]bool{}
		for _, q := range storetest.Queue(t, st) {
			before[q.CustomerID] = true
		}
		_, err = st.EnqueueUnswept(ctx, run.ID, "stripe", account, time.Time{}, 0)
		require.NoError(t, err)
		require.NoError(t, st.FinishSweep(ctx, run, nil))
		var out []string
		for _, q := range storetest.Queue(t, st) {
			if !before[q.CustomerID] {
				out = append(out, q.CustomerID)
			}
		}
		return out
	}
	require.ElementsMatch(t, []string{"acct_a/cus_2"}, queued("acct_a", "acct_a/cus_1"))
	require.ElementsMatch(t, []string{"cus_1", "acct_z"}, queued(""))
	require.ElementsMatch(t, []string{"acct_b/cus_2"}, queued("acct_b"), "not acct_ab's, whose id starts the same")
}
