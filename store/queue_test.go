package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store"
	"github.com/billsync/billsync/store/storetest"
)

// TestStoreCallsHaveADeadline: a call the database never answers (here: a
// row lock held by another transaction) ends at the store's timeout with
// ErrStoreUnavailable, even when its caller's context has no deadline, as the
// worker's finishing calls do on shutdown.
func TestStoreCallsHaveADeadline(t *testing.T) {
	ctx := context.Background()
	url := storetest.URL(t)
	// The setup and the final check use a store with the default timeout,
	// so a busy machine's slow call is not mistaken for the hang; only the
	// calls that meet the lock go through the store with a short one.
	st := storetest.OpenStore(t, url, store.Options{})
	hasty := storetest.OpenStore(t, url, store.Options{Timeout: 200 * time.Millisecond})
	receive(t, st, "evt_1", "cus_1")
	job := claimOne(t, st)

	blocker, err := st.Pool().Begin(ctx)
	require.NoError(t, err)
	defer blocker.Rollback(ctx) //nolint:errcheck // only a lock holder
	_, err = blocker.Exec(ctx, `SELECT 1 FROM reconcile_queue WHERE id = $1 FOR UPDATE`, job.ID)
	require.NoError(t, err)

	_, err = applySnap(context.WithoutCancel(ctx), hasty, job, dbNow(t, st), liveSnap("cus_1", "pro"), testenv.Plans())
	require.ErrorIs(t, err, reconcile.ErrStoreUnavailable)
	_, err = hasty.Retry(ctx, job, time.Time{}, reconcile.Outcome{Result: reconcile.ResultRetry, Text: "x"}, time.Second)
	require.ErrorIs(t, err, reconcile.ErrStoreUnavailable)
	require.NoError(t, blocker.Rollback(ctx))
	require.Equal(t, "pending", storetest.EventStatuses(t, st, "stripe", "cus_1")["evt_1"], "nothing was written")
}

// TestExtendRenewsOnlyLeasesStillHeld: the heartbeat moves locked_until
// forward for the worker's own jobs, and reports a job it lost.
func TestExtendRenewsOnlyLeasesStillHeld(t *testing.T) {
	ctx := context.Background()
	st := storetest.NewStore(t)
	receive(t, st, "evt_1", "cus_1")
	receive(t, st, "evt_2", "cus_2")
	jobs, err := st.Claim(ctx, "a", 10, time.Second)
	require.NoError(t, err)
	require.Len(t, jobs, 2)

	lockedUntil := func(id int64) time.Time {
		var until time.Time
		require.NoError(t, st.Pool().QueryRow(ctx, `SELECT locked_until FROM reconcile_queue WHERE id = $1`, id).Scan(&until))
		return until
	}
	before := lockedUntil(jobs[0].ID)
	n, err := st.Extend(ctx, "a", jobs, time.Hour)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.True(t, lockedUntil(jobs[0].ID).After(before.Add(50*time.Minute)))

	// Another worker took the second job after the lease ran out.
	_, err = st.Pool().Exec(ctx, `UPDATE reconcile_queue SET locked_by = 'b' WHERE id = $1`, jobs[1].ID)
	require.NoError(t, err)
	n, err = st.Extend(ctx, "a", jobs, time.Hour)
	require.NoError(t, err)
	require.Equal(t, 1, n, "a lease another worker holds is not renewed")
}

