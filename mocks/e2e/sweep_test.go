package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	stripeapi "github.com/stripe/stripe-go/v82"

	stripemock "github.com/billsync/billsync/mocks/stripe"
	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/providers/stripe"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store"
	"github.com/billsync/billsync/store/storetest"
)

// listCounter counts the sweep's bulk list calls at the fake (the
// customer list; Fetch retrieves one customer at a time), and among them
// the one-customer requests Split sends to find the oldest customer.
type listCounter struct{ n, probes atomic.Int64 }

func (c *listCounter) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && r.URL.Path == "/v1/customers" {
			c.n.Add(1)
			if r.URL.Query().Get("limit") == "1" {
				c.probes.Add(1)
			}
		}
		next.ServeHTTP(w, r)
	})
}

// maxOldestProbes bounds the requests Split sends to find the oldest
// customer: it looks back from the part listed by doubling steps of the
// span listed (at least a second) until no customer is older, at most 32
// looks for any Unix time before 2038, then 7 to narrow.
const maxOldestProbes = 32 + 7

// requireListCost checks the list calls counted since the sweep in parts
// began (of a listing of pages full pages at most) against what the
// algorithm may spend whatever the schedule. How often a part is split
// off depends on how often a lister waits for one, so on load; the cost
// is bounded by the splits made:
//   - each split costs at most one page call more: the two parts' last
//     pages may both be partial where the undivided rest had one (a part
//     given away empty costs its one empty page);
//   - the oldest customer is looked for once a run (only the list itself
//     has no lower bound; both halves of its first split carry the one
//     found), in at most maxOldestProbes requests;
//   - a part splits only right after a page with more to come, once per
//     page, and the list itself not after its first: there are fewer
//     splits than full pages.
func (c *listCounter) requireListCost(t *testing.T, pages, splits int) {
	t.Helper()
	probes := int(c.probes.Load())
	listed := int(c.n.Load()) - probes
	t.Logf("%d page calls for %d pages, %d parts split off, %d requests to find the oldest customer", listed, pages, splits, probes)
	require.Less(t, splits, pages, "a split follows a full page of its own")
	require.LessOrEqual(t, listed, pages+splits, "a split costs at most one page call")
	require.LessOrEqual(t, probes, maxOldestProbes, "the oldest customer is looked for once")
}

// newSweepHarness is newHarness with list calls counted; intake false
// leaves webhooks undelivered (no intake), for tests that need none.
func newSweepHarness(t *testing.T, fakeOpts stripemock.Options, intake bool) (*harness, *listCounter) {
	t.Helper()
	counter := &listCounter{}
	h := newHarness(t, testenv.Stripe, testenv.Options{NoIntake: !intake, Wrap: counter.wrap,
		Stripe: testenv.StripeOptions{Fake: fakeOpts}})
	return h, counter
}

func (h *harness) sweeper(lister reconcile.Lister, st reconcile.SweepStore) *reconcile.Sweeper {
	h.t.Helper()
	if lister == nil {
		lister = h.Stripe.Client
	}
	if st == nil {
		st = h.Store
	}
	s, err := reconcile.NewSweeper(reconcile.SweeperConfig{Store: st, Provider: stripe.Provider, Lister: lister, Plans: h.Plans})
	require.NoError(h.t, err)
	return s
}

// sweepRun reads the newest sweep run.
func (h *harness) sweepRun() (status string, seen, changed int, errText string) {
	h.t.Helper()
	runs, err := h.Store.SweepRuns(context.Background(), 1)
	require.NoError(h.t, err)
	require.Len(h.t, runs, 1)
	return runs[0].Status, runs[0].Seen, runs[0].Healed, runs[0].Error
}

// sweepRuns counts the sweep runs by status.
func (h *harness) sweepRuns() map[string]int {
	h.t.Helper()
	runs, err := h.Store.SweepRuns(context.Background(), 1000)
	require.NoError(h.t, err)
	byStatus := map[string]int{}
	for _, r := range runs {
		byStatus[r.Status]++
	}
	return byStatus
}

