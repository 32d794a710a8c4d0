package reconcile_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/mocks/mock"
	"github.com/billsync/billsync/reconcile"
)

// These tests drive the worker's loop against function-field fakes: no
// database, no provider. The store's own behaviour is tested against
// PostgreSQL in package store, and the whole path in harness tests.

// fakeQueue is one customer's queue row as the fakes see it.
type fakeQueue struct {
	mu       sync.Mutex
	job      reconcile.Job
	due      bool
	results  []reconcile.Result
	texts    []string
	released [][]reconcile.Job
}

func (q *fakeQueue) store() *mock.Store {
	return &mock.Store{
		ClaimFn: func(context.Context, string, int, time.Duration) ([]reconcile.Job, error) {
			q.mu.Lock()
			defer q.mu.Unlock()
			if !q.due {
				return nil, nil
			}
			q.due = false
			return []reconcile.Job{q.job}, nil
		},
		ExtendFn: func(_ context.Context, _ string, jobs []reconcile.Job, _ time.Duration) (int, error) {
			return len(jobs), nil
		},
		NowFn: func(context.Context) (time.Time, error) { return time.Now(), nil },
		RetryFn: func(_ context.Context, job reconcile.Job, _ time.Time, out reconcile.Outcome, _ time.Duration) (reconcile.Outcome, error) {
			q.mu.Lock()
			defer q.mu.Unlock()
			q.job.Attempts++
			q.due = out.Result == reconcile.ResultRetry
			q.results = append(q.results, out.Result)
			q.texts = append(q.texts, out.Text)
			return out, nil
		},
		ReleaseFn: func(_ context.Context, _ string, jobs []reconcile.Job) error {
			q.mu.Lock()
			defer q.mu.Unlock()
			q.released = append(q.released, jobs)
			q.due = true
			return nil
		},
	}
}

func stripeFake(fetch func(ctx context.Context, customerID string) (reconcile.Snapshot, error)) *mock.Provider {
	return &mock.Provider{ProviderName: "stripe", FetchFn: fetch}
}

func liveSnapshot(ctx context.Context, customerID string) (reconcile.Snapshot, error) {
	return oneSub(customerID, "active", time.Time{}, time.Time{}, "pro"), nil
}

func newUnitWorker(t *testing.T, cfg reconcile.WorkerConfig) *reconcile.Worker {
	t.Helper()
	cfg.Plans = cmpOr(cfg.Plans, examplePlans())
	w, err := reconcile.NewWorker(cfg)
	require.NoError(t, err)
	return w
}

func cmpOr[T comparable](a, b T) T {
	var zero T
	if a != zero {
		return a
	}
	return b
}

var threeWaits = []time.Duration{time.Millisecond, time.Millisecond, time.Millisecond}

// drainUntilIdle drains until nothing is due: each Drain call stands for
// one claim after the backoff.
func drainUntilIdle(t *testing.T, w *reconcile.Worker) {
	t.Helper()
	for range 20 {
		n, err := w.Drain(context.Background())
		require.NoError(t, err)
		if n == 0 {
			return
		}
	}
	t.Fatal("the job never stopped being due")
}

// TestWorkerStoreFailureIsAnAttempt: a store failure that never clears (a
// constraint violation, a guarded write that matches nothing) must be
// counted like a provider failure, end dead, and reach OnOutcome each time.
func TestWorkerStoreFailureIsAnAttempt(t *testing.T) {
	q := &fakeQueue{job: reconcile.Job{ID: 1, Provider: "stripe", CustomerID: "cus_1"}, due: true}
	st := q.store()
	st.ApplyFn = func(context.Context, reconcile.Job, time.Time, reconcile.Decider) (reconcile.Outcome, error) {
		return reconcile.Outcome{}, errors.New("violates check constraint")
	}
	var seen []reconcile.Result
	w := newUnitWorker(t, reconcile.WorkerConfig{Store: st, Providers: []reconcile.Provider{stripeFake(liveSnapshot)},
		Backoff: threeWaits, OnOutcome: func(_ reconcile.Job, out reconcile.Outcome) { seen = append(seen, out.Result) }})

	drainUntilIdle(t, w)
	want := []reconcile.Result{reconcile.ResultRetry, reconcile.ResultRetry, reconcile.ResultRetry, reconcile.ResultDead}
	require.Equal(t, want, q.results, "recorded attempts")
	require.Equal(t, want, seen, "outcomes reported (metrics, alerts)")
	require.EqualValues(t, 1, w.Dead())
	require.Contains(t, q.texts[3], "dead after 4 attempts: store: violates check constraint")
}