// TestExtendDoesNotWaitForAnApply: a heartbeat skips a held row that an
// apply has locked, counts it as held, and renews the rest at once; the
// apply never waits behind it either.
func TestExtendDoesNotWaitForAnApply(t *testing.T) {
	ctx := context.Background()
	st := storetest.NewStore(t)
	receive(t, st, "evt_1", "cus_1")
	receive(t, st, "evt_2", "cus_2")
	jobs, err := st.Claim(ctx, "a", 10, time.Second)
	require.NoError(t, err)
	require.Len(t, jobs, 2)

	// An apply of the first job holds its row.
	tx, err := st.Pool().Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck // the test's own transaction
	_, err = tx.Exec(ctx, `SELECT 1 FROM reconcile_queue WHERE id = $1 FOR UPDATE`, jobs[0].ID)
	require.NoError(t, err)

	// The store's own deadline would end a wait: a heartbeat that waited
	// fails here instead of renewing.
	bounded, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	n, err := st.Extend(bounded, "a", jobs, time.Hour)
	require.NoError(t, err, "the heartbeat waited for the apply's lock")
	require.Equal(t, 2, n, "the locked row is still held")
	var renewed bool
	require.NoError(t, st.Pool().QueryRow(ctx,
		`SELECT locked_until > now() + interval '50 minutes' FROM reconcile_queue WHERE id = $1`, jobs[1].ID).Scan(&renewed))
	require.True(t, renewed, "the free row was renewed")
	require.NoError(t, tx.Rollback(ctx))
}

// TestRetryBeforeTheClockWasRead: a failure recorded before observed_at
// was known is logged at the time it was written.
func TestRetryBeforeTheClockWasRead(t *testing.T) {
	ctx := context.Background()
	st, job := claimedJob(t)
	out, err := st.Retry(ctx, job, time.Time{}, reconcile.Outcome{Result: reconcile.ResultDead, Text: "dead after 1 attempts: store: boom"}, time.Second)
	require.NoError(t, err)
	require.Equal(t, 1, out.Events)
	var observed time.Time
	var result string
	require.NoError(t, st.Pool().QueryRow(ctx, `SELECT observed_at, result FROM reconcile_log`).Scan(&observed, &result))
	require.False(t, observed.IsZero())
	require.Equal(t, "dead", result)
	require.Equal(t, map[string]string{"evt_1": "dead"}, storetest.EventStatuses(t, st, "stripe", "cus_1"))
}

// TestClaimCarriesTheNewestExpectation: a claimed job carries what the
// newest pending event (by the provider's time) says its subscription is,
// skipping events that say nothing and events already answered.
func TestClaimCarriesTheNewestExpectation(t *testing.T) {
	ctx := context.Background()
	st := storetest.NewStore(t)
	at := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	deliver := func(id string, minute int, expect *reconcile.Expectation) {
		_, err := st.StoreReceipt(ctx, reconcile.Receipt{Event: reconcile.Event{
			Provider: "stripe", DedupeKey: id, EventID: id, Type: "customer.subscription.updated",
			CustomerID: "cus_1", Time: at.Add(time.Duration(minute) * time.Minute), Payload: []byte(`{}`), Expect: expect}})
		require.NoError(t, err)
	}
	newest := &reconcile.Expectation{SubscriptionID: "sub_1", Status: "active", Prices: []string{"price_team"}}
	deliver("evt_newest", 5, newest)
	deliver("evt_older", 3, &reconcile.Expectation{SubscriptionID: "sub_1", Status: "active", Prices: []string{"price_pro"}})
	deliver("evt_silent", 9, nil) // newest of all, but carries no expectation
	job := claimOne(t, st)
	require.Equal(t, newest, job.Expect)

	// A reconcile observed right after evt_newest arrived answers it alone
	// (the job stays: the others came later).
	var first time.Time
	require.NoError(t, st.Pool().QueryRow(ctx, `SELECT received_at FROM inbox_events WHERE dedupe_key = 'evt_newest'`).Scan(&first))
	_, err := st.Ignore(ctx, job, first, reconcile.Outcome{Result: reconcile.ResultIgnored, Text: "ignored: test"})
	require.NoError(t, err)
	job = claimOne(t, st)
	require.Equal(t, []string{"price_pro"}, job.Expect.Prices, "an answered event expects nothing any more")

	// Every event answered; a later one says nothing.
	_, err = st.Ignore(ctx, job, dbNow(t, st), reconcile.Outcome{Result: reconcile.ResultIgnored, Text: "ignored: test"})
	require.NoError(t, err)
	deliver("evt_later", 10, nil)
	require.Nil(t, claimOne(t, st).Expect)
}
