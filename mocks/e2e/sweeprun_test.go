package e2e_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	stripemock "github.com/billsync/billsync/mocks/stripe"
	"github.com/billsync/billsync/providers/stripe"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store"
	"github.com/billsync/billsync/store/storetest"
)

// runSweeps runs a SweepRunner of sweepers until the returned stop, which
// waits for Run to return (the test ends it at cleanup otherwise).
func runSweeps(t *testing.T, sweepers ...*reconcile.Sweeper) (*reconcile.SweepRunner, func()) {
	t.Helper()
	r, err := reconcile.NewSweepRunner(reconcile.SweepRunnerConfig{Sweepers: sweepers})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return r, stop
}

// blockingLister lists through next until its block'th call, which
// signals inside and waits until its context ends (a stopped sweep) or
// release is closed.
type blockingLister struct {
	next    reconcile.Lister
	block   int32
	calls   atomic.Int32
	inside  chan struct{}
	release chan struct{}
	test    context.Context // ends with the test: never waits past it
}

func newBlockingLister(t *testing.T, next reconcile.Lister, block int32) *blockingLister {
	return &blockingLister{next: next, block: block, inside: make(chan struct{}), release: make(chan struct{}), test: t.Context()}
}

func (l *blockingLister) ListPage(ctx context.Context, cursor string) ([]reconcile.Snapshot, string, bool, error) {
	if l.calls.Add(1) == l.block {
		close(l.inside)
		select {
		case <-ctx.Done():
			return nil, "", false, ctx.Err()
		case <-l.test.Done():
			return nil, "", false, l.test.Err()
		case <-l.release:
		}
	}
	return l.next.ListPage(ctx, cursor)
}

// sweepRecord waits until the newest run of provider has status and its
// sweep has let go of the provider's lock (it records the end first), and
// returns the run.
func sweepRecord(t *testing.T, st *store.Store, provider, status string) reconcile.SweepRecord {
	t.Helper()
	var rec reconcile.SweepRecord
	storetest.WaitFor(t, fmt.Sprintf("the %s sweep becomes %s and ends", provider, status), func() bool {
		runs, err := st.SweepRuns(context.Background(), 50)
		if err != nil {
			return false
		}
		for _, r := range runs {
			if r.Provider == provider {
				rec = r
				return r.Status == status && !sweepLocked(st, provider)
			}
		}
		return false
	})
	return rec
}

// sweepLocked reports whether a sweep of provider holds its lock.
func sweepLocked(st *store.Store, provider string) bool {
	_, unlock, err := st.SweepLock(context.Background(), provider, "")
	if err != nil {
		return true
	}
	unlock()
	return false
}

// TestSweepRunnerRefusesASecondStart: while a provider's sweep runs, a
// second start of it returns ErrSweepRunning for that provider at once
// and writes nothing.
func TestSweepRunnerRefusesASecondStart(t *testing.T) {
	t.Parallel()
	h, _ := newSweepHarness(t, stripemock.Options{}, false)
	cus := h.Customer("u1")
	h.Subscribe(cus, "price_pro")
	lister := newBlockingLister(t, h.Stripe.Client, 1)
	r, _ := runSweeps(t, h.sweeper(lister, nil))
	ctx := context.Background()

	starts, err := r.Start(ctx)
	require.NoError(t, err)
	require.Len(t, starts, 1)
	require.NoError(t, starts[0].Err)
	require.Equal(t, stripe.Provider, starts[0].Provider)
	require.NotZero(t, starts[0].Run.ID)
	<-lister.inside

	before := storetest.Tables(t, h.Store)
	again, err := r.Start(ctx)
	require.ErrorIs(t, err, reconcile.ErrSweepRunning)
	require.Len(t, again, 1)
	require.ErrorIs(t, again[0].Err, reconcile.ErrSweepRunning)
	require.Zero(t, again[0].Run.ID)
	require.Equal(t, before, storetest.Tables(t, h.Store), "a refused start writes nothing")

	close(lister.release)
	rec := sweepRecord(t, h.Store, stripe.Provider, "succeeded")
	require.Equal(t, starts[0].Run.ID, rec.ID)
	require.Equal(t, 1, rec.Healed)
	require.Equal(t, "pro", h.state(cus).Plan)
}

