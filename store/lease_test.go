package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store"
	"github.com/billsync/billsync/store/storetest"
)

// advisoryLocks counts the advisory locks held in st's database: a lease
// must hold none, since a transaction pooler would leak them.
func advisoryLocks(t *testing.T, st *store.Store) int {
	t.Helper()
	var n int
	require.NoError(t, st.Pool().QueryRow(context.Background(), `
		SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'
		  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&n))
	return n
}

// lost waits for held to end and returns its cause; a minute without is a
// failure (a holder that never learns it lost its lease).
func lost(t *testing.T, held context.Context) error {
	t.Helper()
	select {
	case <-held.Done():
		return context.Cause(held)
	case <-time.After(time.Minute):
		t.Fatal("the lease's context did not end")
		return nil
	}
}

func TestLeaseOneHolderAtATime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := storetest.URL(t)
	a := storetest.OpenStore(t, url, store.Options{})
	b := storetest.OpenStore(t, url, store.Options{})

	held, release, err := a.SweepLock(ctx, "stripe", "")
	require.NoError(t, err)
	_, _, err = b.SweepLock(ctx, "stripe", "")
	require.ErrorIs(t, err, reconcile.ErrLeaseHeld, "one sweep of a provider at a time")
	_, _, err = a.SweepLock(ctx, "stripe", "")
	require.ErrorIs(t, err, reconcile.ErrLeaseHeld, "not twice by one replica either")
	require.Zero(t, advisoryLocks(t, a), "no session state: a pooler could hand it to anyone")

	_, releaseOther, err := b.SweepLock(ctx, "kinde", "")
	require.NoError(t, err, "another provider's sweep is separate")
	releaseOther()
	_, releaseFeed, err := b.EventsFeedLock(ctx, "stripe")
	require.NoError(t, err, "the feed's lease is not the sweep's")
	releaseFeed()

	release()
	require.ErrorIs(t, context.Cause(held), context.Canceled, "released, not lost")
	_, releaseB, err := b.SweepLock(ctx, "stripe", "")
	require.NoError(t, err, "release lets it go at once")
	releaseB()
}

// A leader that dies stops renewing: its lease passes on once it has run
// out by the database's clock, not before, and the dead leader's own
// context ends (lost) rather than run on beside its successor.
func TestLeasePassesOnWhenItsHolderDies(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := storetest.URL(t)
	// Long enough that a renewal slowed by a loaded machine (each may take
	// a sixth of it) does not lose the lease before a dies.
	ttl := 6 * time.Second
	a := storetest.OpenStore(t, url, store.Options{LeaseTTL: ttl})
	b := storetest.OpenStore(t, url, store.Options{LeaseTTL: ttl})

	held, _, err := a.EventsFeedLock(ctx, "stripe")
	require.NoError(t, err)
	// Renewals keep it while a lives: after several renewal periods it is
	// still a's.
	renewedTwice := func() bool {
		var renewals int
		require.NoError(t, b.Pool().QueryRow(ctx, `
			SELECT count(*) FROM leases WHERE name = 'feed.stripe' AND renewed_at > acquired_at + make_interval(secs => $1)`,
			(ttl*2/3).Seconds()).Scan(&renewals))
		return renewals == 1
	}
	storetest.WaitFor(t, "a's lease renewed past two thirds of its TTL", renewedTwice)
	_, _, err = b.EventsFeedLock(ctx, "stripe")
	require.ErrorIs(t, err, reconcile.ErrLeaseHeld, "a renewed lease is still held")

	// a dies: its pool goes, so nothing renews.
	a.Close()
	require.ErrorIs(t, lost(t, held), reconcile.ErrLeaseLost)
	var expires time.Time
	require.NoError(t, b.Pool().QueryRow(ctx, `SELECT expires_at FROM leases WHERE name = 'feed.stripe'`).Scan(&expires))

	var releaseB func()
	storetest.WaitFor(t, "b takes the dead leader's lease", func() bool {
		_, release, err := b.EventsFeedLock(ctx, "stripe")
		if errors.Is(err, reconcile.ErrLeaseHeld) {
			return false
		}
		require.NoError(t, err)
		releaseB = release
		return true
	})
	defer releaseB()
	var acquired time.Time
	require.NoError(t, b.Pool().QueryRow(ctx, `SELECT acquired_at FROM leases WHERE name = 'feed.stripe'`).Scan(&acquired))
	require.False(t, acquired.Before(expires), "taken at %s, before the dead leader's lease ran out at %s", acquired, expires)
}

// A holder whose lease a successor took (it stalled past its TTL) learns
// so at its next renewal, and its context ends.
func TestLeaseLostToASuccessor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := storetest.URL(t)
	a := storetest.OpenStore(t, url, store.Options{LeaseTTL: 3 * time.Second})
	b := storetest.OpenStore(t, url, store.Options{})

	held, releaseA, err := a.SweepLock(ctx, "stripe", "")
	require.NoError(t, err)
	// a stalled (a frozen process): its lease ran out and b took it.
	_, err = b.Pool().Exec(ctx, `UPDATE leases SET expires_at = now() WHERE name = 'sweep.stripe'`)
	require.NoError(t, err)
	_, releaseB, err := b.SweepLock(ctx, "stripe", "")
	require.NoError(t, err)
	defer releaseB()

	require.ErrorIs(t, lost(t, held), reconcile.ErrLeaseLost)
	releaseA() // must not release b's lease
	_, _, err = a.SweepLock(ctx, "stripe", "")
	require.ErrorIs(t, err, reconcile.ErrLeaseHeld, "the loser's release left the successor's lease alone")
}