// TestWorkerClockFailureIsAnAttempt: failing to read the database clock
// is a failed attempt too, recorded without an observed_at.
func TestWorkerClockFailureIsAnAttempt(t *testing.T) {
	q := &fakeQueue{job: reconcile.Job{ID: 1, Provider: "stripe", CustomerID: "cus_1"}, due: true}
	st := q.store()
	st.NowFn = func(context.Context) (time.Time, error) { return time.Time{}, errors.New("connection reset") }
	var observed []time.Time
	retry := st.RetryFn
	st.RetryFn = func(ctx context.Context, job reconcile.Job, at time.Time, out reconcile.Outcome, d time.Duration) (reconcile.Outcome, error) {
		observed = append(observed, at)
		return retry(ctx, job, at, out, d)
	}
	w := newUnitWorker(t, reconcile.WorkerConfig{Store: st, Providers: []reconcile.Provider{stripeFake(liveSnapshot)}, Backoff: threeWaits})
	drainUntilIdle(t, w)
	require.Len(t, q.results, 4)
	require.Equal(t, reconcile.ResultDead, q.results[3])
	for _, at := range observed {
		require.True(t, at.IsZero())
	}
}

// TestWorkerRecordsAFailureOnceTheStoreIsBack: when recording the failure
// fails too (the database restarting), it is tried once more, so the job
// is rescheduled instead of keeping its lease.
func TestWorkerRecordsAFailureOnceTheStoreIsBack(t *testing.T) {
	q := &fakeQueue{job: reconcile.Job{ID: 1, Provider: "stripe", CustomerID: "cus_1"}, due: true}
	st := q.store()
	st.ApplyFn = func(context.Context, reconcile.Job, time.Time, reconcile.Decider) (reconcile.Outcome, error) {
		return reconcile.Outcome{}, errors.New("unexpected EOF")
	}
	calls := 0
	retry := st.RetryFn
	st.RetryFn = func(ctx context.Context, job reconcile.Job, at time.Time, out reconcile.Outcome, d time.Duration) (reconcile.Outcome, error) {
		if calls++; calls == 1 {
			return reconcile.Outcome{}, errors.New("the database system is starting up")
		}
		out, err := retry(ctx, job, at, out, d)
		q.due = false // in backoff: not claimed again by this Drain
		return out, err
	}
	w := newUnitWorker(t, reconcile.WorkerConfig{Store: st, Providers: []reconcile.Provider{stripeFake(liveSnapshot)}, Backoff: threeWaits})
	n, err := w.Drain(context.Background())
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, 2, calls)
	require.Equal(t, []reconcile.Result{reconcile.ResultRetry}, q.results)
	require.Empty(t, q.released)
}

// TestWorkerHeartbeatRenewsLeasesInHand: while a job is worked, the loop
// renews the leases of every job of its batch it still holds, and stops
// renewing a job once it is done. It runs in a synctest bubble: the
// heartbeat's ticks are the bubble's, so a renewal is waited for, never
// raced against the machine's load.
func TestWorkerHeartbeatRenewsLeasesInHand(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		renewed := make(chan []int64, 100)
		st := batchOfTwo()
		st.ExtendFn = func(_ context.Context, _ string, held []reconcile.Job, _ time.Duration) (int, error) {
			ids := make([]int64, len(held))
			for i, j := range held {
				ids[i] = j.ID
			}
			renewed <- ids
			return len(held), nil
		}
		st.ApplyFn = func(context.Context, reconcile.Job, time.Time, reconcile.Decider) (reconcile.Outcome, error) {
			return reconcile.Outcome{Result: reconcile.ResultApplied}, nil
		}
		// Each fetch waits for the heartbeat it must see: both jobs renewed
		// while the first is fetched, only the second while it is.
		waitRenewal := func(want []int64) {
			deadline := time.After(time.Hour) // the bubble's time: reached at once if the heartbeat stopped
			for {
				select {
				case ids := <-renewed:
					if slices.Equal(ids, want) {
						return
					}
				case <-deadline:
					t.Errorf("no lease renewal of %v", want)
					return
				}
			}
		}
		fetch := func(_ context.Context, customerID string) (reconcile.Snapshot, error) {
			if customerID == "cus_1" {
				waitRenewal([]int64{1, 2})
			} else {
				waitRenewal([]int64{2})
			}
			return liveSnapshot(context.Background(), customerID)
		}
		w := newUnitWorker(t, reconcile.WorkerConfig{Store: st, Providers: []reconcile.Provider{stripeFake(fetch)},
			Batch: 2, Lease: 30 * time.Millisecond})
		n, err := w.Drain(context.Background())
		require.NoError(t, err)
		require.Equal(t, 2, n)
	})
}