// sweepApplies counts the reconcile log's entries the sweeps wrote.
func (h *harness) sweepApplies() int {
	h.t.Helper()
	return h.applies(reconcile.TriggerSweep)
}

// applies counts the reconcile log's entries of trigger.
func (h *harness) applies(trigger string) int {
	h.t.Helper()
	n := 0
	for _, l := range storetest.ReconcileLog(h.t, h.Store) {
		if l.Trigger == trigger {
			n++
		}
	}
	return n
}

// importFirst runs provider's import, its first run (serve's start runs
// it): the runs after it are sweeps, where a never-imported provider's
// sweep is its import.
func (h *harness) importFirst(provider string) {
	h.t.Helper()
	var lister reconcile.Lister
	if provider == stripe.Provider {
		lister = h.Stripe.Client
	}
	s, err := reconcile.NewSweeper(reconcile.SweeperConfig{Store: h.Store, Provider: provider, Lister: lister, Plans: h.Plans})
	require.NoError(h.t, err)
	rep, err := s.RunKind(context.Background(), reconcile.RunImport)
	require.NoError(h.t, err)
	require.Equal(h.t, reconcile.RunImport, rep.Run.Kind)
}

// wrongAccounts asks the fake (through Fetch, the per-customer truth) what
// each customer's state is, and returns the customers whose account differs
// or is missing.
func (h *harness) wrongAccounts(customers []string) map[string]bool {
	h.t.Helper()
	ctx := context.Background()
	wrong := map[string]bool{}
	for _, c := range customers {
		snap, err := h.Stripe.Client.Fetch(ctx, c)
		require.NoError(h.t, err)
		a, err := h.Store.Account(ctx, stripe.Provider, c)
		if errors.Is(err, reconcile.ErrNotFound) {
			wrong[c] = true
			continue
		}
		require.NoError(h.t, err)
		// The account is right when applying the truth to it again would
		// change nothing (a default plan's calendar month is the one it
		// was observed in).
		ch := reconcile.Decide(a, snap, h.Plans, a.ObservedAt.Add(time.Nanosecond))
		require.NotEqual(h.t, reconcile.ResultIgnored, ch.Result, ch.Outcome)
		if ch.Result != reconcile.ResultUnchanged {
			wrong[c] = true
		}
	}
	return wrong
}

func TestSweepHealsDrift(t *testing.T) {
	t.Parallel()
	h, _ := newSweepHarness(t, stripemock.Options{Faults: stripemock.Faults{DropRate: 0.2, Seed: 7}}, true)
	rng := rand.New(rand.NewPCG(7, 7))
	prices := []string{"price_pro", "price_team", "price_free"}
	const n = 500
	first := make([]string, n)
	for i := range first {
		first[i] = prices[rng.IntN(len(prices))]
	}
	customers, subs := h.subscribeMany(n, func(i int) string { return first[i] })
	h.Delivered()
	h.DrainAll(h.Worker(reconcile.WorkerConfig{}), 0)
	h.importFirst(stripe.Provider) // healing is what a sweep does once imported
	// Random plan changes and cancellations. Every fifth change loses all
	// its webhooks (a drift the test can count on), the others each
	// webhook with a 20% chance. The drop dice are thrown when an event is
	// made, so switching the knob between changes is exact.
	for i, sub := range subs {
		lost := stripemock.Faults{DropRate: 0.2, Seed: int64(i + 1)}
		if i%5 == 0 {
			lost.DropRate = 1
		}
		h.Stripe.Fake.SetFaults(lost)
		switch rng.IntN(4) {
		case 0:
			h.ChangePrice(sub, prices[rng.IntN(len(prices))])
		case 1:
			h.Cancel(sub)
		}
	}
	h.Delivered()
	h.DrainAll(h.Worker(reconcile.WorkerConfig{}), 0)
	wrong := h.wrongAccounts(customers)
	require.NotEmpty(t, wrong, "dropped webhooks leave drift for the sweep")

	rep, err := h.sweeper(nil, nil).Run(context.Background())
	require.NoError(t, err)
	require.Empty(t, h.wrongAccounts(customers), "after one sweep every account equals the provider")
	require.Equal(t, len(wrong), rep.Run.Healed, "healed exactly the accounts that were wrong")
	require.Equal(t, n, rep.Run.Seen)
	require.Len(t, rep.Healed, min(len(wrong), reconcile.MaxHealedReported))
	for _, hd := range rep.Healed {
		require.True(t, wrong[hd.CustomerID], hd.CustomerID)
		require.Contains(t, []string{reconcile.CauseNoWebhook, reconcile.CauseWebhookFailed}, hd.Cause)
	}
	status, seen, changed, _ := h.sweepRun()
	require.Equal(t, "succeeded", status)
	require.Equal(t, n, seen)
	require.Equal(t, len(wrong), changed)
	require.Equal(t, len(wrong), h.sweepApplies(), "accounts already right are not written")

	// A second sweep finds nothing to heal.
	rep, err = h.sweeper(nil, nil).Run(context.Background())
	require.NoError(t, err)
	require.Zero(t, rep.Run.Healed)
	require.Equal(t, n, rep.Run.Seen)
}

