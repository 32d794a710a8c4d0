package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/mocks/mock"
	"github.com/billsync/billsync/reconcile"
)

// These tests drive the sweeper's part queue against fakes: a listing of
// numbered customers whose cursors are ranges ("lo:hi", "" for the whole
// list) that pages ten at a time and splits what remains of a part in two,
// and a sweep store that checks, at every applied page, that the cursor it
// is given resumes exactly the customers not recorded yet. They run in a
// synctest bubble: a lister that waits for a part, or one left waiting
// after a stop, is seen, not timed.

const partPage = 10

// fakeListing is the listing of customers c000…, with what was listed.
type fakeListing struct {
	customers []string
	// gate, when set, holds the first list call until it is closed.
	gate chan struct{}
	// fail, when set, is asked before each call (numbered from 1).
	fail func(call int) error

	mu     sync.Mutex
	calls  int
	splits int
	listed map[string]int
}

func newFakeListing(n int) *fakeListing {
	l := &fakeListing{listed: map[string]int{}}
	for i := range n {
		l.customers = append(l.customers, fmt.Sprintf("c%03d", i))
	}
	return l
}

// parse reads a part's cursor: the customers from lo to hi (exclusive).
func (l *fakeListing) parse(cursor string) (lo, hi int, err error) {
	if cursor == "" {
		return 0, len(l.customers), nil
	}
	if _, err := fmt.Sscanf(cursor, "%d:%d", &lo, &hi); err != nil || lo < 0 || lo > hi || hi > len(l.customers) {
		return 0, 0, fmt.Errorf("bad cursor %q", cursor)
	}
	return lo, hi, nil
}

func (l *fakeListing) splitter() *mock.Splitter {
	return &mock.Splitter{
		Lister: mock.Lister{ListPageFn: func(ctx context.Context, cursor string) ([]reconcile.Snapshot, string, bool, error) {
			l.mu.Lock()
			l.calls++
			call, gate := l.calls, l.gate
			l.mu.Unlock()
			if call == 1 && gate != nil {
				<-gate
			}
			if l.fail != nil {
				if err := l.fail(call); err != nil {
					return nil, "", false, err
				}
			}
			lo, hi, err := l.parse(cursor)
			if err != nil {
				return nil, "", false, err
			}
			end := min(lo+partPage, hi)
			var snaps []reconcile.Snapshot
			l.mu.Lock()
			for _, c := range l.customers[lo:end] {
				snaps = append(snaps, reconcile.Snapshot{Provider: "test", CustomerID: c})
				l.listed[c]++
			}
			l.mu.Unlock()
			return snaps, fmt.Sprintf("%d:%d", end, hi), end < hi, nil
		}},
		SplitFn: func(_ context.Context, next string) (string, string, error) {
			lo, hi, err := l.parse(next)
			if err != nil {
				return "", "", err
			}
			if hi-lo < 2*partPage {
				return next, "", nil // too little left to share
			}
			l.mu.Lock()
			l.splits++
			l.mu.Unlock()
			mid := lo + (hi-lo)/2
			return fmt.Sprintf("%d:%d", lo, mid), fmt.Sprintf("%d:%d", mid, hi), nil
		},
	}
}

// covered returns the customers a run's cursor (one part a line) still
// lists.
func (l *fakeListing) covered(cursor string) (map[string]bool, error) {
	out := map[string]bool{}
	for _, part := range strings.Split(cursor, "\n") {
		lo, hi, err := l.parse(part)
		if err != nil {
			return nil, err
		}
		for _, c := range l.customers[lo:hi] {
			if out[c] {
				return nil, fmt.Errorf("cursor %q lists %s twice", cursor, c)
			}
			out[c] = true
		}
	}
	return out, nil
}

// fakeSweepStore records what the sweeper writes. It refuses a page (the
// sweep then fails with the reason) whose customers were recorded before,
// or whose cursor does not resume exactly the customers not recorded.
type fakeSweepStore struct {
	l     *fakeListing
	start string // the cursor StartSweep resumes from

	mu        sync.Mutex
	recorded  map[string]bool
	cursors   []string // the run's cursor at each applied page
	applied   map[string]int
	pages     int     // ApplySweptPage calls
	finished  []error // FinishSweep's failures, nil for a success
	unlocked  int
	enqueued  int
	maxCursor int // the most parts a recorded cursor held
}