// batchOfTwo is a store whose queue hands out one batch of two jobs, then
// nothing; leases renew, the clock reads.
func batchOfTwo() *mock.Store {
	claimed := false
	return &mock.Store{
		ClaimFn: func(context.Context, string, int, time.Duration) ([]reconcile.Job, error) {
			if claimed {
				return nil, nil
			}
			claimed = true
			return []reconcile.Job{{ID: 1, Provider: "stripe", CustomerID: "cus_1"}, {ID: 2, Provider: "stripe", CustomerID: "cus_2"}}, nil
		},
		ExtendFn: func(_ context.Context, _ string, held []reconcile.Job, _ time.Duration) (int, error) {
			return len(held), nil
		},
		NowFn: func(context.Context) (time.Time, error) { return time.Now(), nil },
	}
}

// TestWorkerStopHandsBackWithoutCountingAnAttempt: a fetch cut short by
// shutdown is not a provider failure; the job in hand and the rest of the
// batch are released at once.
func TestWorkerStopHandsBackWithoutCountingAnAttempt(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex // the two jobs are processed, and released, at once
	var released []int64
	st := batchOfTwo() // its RetryFn is nil: a call would panic and fail the test
	st.ReleaseFn = func(_ context.Context, _ string, js []reconcile.Job) error {
		mu.Lock()
		defer mu.Unlock()
		for _, j := range js {
			released = append(released, j.ID)
		}
		return nil
	}
	fetch := func(fctx context.Context, _ string) (reconcile.Snapshot, error) {
		cancel() // SIGTERM arrives mid-fetch
		<-fctx.Done()
		return reconcile.Snapshot{}, fctx.Err()
	}
	w := newUnitWorker(t, reconcile.WorkerConfig{Store: st, Providers: []reconcile.Provider{stripeFake(fetch)}, Batch: 2, Concurrency: 1})
	w.Run(ctx)
	require.ElementsMatch(t, []int64{1, 2}, released)
}

// TestWorkerIgnoresPermanentFailures: an unknown customer, unreadable data
// and an unconfigured provider end ignored with the reason, never retried.
func TestWorkerIgnoresPermanentFailures(t *testing.T) {
	for name, tc := range map[string]struct {
		job  reconcile.Job
		err  error
		want string
	}{
		"UnknownCustomer": {reconcile.Job{ID: 1, Provider: "stripe", CustomerID: "cus_x"}, reconcile.ErrCustomerUnknown, "ignored: customer cus_x is unknown to stripe"},
		"Permanent":       {reconcile.Job{ID: 1, Provider: "stripe", CustomerID: "cus_x"}, reconcile.Permanent("subscription sub_1 has no price"), "ignored: subscription sub_1 has no price"},
		"NoProvider":      {reconcile.Job{ID: 1, Provider: "kinde", CustomerID: "customer_x"}, nil, `ignored: provider "kinde" is not configured`},
	} {
		t.Run(name, func(t *testing.T) {
			q := &fakeQueue{job: tc.job, due: true}
			st := q.store()
			var got []string
			st.IgnoreFn = func(_ context.Context, _ reconcile.Job, _ time.Time, out reconcile.Outcome) (reconcile.Outcome, error) {
				require.Equal(t, reconcile.ResultIgnored, out.Result)
				got = append(got, out.Text)
				return out, nil
			}
			fetch := func(context.Context, string) (reconcile.Snapshot, error) { return reconcile.Snapshot{}, tc.err }
			w := newUnitWorker(t, reconcile.WorkerConfig{Store: st, Providers: []reconcile.Provider{stripeFake(fetch)}})
			drainUntilIdle(t, w)
			require.Equal(t, []string{tc.want}, got)
			require.Empty(t, q.results, "a permanent failure is not retried")
		})
	}
}