func TestSweepListsInBulk(t *testing.T) {
	t.Parallel()
	h, calls := newSweepHarness(t, stripemock.Options{}, false)
	n := 10000
	if raceEnabled {
		n = 300
	}
	h.subscribeMany(n, func(int) string { return "price_pro" })
	pages := (n + 99) / 100 // ceil(n/100)

	// One page at a time: the pages, and at most one empty page after a
	// full last one.
	calls.n.Store(0)
	s, err := reconcile.NewSweeper(reconcile.SweeperConfig{Store: h.Store, Provider: stripe.Provider, Lister: h.Stripe.Client, Parallel: 1, Plans: h.Plans})
	require.NoError(t, err)
	rep, err := s.Run(context.Background())
	require.NoError(t, err)
	require.Equal(t, n, rep.Run.Seen)
	require.Equal(t, n, rep.Run.Healed, "every account created by the sweep")
	require.LessOrEqual(t, int(calls.n.Load()), pages+1, "list calls for %d accounts, one page at a time", n)
	t.Logf("list calls for %d accounts one page at a time: %d (sweep %s)", n, calls.n.Load(), rep.Took)

	// In parts (the default): at most a page call more per part split
	// off, and a few requests to find the oldest customer.
	calls.n.Store(0)
	calls.probes.Store(0)
	l := newPartLister(h.Stripe.Client)
	rep, err = h.sweeper(l, nil).Run(context.Background())
	require.NoError(t, err)
	require.Equal(t, n, rep.Run.Seen)
	calls.requireListCost(t, pages, l.splits)
	t.Logf("list calls for %d accounts in parts: %d (sweep %s)", n, calls.n.Load(), rep.Took)
}

// subscribeMany creates n customers (user refs u0…) at the fake, each
// subscribed to price(i), from a few goroutines (setup dominates these
// tests' time), and returns them with their subscriptions.
func (h *harness) subscribeMany(n int, price func(i int) string) ([]string, []*stripeapi.Subscription) {
	h.t.Helper()
	customers, subs := make([]string, n), make([]*stripeapi.Subscription, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	const workers = 8
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				ctx := context.Background()
				if customers[i], errs[i] = h.Stripe.Customer(ctx, fmt.Sprint("u", i)); errs[i] == nil {
					subs[i], errs[i] = h.Stripe.Subscribe(ctx, customers[i], price(i))
				}
			}
		}()
	}
	wg.Wait()
	require.NoError(h.t, errors.Join(errs...))
	return customers, subs
}

// listerFunc adapts a function to reconcile.Lister (not a Splitter: its
// sweep lists one page at a time).
type listerFunc func(ctx context.Context, cursor string) ([]reconcile.Snapshot, string, bool, error)

func (f listerFunc) ListPage(ctx context.Context, cursor string) ([]reconcile.Snapshot, string, bool, error) {
	return f(ctx, cursor)
}