// TestSweepRunnerStopLeavesTheRunResumable: the end of Run stops a sweep
// it started and waits for it: the pages applied are recorded, the lock
// is free, the run stays running with its cursor, and the next sweep
// resumes it.
func TestSweepRunnerStopLeavesTheRunResumable(t *testing.T) {
	t.Parallel()
	h, calls := newSweepHarness(t, stripemock.Options{}, false)
	const n = 250 // three pages
	customers, _ := h.subscribeMany(n, func(int) string { return "price_team" })
	lister := newBlockingLister(t, h.Stripe.Client, 2) // the first page, then a list call that hangs
	var cursor string
	sweeper, err := reconcile.NewSweeper(reconcile.SweeperConfig{Store: h.Store, Provider: stripe.Provider, Lister: lister,
		Plans: h.Plans, OnPage: func(run reconcile.SweepRun) { cursor = run.Cursor }})
	require.NoError(t, err)
	r, stop := runSweeps(t, sweeper)
	ctx := context.Background()

	starts, err := r.Start(ctx)
	require.NoError(t, err)
	<-lister.inside
	stop() // SIGTERM: returns once the sweep has stopped
	_, err = r.Start(ctx)
	require.ErrorIs(t, err, reconcile.ErrSweepsStopped)

	runs, err := h.Store.SweepRuns(ctx, 50)
	require.NoError(t, err)
	require.Len(t, runs, 1)
	require.Equal(t, starts[0].Run.ID, runs[0].ID)
	require.Equal(t, "running", runs[0].Status, "stopped, not failed")
	require.Equal(t, 100, runs[0].Seen, "the page handed over before the stop is applied and recorded")
	require.NotEmpty(t, cursor)

	// The lock went with the stopped sweep: the next one starts, resuming.
	calls.n.Store(0)
	next, err := h.sweeper(listerFunc(h.Stripe.Client.ListPage), nil).Start(ctx, reconcile.RunSweep) // one page at a time
	require.NoError(t, err, "the stopped sweep still holds the lock")
	require.True(t, next.Run.Resumed)
	require.Equal(t, starts[0].Run.ID, next.Run.ID)
	require.Equal(t, cursor, next.Run.Cursor)
	rep, err := next.Sweep(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 2, calls.n.Load(), "the two pages not applied, not the first again")
	require.Equal(t, n, rep.Run.Seen)
	require.Empty(t, h.wrongAccounts(customers))
}

// TestSweepRunnerSweepsEachProviderOnItsOwn: one provider's running sweep
// does not keep another's from starting, and each start reports its own
// provider's run.
func TestSweepRunnerSweepsEachProviderOnItsOwn(t *testing.T) {
	t.Parallel()
	h, _ := newSweepHarness(t, stripemock.Options{}, false)
	cus := h.Customer("u1")
	h.Subscribe(cus, "price_pro")
	kinde, err := reconcile.NewSweeper(reconcile.SweeperConfig{Store: h.Store, Provider: "kinde", Plans: h.Plans})
	require.NoError(t, err)
	r, _ := runSweeps(t, h.sweeper(nil, nil), kinde)
	ctx := context.Background()

	// Another replica sweeps Stripe.
	_, unlock, err := h.Store.SweepLock(ctx, stripe.Provider, "")
	require.NoError(t, err)
	starts, err := r.Start(ctx)
	require.NoError(t, err, "one sweep started")
	require.Equal(t, stripe.Provider, starts[0].Provider)
	require.ErrorIs(t, starts[0].Err, reconcile.ErrSweepRunning)
	require.Equal(t, "kinde", starts[1].Provider)
	require.NoError(t, starts[1].Err)
	require.Equal(t, "kinde", starts[1].Run.Provider)
	rec := sweepRecord(t, h.Store, "kinde", "succeeded")
	require.Equal(t, starts[1].Run.ID, rec.ID)
	unlock()

	starts, err = r.Start(ctx)
	require.NoError(t, err)
	require.NoError(t, starts[0].Err)
	require.NoError(t, starts[1].Err)
	rec = sweepRecord(t, h.Store, stripe.Provider, "succeeded")
	require.Equal(t, starts[0].Run.ID, rec.ID)
	require.Equal(t, 1, rec.Healed, "the Stripe run reports its own counts")
	require.NotEqual(t, starts[0].Run.ID, starts[1].Run.ID)
}