func TestNewWorkerRefusesBadConfig(t *testing.T) {
	plans := examplePlans()
	st := &mock.Store{}
	p := stripeFake(liveSnapshot)
	for name, tc := range map[string]struct {
		cfg  reconcile.WorkerConfig
		want string
	}{
		"NoStore":           {reconcile.WorkerConfig{Plans: plans, Providers: []reconcile.Provider{p}}, "no store"},
		"NoPlans":           {reconcile.WorkerConfig{Store: st, Providers: []reconcile.Provider{p}}, "no plans"},
		"NoProviders":       {reconcile.WorkerConfig{Store: st, Plans: plans}, "no providers"},
		"NilProvider":       {reconcile.WorkerConfig{Store: st, Plans: plans, Providers: []reconcile.Provider{nil}}, "a nil provider"},
		"DuplicateProvider": {reconcile.WorkerConfig{Store: st, Plans: plans, Providers: []reconcile.Provider{p, p}}, `provider "stripe" given twice`},
		"NegativeBatch":     {reconcile.WorkerConfig{Store: st, Plans: plans, Providers: []reconcile.Provider{p}, Batch: -1}, "negative"},
		"NegativeLease":     {reconcile.WorkerConfig{Store: st, Plans: plans, Providers: []reconcile.Provider{p}, Lease: -time.Second}, "negative"},
		"NegativeBackoff":   {reconcile.WorkerConfig{Store: st, Plans: plans, Providers: []reconcile.Provider{p}, Backoff: []time.Duration{-1}}, "negative backoff"},
	} {
		t.Run(name, func(t *testing.T) {
			w, err := reconcile.NewWorker(tc.cfg)
			require.ErrorContains(t, err, tc.want)
			require.Nil(t, w)
		})
	}
	w, err := reconcile.NewWorker(reconcile.WorkerConfig{Store: st, Plans: plans, Providers: []reconcile.Provider{p}})
	require.NoError(t, err)
	require.NotNil(t, w)
}