func TestSweepFailsWhileProviderDownThenSucceeds(t *testing.T) {
	t.Parallel()
	h, _ := newSweepHarness(t, stripemock.Options{}, false)
	cus := h.Customer("u1")
	h.Subscribe(cus, "price_team")
	f := h.Stripe.Fake.Faults()
	f.Error5xxRate = 1
	h.Stripe.Fake.SetFaults(f)
	_, err := h.sweeper(nil, nil).Run(context.Background())
	require.Error(t, err)
	status, _, _, text := h.sweepRun()
	require.Equal(t, "failed", status)
	require.Contains(t, text, "500")
	_, err = h.Store.Account(context.Background(), stripe.Provider, cus)
	require.ErrorIs(t, err, reconcile.ErrNotFound)

	f.Error5xxRate = 0
	h.Stripe.Fake.SetFaults(f)
	rep, err := h.sweeper(nil, nil).Run(context.Background())
	require.NoError(t, err)
	require.False(t, rep.Run.Resumed, "a failed run is finished, not resumed")
	require.Equal(t, 1, rep.Run.Healed)
	status, _, _, text = h.sweepRun()
	require.Equal(t, "succeeded", status)
	require.Empty(t, text)
	require.Equal(t, "team", h.state(cus).Plan)
}

// crashingStore is the real store whose FinishSweep does nothing, as a
// sweeper that dies before it can record the end of its run.
type crashingStore struct{ *store.Store }

func (crashingStore) FinishSweep(context.Context, reconcile.SweepRun, error) error { return nil }

func TestSweepResumesFromCursor(t *testing.T) {
	t.Parallel()
	h, calls := newSweepHarness(t, stripemock.Options{}, false)
	const n = 250 // three pages
	customers, _ := h.subscribeMany(n, func(int) string { return "price_pro" })
	crash := errors.New("killed")
	pages := 0
	dying := listerFunc(func(ctx context.Context, cursor string) ([]reconcile.Snapshot, string, bool, error) {
		if pages++; pages == 3 {
			return nil, "", false, crash // after two pages were handed over
		}
		return h.Stripe.Client.ListPage(ctx, cursor)
	})
	calls.n.Store(0)
	_, err := h.sweeper(dying, crashingStore{h.Store}).Run(context.Background())
	require.ErrorIs(t, err, crash)
	require.EqualValues(t, 2, calls.n.Load())
	status, seen, _, _ := h.sweepRun()
	require.Equal(t, "running", status, "the dead sweeper left its run running")
	require.Equal(t, 200, seen)

	calls.n.Store(0)
	rep, err := h.sweeper(nil, nil).Run(context.Background())
	require.NoError(t, err)
	require.True(t, rep.Run.Resumed)
	require.EqualValues(t, 1, calls.n.Load(), "only the page not finished is listed again")
	require.Equal(t, n, rep.Run.Seen)
	require.Equal(t, n, rep.Run.Healed)
	require.Zero(t, rep.Enqueued, "every account was covered, before or after the crash")
	require.Empty(t, h.wrongAccounts(customers))
	require.Equal(t, map[string]int{"succeeded": 1}, h.sweepRuns(), "the run was resumed, not started again")
}

// dyingStore is the real store whose sweeper dies during one
// ApplySweptPage: the accounts applied before it are committed (the page's
// first ones, as an earlier sweeper would have left them), nothing after
// it runs, and the end of the run is never recorded.
type dyingStore struct {
	crashingStore
	left atomic.Int64 // accounts applied before the crash
}

var errKilled = errors.New("killed")

func (s *dyingStore) ApplySweptPage(ctx context.Context, jobs []reconcile.Job, at time.Time, ds []reconcile.Decider) ([]reconcile.SweptOutcome, error) {
	left := s.left.Add(-int64(len(jobs))) + int64(len(jobs))
	if left >= int64(len(jobs)) {
		return s.Store.ApplySweptPage(ctx, jobs, at, ds)
	}
	if left > 0 {
		if _, err := s.Store.ApplySweptPage(ctx, jobs[:left], at, ds[:left]); err != nil {
			return nil, err
		}
	}
	return nil, errKilled
}

