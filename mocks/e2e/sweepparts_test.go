package e2e_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	stripeapi "github.com/stripe/stripe-go/v82"

	stripemock "github.com/billsync/billsync/mocks/stripe"
	"github.com/billsync/billsync/providers/stripe"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store/storetest"
)

// partLister is the Stripe client's listing, split into parts as the
// client splits it (Split is the client's), with each listed customer
// counted, the list requests in flight at once measured, the parts split
// off counted, and a hook that can fail a call or act once its page is
// read.
//
// Whether two parts' requests overlap in time is the scheduler's choice,
// so once a part has been split off, a request that starts alone is held
// until a second one starts (the part split off is listed by another
// lister at once, if the sweeper lists parts in parallel) or overlapWait
// passes (a sweeper that lists one part at a time then fails the test's
// maxInFlight check instead of hanging; no request is held after that).
type partLister struct {
	*stripe.Client
	fail func(call int) error             // before the call; nil: none
	read func(snaps []reconcile.Snapshot) // after the call; nil: none

	mu                    sync.Mutex
	calls                 int
	listed                map[string]int
	inFlight, maxInFlight int
	splits                int           // parts split off (Split gave a part)
	released              chan struct{} // closed once two requests were in flight at once, or one waited in vain
}

// overlapWait bounds how long a request waits for a second one: a
// liveness guard for a broken sweeper, never reached by a working one.
const overlapWait = 30 * time.Second

func newPartLister(c *stripe.Client) *partLister {
	return &partLister{Client: c, listed: map[string]int{}, released: make(chan struct{})}
}

// release ends the holding of requests; l.mu is held.
func (l *partLister) release() {
	select {
	case <-l.released:
	default:
		close(l.released)
	}
}

func (l *partLister) Split(ctx context.Context, next string) (kept, given string, err error) {
	kept, given, err = l.Client.Split(ctx, next)
	if given != "" {
		l.mu.Lock()
		l.splits++
		l.mu.Unlock()
	}
	return kept, given, err
}

func (l *partLister) ListPage(ctx context.Context, cursor string) ([]reconcile.Snapshot, string, bool, error) {
	l.mu.Lock()
	l.calls++
	call := l.calls
	l.inFlight++
	l.maxInFlight = max(l.maxInFlight, l.inFlight)
	hold := l.splits > 0 && l.inFlight == 1
	if l.inFlight == 2 {
		l.release()
	}
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.inFlight--
		l.mu.Unlock()
	}()
	if hold {
		select {
		case <-l.released:
		case <-time.After(overlapWait):
			l.mu.Lock()
			l.release()
			l.mu.Unlock()
		case <-ctx.Done():
			return nil, "", false, context.Cause(ctx)
		}
	}
	if l.fail != nil {
		if err := l.fail(call); err != nil {
			return nil, "", false, err
		}
	}
	snaps, next, more, err := l.Client.ListPage(ctx, cursor)
	l.mu.Lock()
	for _, s := range snaps {
		l.listed[s.CustomerID]++
	}
	l.mu.Unlock()
	if l.read != nil {
		l.read(snaps)
	}
	return snaps, next, more, err
}

// newSpreadHarness is a sweep harness whose fake's clock moves only when
// told, and n customers on pro created minutes apart over the past day
// (parts of the list are ranges of creation seconds, so customers created
// in one burst could not be split).
func newSpreadHarness(t *testing.T, n int, intake bool) (*harness, *listCounter, []string, []*stripeapi.Subscription) {
	t.Helper()
	clock := stripemock.NewStoppedClock(time.Now().Add(-24 * time.Hour).Truncate(time.Second))
	h, calls := newSweepHarness(t, stripemock.Options{Clock: clock}, intake)
	customers, subs := make([]string, n), make([]*stripeapi.Subscription, n)
	for i := range n {
		customers[i] = h.Customer(fmt.Sprint("u", i))
		subs[i] = h.Subscribe(customers[i], "price_pro")
		clock.Advance(time.Duration(1+i%3) * time.Minute)
	}
	return h, calls, customers, subs
}