// TestWorkerAlertsUnmappedPrice: a current subscription whose price maps
// to no plan leaves the account as it was; the worker must say so loudly,
// naming the price, and hand the prices on with the outcome (metrics).
func TestWorkerAlertsUnmappedPrice(t *testing.T) {
	q := &fakeQueue{job: reconcile.Job{ID: 1, Provider: "stripe", CustomerID: "cus_1"}, due: true}
	st := q.store()
	st.ApplyFn = func(_ context.Context, _ reconcile.Job, _ time.Time, d reconcile.Decider) (reconcile.Outcome, error) {
		cur := reconcile.Account{ID: 3, Provider: "stripe", CustomerID: "cus_1", Plan: "pro", Status: "active", ObservedAt: t0}
		return d.Decide(reconcile.Locked{Account: cur}).Outcome, nil
	}
	unmapped := func(context.Context, string) (reconcile.Snapshot, error) {
		return oneSub("cus_1", "active", periodStart, periodEnd, "pro_2027", "price_2027"), nil
	}
	var logs bytes.Buffer
	var outs []reconcile.Outcome
	w := newUnitWorker(t, reconcile.WorkerConfig{Store: st, Providers: []reconcile.Provider{stripeFake(unmapped)},
		Logger:    slog.New(slog.NewTextHandler(&logs, nil)),
		OnOutcome: func(_ reconcile.Job, out reconcile.Outcome) { outs = append(outs, out) }})
	drainUntilIdle(t, w)

	require.Len(t, outs, 1)
	require.Equal(t, reconcile.ResultIgnored, outs[0].Result)
	require.Equal(t, []string{"pro_2027"}, outs[0].Unmapped)
	require.Equal(t, "ignored: price pro_2027 / price_2027 maps to no plan", outs[0].Text)
	require.Contains(t, logs.String(), `level=ERROR msg="ALERT: price maps to no plan`)
	require.Contains(t, logs.String(), "prices=[pro_2027]")
	require.Contains(t, logs.String(), "customer=cus_1")

	// A mapped price: no alert.
	logs.Reset()
	q.mu.Lock()
	q.due = true
	q.mu.Unlock()
	w = newUnitWorker(t, reconcile.WorkerConfig{Store: st, Providers: []reconcile.Provider{stripeFake(liveSnapshot)},
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	drainUntilIdle(t, w)
	require.NotContains(t, logs.String(), "ALERT")
	require.Contains(t, logs.String(), "result=applied")
}

// TestWorkerObservesAtTheFetch: a claimed job's read is observed at the
// claim's database time plus the time the job waited since (here behind
// the batch's first read), not at the claim: an event received while it
// waited is covered by the read, and the job is not fetched twice. The
// database's clock is not asked again.
func TestWorkerObservesAtTheFetch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		claimedAt := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
		st := batchOfTwo()
		claim := st.ClaimFn
		st.ClaimFn = func(ctx context.Context, id string, n int, lease time.Duration) ([]reconcile.Job, error) {
			jobs, err := claim(ctx, id, n, lease)
			for i := range jobs {
				jobs[i].ClaimedAt = claimedAt
			}
			return jobs, err
		}
		st.NowFn = func(context.Context) (time.Time, error) {
			t.Error("the database's clock was asked")
			return time.Now(), nil
		}
		observed := map[string]time.Time{}
		st.ApplyFn = func(_ context.Context, job reconcile.Job, at time.Time, _ reconcile.Decider) (reconcile.Outcome, error) {
			observed[job.CustomerID] = at
			return reconcile.Outcome{Result: reconcile.ResultApplied}, nil
		}
		fetch := func(ctx context.Context, customerID string) (reconcile.Snapshot, error) {
			time.Sleep(time.Second) // the provider's latency, on the bubble's clock
			return liveSnapshot(ctx, customerID)
		}
		w := newUnitWorker(t, reconcile.WorkerConfig{Store: st, Providers: []reconcile.Provider{stripeFake(fetch)}, Batch: 2})
		n, err := w.Drain(context.Background())
		require.NoError(t, err)
		require.Equal(t, 2, n)
		require.Equal(t, claimedAt, observed["cus_1"], "the first read began as the claim came back")
		waited := observed["cus_2"].Sub(claimedAt)
		require.LessOrEqual(t, waited, time.Second, "never later than the read began")
		require.GreaterOrEqual(t, waited, time.Second-time.Second/1000, "at most 0.1% earlier (clock skew)")
	})
}

// TestWorkerReportsItsSlots: Slots reports each provider's limit (its
// rate × latency with headroom, within the bound), the reads in flight and
// the latency they are sized by.
func TestWorkerReportsItsSlots(t *testing.T) {
	st := batchOfTwo()
	st.ApplyFn = func(context.Context, reconcile.Job, time.Time, reconcile.Decider) (reconcile.Outcome, error) {
		return reconcile.Outcome{Result: reconcile.ResultApplied}, nil
	}
	inFetch, release := make(chan struct{}), make(chan struct{})
	provider := stripeFake(func(ctx context.Context, customerID string) (reconcile.Snapshot, error) {
		inFetch <- struct{}{}
		<-release
		return liveSnapshot(ctx, customerID)
	})
	provider.BudgetFn = func() reconcile.Budget { return reconcile.Budget{Rate: 100, Latency: 300 * time.Millisecond} }
	w := newUnitWorker(t, reconcile.WorkerConfig{Store: st, Providers: []reconcile.Provider{provider}, Concurrency: 64, Batch: 2})
	want := reconcile.FetchSlots{Provider: "stripe", Limit: 39, Latency: 300 * time.Millisecond} // ⌈100 × 0.3 × 1.25⌉ + 1
	require.Equal(t, []reconcile.FetchSlots{want}, w.Slots())

	done := make(chan int)
	go func() {
		n, err := w.Drain(context.Background())
		assert.NoError(t, err)
		done <- n
	}()
	<-inFetch
	want.InFlight = 1
	require.Equal(t, []reconcile.FetchSlots{want}, w.Slots())
	release <- struct{}{}
	<-inFetch
	release <- struct{}{}
	require.Equal(t, 2, <-done)

	small := newUnitWorker(t, reconcile.WorkerConfig{Store: st, Providers: []reconcile.Provider{provider}, Concurrency: 8})
	require.Equal(t, 8, small.Slots()[0].Limit, "at most -workers")
}