// TestSweepKilledMidPageResumes: a sweeper killed half way through applying
// a page leaves that page to the next sweep, which applies every customer
// of it that was not applied, not only those it had not met.
func TestSweepKilledMidPageResumes(t *testing.T) {
	t.Parallel()
	h, _ := newSweepHarness(t, stripemock.Options{}, false)
	customers, _ := h.subscribeMany(150, func(int) string { return "price_team" }) // two pages, all new to billsync
	st := &dyingStore{crashingStore: crashingStore{h.Store}}
	st.left.Store(130) // the first page, then 30 of the second
	_, err := h.sweeper(nil, st).Run(context.Background())
	require.ErrorIs(t, err, errKilled)
	status, seen, changed, _ := h.sweepRun()
	require.Equal(t, "running", status)
	require.Equal(t, 100, seen, "only the finished page is recorded")
	require.Equal(t, 100, changed)
	require.Len(t, h.wrongAccounts(customers), 20)

	rep, err := h.sweeper(nil, nil).Run(context.Background())
	require.NoError(t, err)
	require.True(t, rep.Run.Resumed)
	require.Equal(t, 150, rep.Run.Seen, "each customer counted once")
	require.Empty(t, h.wrongAccounts(customers))
	status, seen, _, _ = h.sweepRun()
	require.Equal(t, "succeeded", status)
	require.Equal(t, 150, seen)
}

func TestSweepNeverOverwritesAFresherReconcile(t *testing.T) {
	t.Parallel()
	h, _ := newSweepHarness(t, stripemock.Options{}, true)
	cus := h.Customer("u1")
	sub := h.Subscribe(cus, "price_pro")
	h.Delivered()
	w := h.Worker(reconcile.WorkerConfig{})
	h.DrainAll(w, 0)
	require.Equal(t, "pro", h.state(cus).Plan)

	// The page is listed (pro); before the sweep applies it, the customer
	// upgrades and the webhook-triggered reconcile applies team.
	racing := listerFunc(func(ctx context.Context, cursor string) ([]reconcile.Snapshot, string, bool, error) {
		snaps, next, more, err := h.Stripe.Client.ListPage(ctx, cursor)
		if len(snaps) > 0 {
			require.Equal(t, "pro", snaps[0].Subscriptions[0].Items[0].PriceRefs[0])
			h.ChangePrice(sub, "price_team")
			h.Delivered()
			h.DrainAll(w, 0)
			require.Equal(t, "team", h.state(cus).Plan)
		}
		return snaps, next, more, err
	})
	rep, err := h.sweeper(racing, nil).Run(context.Background())
	require.NoError(t, err)
	require.Equal(t, 1, rep.Run.Seen)
	require.Zero(t, rep.Run.Healed)
	st := h.state(cus)
	require.Equal(t, "team", st.Plan, "the sweep's older page lost to the fresher reconcile")
	require.Equal(t, h.largestGrant(cus), st.Balance)
	require.Equal(t, 2, st.Grants, "pro, then the top-up to team; nothing from the sweep")
}

func TestSweepOneAtATime(t *testing.T) {
	t.Parallel()
	h, _ := newSweepHarness(t, stripemock.Options{}, false)
	h.Subscribe(h.Customer("u1"), "price_pro")
	// A second store is a second replica: its own pool on the same database.
	other, err := store.Open(context.Background(), h.dbURL, store.Options{})
	require.NoError(t, err)
	t.Cleanup(other.Close)

	inside, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	blocking := listerFunc(func(ctx context.Context, cursor string) ([]reconcile.Snapshot, string, bool, error) {
		once.Do(func() {
			close(inside)
			<-release
		})
		return h.Stripe.Client.ListPage(ctx, cursor)
	})
	done := make(chan error, 1)
	go func() {
		_, err := h.sweeper(blocking, nil).Run(context.Background())
		done <- err
	}()
	<-inside
	_, err = h.sweeper(nil, other).Run(context.Background())
	require.ErrorIs(t, err, reconcile.ErrSweepRunning)
	close(release)
	require.NoError(t, <-done)

	// The lock went with the first run: the other replica sweeps now.
	rep, err := h.sweeper(nil, other).Run(context.Background())
	require.NoError(t, err)
	require.Equal(t, 1, rep.Run.Seen)
	require.Equal(t, 2, h.sweepRuns()["succeeded"])
}