func (s *fakeSweepStore) store() *mock.SweepStore {
	at := time.Date(2026, 11, 12, 10, 0, 0, 0, time.UTC)
	return &mock.SweepStore{
		NowFn: func(context.Context) (time.Time, error) { return at, nil },
		SweepLockFn: func(ctx context.Context, _, _ string) (context.Context, func(), error) {
			return ctx, func() { s.mu.Lock(); s.unlocked++; s.mu.Unlock() }, nil
		},
		ImportedFn: func(context.Context, string, string) (bool, error) { return true, nil }, // a sweep, not the import
		StartSweepFn: func(_ context.Context, provider, _, _ string) (reconcile.SweepRun, error) {
			return reconcile.SweepRun{ID: 1, Provider: provider, Cursor: s.start, Resumed: s.start != ""}, nil
		},
		SweptAccountsFn: func(context.Context, string, []string) (map[string]reconcile.Account, error) {
			return nil, nil // no account yet: every snapshot is applied
		},
		ApplySweptPageFn: func(_ context.Context, jobs []reconcile.Job, _ time.Time, _ []reconcile.Decider) ([]reconcile.SweptOutcome, error) {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.pages++
			outs := make([]reconcile.SweptOutcome, len(jobs))
			for i, job := range jobs {
				s.applied[job.CustomerID]++
				outs[i].Result = reconcile.ResultApplied
			}
			return outs, nil
		},
		SweepPageFn: func(_ context.Context, run reconcile.SweepRun, customers []string) (int, error) {
			s.mu.Lock()
			defer s.mu.Unlock()
			for _, c := range customers {
				if s.recorded[c] {
					return 0, fmt.Errorf("%s recorded twice", c)
				}
				s.recorded[c] = true
			}
			covered, err := s.l.covered(run.Cursor)
			if err != nil {
				return 0, err
			}
			for _, c := range s.l.customers {
				if covered[c] == s.recorded[c] {
					return 0, fmt.Errorf("after a page of %v the cursor %q: %s recorded %v, still listed %v",
						customers, run.Cursor, c, s.recorded[c], covered[c])
				}
			}
			s.cursors = append(s.cursors, run.Cursor)
			s.maxCursor = max(s.maxCursor, strings.Count(run.Cursor, "\n")+1)
			return len(s.recorded), nil
		},
		FinishSweepFn: func(_ context.Context, _ reconcile.SweepRun, failure error) error {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.finished = append(s.finished, failure)
			return nil
		},
		EnqueueUnsweptFn: func(context.Context, int64, string, string, time.Time, time.Duration) (int, error) {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.enqueued++
			return 0, nil
		},
	}
}

func newFakeSweep(l *fakeListing) *fakeSweepStore {
	return &fakeSweepStore{l: l, recorded: map[string]bool{}, applied: map[string]int{}}
}

func partSweeper(t *testing.T, st *fakeSweepStore, l *fakeListing, parallel int) *reconcile.Sweeper {
	t.Helper()
	s, err := reconcile.NewSweeper(reconcile.SweeperConfig{Store: st.store(), Provider: "test", Lister: l.splitter(),
		Parallel: parallel, Plans: examplePlans()})
	require.NoError(t, err)
	return s
}

// TestSweepPartQueueSplitsAndRecordsEachPage: listers with no part to take
// get parts split off the running ones; every customer is listed, applied
// and recorded exactly once; the cursor recorded with each applied page
// resumes exactly what is left; the run ends with a cursor that lists
// nothing, finished as a success.
func TestSweepPartQueueSplitsAndRecordsEachPage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 160
		l := newFakeListing(n)
		l.gate = make(chan struct{})
		st := newFakeSweep(l)
		s := partSweeper(t, st, l, 4)
		var rep reconcile.SweepReport
		var err error
		done := make(chan struct{})
		go func() {
			defer close(done)
			rep, err = s.Run(context.Background())
		}()
		// Every lister but the first now waits for a part: the first one
		// splits its part after its first page.
		synctest.Wait()
		close(l.gate)
		<-done
		require.NoError(t, err)

		require.Equal(t, n, rep.Run.Seen)
		require.Equal(t, n, rep.Run.Healed)
		require.Positive(t, l.splits, "parts were split off for the waiting listers")
		require.Greater(t, st.maxCursor, 1, "several parts were under way at once")
		require.Len(t, l.listed, n)
		require.Len(t, st.applied, n)
		for _, c := range l.customers {
			require.Equal(t, 1, l.listed[c], "%s listed once", c)
			require.Equal(t, 1, st.applied[c], "%s applied once", c)
		}
		require.Len(t, st.cursors, l.calls, "a cursor recorded with every applied page")
		require.Equal(t, l.calls, st.pages, "each page applied in one store call")
		require.Equal(t, l.calls, rep.Calls)
		covered, cerr := l.covered(rep.Run.Cursor)
		require.NoError(t, cerr)
		require.Empty(t, covered, "the last cursor resumes nothing")
		require.Equal(t, []error{nil}, st.finished)
		require.Equal(t, 1, st.unlocked)
		require.Equal(t, 1, st.enqueued, "what the listing did not cover is queued once it is done")
	})
}