// TestWorkerClaimErrFollowsTheClaims: while claims fail (a pooler that
// broke the claim's statement, a database that refuses it) the worker says
// so, as ErrStoreUnavailable for /readyz; the first claim that succeeds clears
// it.
func TestWorkerClaimErrFollowsTheClaims(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		failing, claims := true, 0
		st := batchOfTwo()
		st.ClaimFn = func(context.Context, string, int, time.Duration) ([]reconcile.Job, error) {
			mu.Lock()
			defer mu.Unlock()
			claims++
			if failing {
				return nil, errors.New(`prepared statement "stmtcache_1" already exists`)
			}
			return nil, nil
		}
		w := newUnitWorker(t, reconcile.WorkerConfig{Store: st, Providers: []reconcile.Provider{stripeFake(liveSnapshot)},
			Poll: time.Second})
		require.NoError(t, w.ClaimErr(), "no claim yet, no failure")
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); w.Run(ctx) }()
		synctest.Wait()
		err := w.ClaimErr()
		require.ErrorIs(t, err, reconcile.ErrStoreUnavailable)
		require.ErrorContains(t, err, "stmtcache_1")

		mu.Lock()
		failing = false
		mu.Unlock()
		time.Sleep(time.Second) // the bubble's clock: the next poll's claim
		synctest.Wait()
		require.NoError(t, w.ClaimErr(), "a claim that succeeds clears it")
		cancel()
		<-done
	})
}

// TestWorkerTimesTheAnswerAfterTheCommit: the events a committed apply
// answered are timed at the commit, on the claim's clock (no round trip),
// so their wait covers the fetch; a retry that answers them later is timed
// at its own commit, and a failed attempt is timed never.
func TestWorkerTimesTheAnswerAfterTheCommit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		received := time.Now().Add(-30 * time.Second)
		q := &fakeQueue{job: reconcile.Job{ID: 1, Provider: "stripe", CustomerID: "cus_1"}, due: true}
		st := q.store()
		claim := st.ClaimFn
		st.ClaimFn = func(ctx context.Context, id string, n int, lease time.Duration) ([]reconcile.Job, error) {
			jobs, err := claim(ctx, id, n, lease)
			for i := range jobs {
				jobs[i].ClaimedAt = time.Now() // the bubble's clock stands for the database's
			}
			return jobs, err
		}
		st.ApplyFn = func(context.Context, reconcile.Job, time.Time, reconcile.Decider) (reconcile.Outcome, error) {
			time.Sleep(time.Second) // the transaction
			return reconcile.Outcome{Result: reconcile.ResultApplied,
				Answered: []reconcile.Answered{{Source: reconcile.SourceWebhook, ReceivedAt: received}}}, nil
		}
		fails := 1
		fetch := func(ctx context.Context, customerID string) (reconcile.Snapshot, error) {
			time.Sleep(2 * time.Second) // the provider's latency
			if fails > 0 {
				fails--
				return reconcile.Snapshot{}, errors.New("503")
			}
			return liveSnapshot(ctx, customerID)
		}
		var outs []reconcile.Outcome
		w := newUnitWorker(t, reconcile.WorkerConfig{Store: st, Providers: []reconcile.Provider{stripeFake(fetch)},
			Backoff: threeWaits, OnOutcome: func(_ reconcile.Job, out reconcile.Outcome) { outs = append(outs, out) }})
		drainUntilIdle(t, w) // the fake makes the retry due at once
		require.Len(t, outs, 2)
		require.Equal(t, reconcile.ResultRetry, outs[0].Result)
		require.True(t, outs[0].AnsweredAt.IsZero(), "a failed attempt answers nothing")
		waited := outs[1].AnsweredAt.Sub(received)
		// 30 s before the first claim, 2 s for the failed fetch, then the
		// retry's claim, 2 s fetch and 1 s transaction: timed at its commit.
		require.LessOrEqual(t, waited, 35*time.Second)
		require.GreaterOrEqual(t, waited, 35*time.Second-5*time.Second/1000, "at most 0.1% early (clock skew)")
	})
}