// TestSweepEnqueuesWhatTheListingDidNotCover: a deleted customer is not
// in Stripe's customer list, so its account is queued for the worker,
// whose fetch sees the deletion and drops it to the default plan; a dead
// queue row is revived.
func TestSweepEnqueuesWhatTheListingDidNotCover(t *testing.T) {
	t.Parallel()
	h, _ := newSweepHarness(t, stripemock.Options{}, false)
	ctx := context.Background()
	gone := h.Customer("u_gone")
	h.Subscribe(gone, "price_team")
	listed := h.Customer("u_listed")
	h.Subscribe(listed, "price_pro")
	for _, c := range []string{gone, listed} {
		require.NoError(t, h.Store.Enqueue(ctx, stripe.Provider, c, reconcile.TriggerWebhook))
	}
	h.DrainAll(h.Worker(reconcile.WorkerConfig{}), 0)
	require.Equal(t, "team", h.state(gone).Plan)
	h.importFirst(stripe.Provider)                            // what a sweep queues, once imported
	_, err := h.Stripe.API.V1Customers.Delete(ctx, gone, nil) // its webhooks are never delivered: no intake
	require.NoError(t, err)
	// One more customer whose queue row is dead.
	dead := h.Customer("u_dead")
	require.NoError(t, h.Store.Enqueue(ctx, stripe.Provider, dead, reconcile.TriggerWebhook))
	storetest.SetQueueDead(t, h.Store, stripe.Provider, dead, 5, "")

	rep, err := h.sweeper(nil, nil).Run(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, rep.Run.Seen, "the listed customer and the one with the dead row")
	got := map[string]string{}
	for _, q := range storetest.Queue(t, h.Store) {
		got[q.CustomerID] = fmt.Sprint(q.Trigger, " ", q.Status, " ", q.Attempts)
	}
	require.Equal(t, map[string]string{gone: "sweep pending 0", dead: "sweep pending 0"}, got)
	require.Equal(t, 2, rep.Enqueued)

	h.DrainAll(h.Worker(reconcile.WorkerConfig{}), 0)
	a := h.state(gone)
	require.Equal(t, "free", a.Plan, "a deleted customer falls to the default plan")
	require.Equal(t, "deleted", a.Status)
}

func TestSweepInterruptedResumes(t *testing.T) {
	t.Parallel()
	h, calls := newSweepHarness(t, stripemock.Options{}, false)
	customers, _ := h.subscribeMany(150, func(int) string { return "price_team" })
	ctx, cancel := context.WithCancel(context.Background())
	listed := 0
	stopping := listerFunc(func(ctx context.Context, cursor string) ([]reconcile.Snapshot, string, bool, error) {
		if listed++; listed == 2 {
			cancel() // SIGTERM once the first page is handed over
			return nil, "", false, ctx.Err()
		}
		return h.Stripe.Client.ListPage(ctx, cursor)
	})
	calls.n.Store(0)
	_, err := h.sweeper(stopping, nil).Run(ctx)
	require.ErrorIs(t, err, context.Canceled)
	status, seen, _, _ := h.sweepRun()
	require.Equal(t, "running", status, "stopped, not failed: left for the next sweep to resume")
	require.Equal(t, 100, seen)

	rep, err := h.sweeper(nil, nil).Run(context.Background())
	require.NoError(t, err)
	require.True(t, rep.Run.Resumed)
	require.EqualValues(t, 2, calls.n.Load(), "the first page once, then the second")
	require.Equal(t, 150, rep.Run.Seen)
	require.Empty(t, h.wrongAccounts(customers))
}