// TestSweepPartQueueStopsAndResumes: a stop (SIGTERM) while parts are
// under way ends every lister, the waiting ones too, and leaves the run
// unfinished at the cursor of its last applied page; a sweep resumed
// there lists and records exactly the customers left, each once.
func TestSweepPartQueueStopsAndResumes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 200
		l := newFakeListing(n)
		ctx, cancel := context.WithCancel(context.Background())
		l.fail = func(call int) error {
			if call == 6 {
				cancel()
				return ctx.Err()
			}
			return nil
		}
		st := newFakeSweep(l)
		_, err := partSweeper(t, st, l, 4).Run(ctx)
		require.ErrorIs(t, err, context.Canceled)
		require.Empty(t, st.finished, "stopped, not finished: the next sweep resumes it")
		require.Equal(t, 1, st.unlocked)
		require.Zero(t, st.enqueued, "nothing queued from an unfinished listing")
		require.NotEmpty(t, st.cursors, "pages were applied before the stop")
		require.Less(t, len(st.recorded), n)

		// The next sweep resumes at the last recorded cursor.
		resumed := newFakeListing(n)
		st2 := newFakeSweep(resumed)
		st2.start = st.cursors[len(st.cursors)-1]
		for c := range st.recorded {
			st2.recorded[c] = true
		}
		rep, err := partSweeper(t, st2, resumed, 4).Run(context.Background())
		require.NoError(t, err)
		require.True(t, rep.Run.Resumed)
		require.Len(t, st2.recorded, n, "every customer recorded, before or after the stop")
		for c := range resumed.listed {
			require.False(t, st.recorded[c], "%s was recorded before the stop and listed again", c)
		}
		require.Len(t, resumed.listed, n-len(st.recorded))
		require.Equal(t, []error{nil}, st2.finished)
	})
}

// TestSweepPartQueueFailureStopsEveryLister: a list call that fails ends
// the sweep with that failure, recorded as the run's end, with every
// lister stopped.
func TestSweepPartQueueFailureStopsEveryLister(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newFakeListing(200)
		boom := errors.New("provider down")
		l.fail = func(call int) error {
			if call == 4 {
				return boom
			}
			return nil
		}
		st := newFakeSweep(l)
		_, err := partSweeper(t, st, l, 4).Run(context.Background())
		require.ErrorIs(t, err, boom)
		require.Len(t, st.finished, 1)
		require.ErrorIs(t, st.finished[0], boom, "the run is recorded as failed")
		require.Equal(t, 1, st.unlocked)
		require.Zero(t, st.enqueued)
	})
}

// TestSweepPartsFollowTheListBudget: with Parallel 0 the sweep lists as
// many parts at once as the Splitter's ListBudget calls for (rate ×
// latency, with headroom), never more, and gives parts back when the
// budget shrinks; every customer is still listed and recorded once.
func TestSweepPartsFollowTheListBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 2000
		l := newFakeListing(n)
		st := newFakeSweep(l)
		sp := l.splitter()
		var mu sync.Mutex
		budget := reconcile.Budget{Rate: 10, Latency: time.Second} // 14 in flight
		sp.ListBudgetFn = func() reconcile.Budget { mu.Lock(); defer mu.Unlock(); return budget }
		var inFlight, most, mostAfter int64
		shrunk := false
		peak := func() (int64, int64) { mu.Lock(); defer mu.Unlock(); return most, mostAfter }
		list := sp.ListPageFn
		sp.ListPageFn = func(ctx context.Context, cursor string) ([]reconcile.Snapshot, string, bool, error) {
			mu.Lock()
			inFlight++
			most = max(most, inFlight)
			if shrunk {
				mostAfter = max(mostAfter, inFlight)
			}
			mu.Unlock()
			defer func() { mu.Lock(); inFlight--; mu.Unlock() }()
			time.Sleep(time.Second) // the provider's latency
			return list(ctx, cursor)
		}
		s, err := reconcile.NewSweeper(reconcile.SweeperConfig{Store: st.store(), Provider: "test", Lister: sp, Plans: examplePlans()})
		require.NoError(t, err)
		done := make(chan error, 1)
		go func() { _, err := s.Run(context.Background()); done <- err }()
		time.Sleep(5 * time.Second)
		before, _ := peak()
		require.Equal(t, int64(14), before, "rate 10 at 1 s: ceil(12.5)+1 parts at once")
		mu.Lock()
		budget = reconcile.Budget{Rate: 2, Latency: time.Second} // 4 in flight
		mu.Unlock()
		time.Sleep(2 * time.Second) // the pages in flight end; their parts are given back
		mu.Lock()
		shrunk = true
		mu.Unlock()
		require.NoError(t, <-done)
		_, after := peak()
		require.Equal(t, int64(4), after, "rate 2 at 1 s: 4 parts at once once the budget shrank")
		require.Len(t, l.listed, n)
		for c, times := range l.listed {
			require.Equal(t, 1, times, "customer %s listed once", c)
		}
	})
}