// TestSweepListsInParts: with the client's splitting, the sweep lists
// parts of the customer list at once and still resolves each customer
// exactly once, for a few list calls more than one page at a time.
func TestSweepListsInParts(t *testing.T) {
	t.Parallel()
	const n = 700
	h, calls, customers, _ := newSpreadHarness(t, n, false)
	l := newPartLister(h.Stripe.Client)
	calls.n.Store(0)
	calls.probes.Store(0)
	rep, err := h.sweeper(l, nil).Run(context.Background())
	require.NoError(t, err)
	require.Equal(t, n, rep.Run.Seen)
	require.Equal(t, reconcile.RunImport, rep.Run.Kind, "never imported: the sweep is the import")
	require.Equal(t, n, rep.Run.Healed, "every account created by the sweep")
	require.Len(t, l.listed, n)
	for c, times := range l.listed {
		require.Equal(t, 1, times, "%s listed once", c)
	}
	require.Greater(t, l.maxInFlight, 1, "parts were listed at once")
	require.Empty(t, h.wrongAccounts(customers))
	pages := (n + 99) / 100
	t.Logf("%d list calls for %d pages (%d pages listed, up to %d at once)", calls.n.Load(), pages, rep.Calls, l.maxInFlight)
	calls.requireListCost(t, pages, l.splits)
	require.Equal(t, n, h.applies(reconcile.TriggerImport), "one apply per customer")
}

// TestSweepInPartsKilledResumes: a sweeper killed with several parts under
// way leaves each at its last applied page; the next one resumes every
// part there, lists no page that was recorded, and misses no customer.
func TestSweepInPartsKilledResumes(t *testing.T) {
	t.Parallel()
	const n = 900
	h, _, customers, _ := newSpreadHarness(t, n, false)
	ctx := context.Background()
	dying := newPartLister(h.Stripe.Client)
	dying.fail = func(call int) error {
		if call > 6 {
			return errKilled
		}
		return nil
	}
	_, err := h.sweeper(dying, crashingStore{h.Store}).Run(ctx)
	require.ErrorIs(t, err, errKilled)
	runs, err := h.Store.SweepRuns(ctx, 10)
	require.NoError(t, err)
	require.Len(t, runs, 1)
	require.Equal(t, "running", runs[0].Status)
	cursor, seen := storetest.SweepProgress(t, h.Store, runs[0].ID)
	require.Contains(t, cursor, "\n", "several parts were under way")
	recorded := map[string]bool{}
	for _, c := range seen {
		recorded[c] = true
	}
	require.NotEmpty(t, recorded)

	resumed := newPartLister(h.Stripe.Client)
	rep, err := h.sweeper(resumed, nil).Run(ctx)
	require.NoError(t, err)
	require.True(t, rep.Run.Resumed)
	require.Equal(t, n, rep.Run.Seen, "each customer counted once")
	for c := range resumed.listed {
		require.False(t, recorded[c], "%s was on a page recorded before the crash, and was listed again", c)
	}
	require.Len(t, resumed.listed, n-len(recorded), "every customer not recorded is listed")
	require.Empty(t, h.wrongAccounts(customers))
	t.Logf("killed with %d parts under way and %d customers recorded; the resumed run listed %d in %d pages",
		strings.Count(cursor, "\n")+1, len(recorded), len(resumed.listed), rep.Calls)
}

// TestSweepInPartsNeverOverwritesAFresherReconcile: the page a part lists
// is applied with the time taken before its own request, whatever the
// other parts do meanwhile, so a webhook-triggered reconcile that lands
// between the request and the apply wins.
func TestSweepInPartsNeverOverwritesAFresherReconcile(t *testing.T) {
	t.Parallel()
	const n = 600
	h, _, customers, subs := newSpreadHarness(t, n, true)
	h.Delivered()
	w := h.Worker(reconcile.WorkerConfig{})
	h.DrainAll(w, 0)
	target, sub := customers[n/3], subs[n/3]
	require.Equal(t, "pro", h.state(target).Plan)

	l := newPartLister(h.Stripe.Client)
	var once sync.Once
	l.read = func(snaps []reconcile.Snapshot) {
		for _, s := range snaps {
			if s.CustomerID != target {
				continue
			}
			once.Do(func() {
				require.Equal(t, "pro", s.Subscriptions[0].Items[0].PriceRefs[0])
				h.ChangePrice(sub, "price_team")
				h.Delivered()
				h.DrainAll(w, 0)
				require.Equal(t, "team", h.state(target).Plan)
			})
		}
	}
	rep, err := h.sweeper(l, nil).Run(context.Background())
	require.NoError(t, err)
	require.Greater(t, l.maxInFlight, 1, "parts were listed at once")
	require.Zero(t, rep.Run.Healed)
	st := h.state(target)
	require.Equal(t, "team", st.Plan, "the sweep's older page lost to the fresher reconcile")
	require.Equal(t, h.largestGrant(target), st.Balance)
	require.Equal(t, 2, st.Grants, "pro, then the top-up to team; nothing from the sweep")
}