// TestSweepRestoresALostGrant: an account whose state is right but whose
// period's grant is missing (a crash between writes, a bad manual fix) is
// not "already right": the sweep grants it, and only it.
func TestSweepRestoresALostGrant(t *testing.T) {
	t.Parallel()
	h, _ := newSweepHarness(t, stripemock.Options{}, false)
	customers, _ := h.subscribeMany(3, func(int) string { return "price_pro" })
	ctx := context.Background()
	_, err := h.sweeper(nil, nil).Run(ctx)
	require.NoError(t, err)
	lost, err := h.Store.Account(ctx, stripe.Provider, customers[0])
	require.NoError(t, err)
	storetest.LoseLedger(t, h.Store, lost.ID)

	rep, err := h.sweeper(nil, nil).Run(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, rep.Run.Healed)
	require.Len(t, rep.Healed, 1)
	require.Equal(t, customers[0], rep.Healed[0].CustomerID)
	for _, c := range customers {
		a, err := h.Store.Account(ctx, stripe.Provider, c)
		require.NoError(t, err)
		balance, err := h.Store.Balance(ctx, a.ID)
		require.NoError(t, err)
		require.EqualValues(t, 500, balance, c)
	}
}

// TestSweepWithoutAListerQueuesEveryAccountPaced: a provider with no bulk
// listing (Kinde) is swept by queueing each of its accounts for the worker,
// due one Pace after another, so the sweep's fetches keep to a budget and
// webhook-triggered work, due now, goes first. Other providers' accounts
// are left alone.
func TestSweepWithoutAListerQueuesEveryAccountPaced(t *testing.T) {
	t.Parallel()
	h, _ := newSweepHarness(t, stripemock.Options{}, false)
	ctx := context.Background()
	h.importFirst("kinde") // no account yet: queues nothing
	for _, c := range []string{"kinde_a", "kinde_b", "kinde_c"} {
		storetest.BareAccount(t, h.Store, "kinde", c)
	}
	storetest.BareAccount(t, h.Store, "stripe", "cus_other")
	s, err := reconcile.NewSweeper(reconcile.SweeperConfig{Store: h.Store, Provider: "kinde", Plans: h.Plans, Pace: time.Minute})
	require.NoError(t, err)
	rep, err := s.Run(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, rep.Enqueued)
	status, _, _, _ := h.sweepRun()
	require.Equal(t, "succeeded", status)

	var got []string
	for _, q := range storetest.Queue(t, h.Store) {
		got = append(got, fmt.Sprintf("%s %s +%.0fm", q.CustomerID, q.Trigger, math.Round(q.Delay().Minutes())))
	}
	require.Equal(t, []string{"kinde_a sweep +0m", "kinde_b sweep +1m", "kinde_c sweep +2m"}, got)
}

// TestSweepObservesTheFreshnessOfWhatItAnswers: webhooks no worker
// reconciled are answered by the sweep's page; the sweeper hands each to
// OnAnswered (the freshness SLI) with its source and receipt time, and the
// commit's database time, no earlier than any receipt.
func TestSweepObservesTheFreshnessOfWhatItAnswers(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testenv.Stripe, testenv.Options{})
	cus := h.Customer("u_fresh")
	h.Subscribe(cus, "price_pro")
	h.Delivered() // stored, never reconciled: no worker runs
	var got []reconcile.Answered
	var at time.Time
	s, err := reconcile.NewSweeper(reconcile.SweeperConfig{Store: h.Store, Provider: stripe.Provider, Lister: h.Stripe.Client,
		Parallel: 1, Plans: h.Plans, OnAnswered: func(provider string, answered []reconcile.Answered, when time.Time) {
			require.Equal(t, stripe.Provider, provider)
			got, at = append(got, answered...), when
		}})
	require.NoError(t, err)
	_, err = s.Run(context.Background())
	require.NoError(t, err)
	events := storetest.Events(t, h.Store)
	require.NotEmpty(t, events)
	require.Len(t, got, len(events), "each stored event observed once")
	for _, a := range got {
		require.Equal(t, reconcile.SourceWebhook, a.Source)
		require.False(t, at.Before(a.ReceivedAt), "answered after it was received")
	}
}
