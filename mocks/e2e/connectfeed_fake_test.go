package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/app"
	stripemock "github.com/billsync/billsync/mocks/stripe"
	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/providers/stripe"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store/storetest"
	"github.com/billsync/billsync/store/storetest/tb"
)

// feedPolls records, from outside billsync, the connected accounts'
// polls the fake Stripe answered: each first page of an account's events
// list (no starting_after) answered 200, in the order the answers went
// out, with the time; and when each 429 went out.
type feedPolls struct {
	mu      sync.Mutex
	order   []string
	answers []time.Time // order's times
	at      map[string][]time.Time
	limited map[string][]time.Time // by account, its 429s
}

func (p *feedPolls) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		account := r.Header.Get("Stripe-Account")
		if r.Method != http.MethodGet || r.URL.Path != "/v1/events" || account == "" {
			next.ServeHTTP(w, r)
			return
		}
		status := testenv.AnswerStatus(next, w, r)
		now := time.Now()
		p.mu.Lock()
		defer p.mu.Unlock()
		switch {
		case status == http.StatusTooManyRequests:
			p.limited[account] = append(p.limited[account], now)
		case status == http.StatusOK && !r.URL.Query().Has("starting_after"):
			p.order = append(p.order, account)
			p.answers = append(p.answers, now)
			p.at[account] = append(p.at[account], now)
		}
	})
}

// polledAtLeast reports how many of accounts the fake answered n polls or
// more.
func (p *feedPolls) polledAtLeast(n int, accounts []string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := 0
	for _, a := range accounts {
		if len(p.at[a]) >= n {
			k++
		}
	}
	return k
}

// pollsBetween is how many polls the fake answered from from to to.
func (p *feedPolls) pollsBetween(from, to time.Time) int {
	n := 0
	for _, at := range p.answers {
		if !at.Before(from) && !at.After(to) {
			n++
		}
	}
	return n
}

// TestConnectFeedThousandAccountsAtTheFake: 1,000 healthy connected
// accounts and three troubled ones at the fake Stripe, which enforces a
// global limit, a per-operation limit and a limit per connected account,
// polled by billsync assembled as serve assembles it (app.New: the Stripe
// client serve builds with its limiters, the Connect feed's default pool,
// a Round from the read budget). Seen from the fake and from the store:
// every served account's feed is polled, the first round in the Round
// billsync reports plus the pool's drain time, and each account again
// within that of its previous poll; no account is polled twice before
// every account was polled once; the only 429s are the hot account's, a
// few retries before it is backed off alone; and the event whose webhook
// the hot account lost is caught by its feed.
func TestConnectFeedThousandAccountsAtTheFake(t *testing.T) {
	const (
		healthy = 1000
		// The troubled accounts sort before the healthy ones (acct_1…):
		// of the accounts never polled, the first polled, so their
		// troubles come at the start of each round.
		hot     = "acct_0hot"     // its own limit is spent: past its first request, every one answers 429
		slow    = "acct_0slow"    // each of its requests takes a second
		failing = "acct_0failing" // every request of it answers 500
		latency = 20 * time.Millisecond
		// The rates billsync's client keeps (serve's -stripe-rate and
		// -stripe-operation-rate) and the fake enforces: the same, so a
		// client that keeps to its limiters is never refused. Stripe's
		// 25 a second for the events list would make a round of 1,000
		// accounts last 40 s; 60 keeps well below what a loaded machine
		// polls under -race. The global rate is near the events list's,
		// as a live account's 100 is near its 25 × the few operations
		// it reads: a 429 that slowed the global rate would slow every
		// poll.
		globalRate, operationRate = 72, 60
		// Each account's own limit at the fake: an account polled once a
		// Round (seconds) never comes near it.
		perAccount = 5
	)
	ctx := context.Background()
	setup := time.Now()
	st := storetest.NewStore(t)
	polls := &feedPolls{at: map[string][]time.Time{}, limited: map[string][]time.Time{}}
	h := testenv.ForTest(t, testenv.Stripe, testenv.Options{Store: st, Wrap: polls.wrap,
		Stripe: testenv.StripeOptions{Connect: reconcile.ConnectPolicy{Mode: reconcile.ConnectAll}}})
	fake := h.Stripe.Fake
	billsyncKey := stripemock.DefaultAPIKey

	var accounts []string // the healthy ones
	for i := range healthy {
		a := fmt.Sprintf("acct_1%05d", i)
		h.ConnectedAccount(a)
		accounts = append(accounts, a)
	}
	for _, a := range []string{hot, slow, failing} {
		h.ConnectedAccount(a)
	}
	// The hot account loses its webhooks: its subscription's events reach
	// billsync by its feed alone.
	require.NoError(t, fake.Account(hot).SetFaults(stripemock.Faults{DropRate: 1}))
	lost := h.ConnectedCustomer(hot, "cus_lost", "user_lost")
	h.ConnectedSubscribe(hot, "cus_lost", "price_pro")
	require.NoError(t, fake.Account(slow).SetFaults(stripemock.Faults{Latency: time.Second}))
	require.NoError(t, fake.Account(failing).SetFaults(stripemock.Faults{Error5xxRate: 1}))
	h.Delivered()
	// Only billsync's key is limited and slowed: the test's driver seeds
	// as fast as it likes.
	h.SetFaults(stripemock.Faults{Latency: latency, TargetKey: billsyncKey})
	require.NoError(t, fake.SetLimits(stripemock.Limits{Global: globalRate, PerOperation: operationRate,
		PerAccount: perAccount, Accounts: map[string]float64{hot: 0.001}, TargetKey: billsyncKey}))
	fake.ResetUsage()

	// serve -stripe-connect all -events-poll 1s, its Stripe client on the
	// fake; a platform whose read allocation pays for a Round of 15 s over
	// these accounts (a quarter of it: the feeds' share), shorter than
	// the pool's drain: the pool never rests, and the order it takes the
	// accounts in decides which wait.
	cfg := app.Config{StripeAPIKey: billsyncKey, StripeAPIURL: h.URL, StripeRateLimit: globalRate,
		StripeOperationRate: operationRate, StripeReadAllocation: 7e8, StripeConnectReadAllocation: 7e8, EventsPoll: time.Second,
		StripeConnect: reconcile.ConnectPolicy{Mode: reconcile.ConnectAll}}
	client, err := app.NewStripeClient(cfg, h.Plans, nil, nil)
	require.NoError(t, err)
	a, err := app.New(ctx, cfg, app.Parts{Store: st, Plans: h.Plans, Stripe: client})
	require.NoError(t, err)
	global, ops := client.Rates()
	// The pace the pool can poll at: the events list's rate, the global
	// one, or its polls in flight at the fake's latency, the lowest.
	pace := min(global, ops["GET /v1/events"], float64(reconcile.DefaultConnectPool)/latency.Seconds())
	feed := a.ConnectFeed()
	require.NotNil(t, feed)

	t.Logf("set up in %s", time.Since(setup).Round(time.Millisecond))
	runCtx, cancel := context.WithCancel(ctx)
	began := time.Now()
	stop := a.Start(runCtx)
	defer func() { cancel(); require.NoError(t, stop(context.Background())) }()

	polled := append([]string{hot, slow}, accounts...) // every account whose polls can succeed
	tb.WaitFor(t, "every account polled once", func() bool { return polls.polledAtLeast(1, polled) == len(polled) })
	view := feed.View()
	served := healthy + 3
	require.Equal(t, served, view.Served)
	// The promise: an account is polled within a Round of its last poll,
	// plus the time the pool takes to get through the accounts due before
	// it (all of them, at most: a drain of every account at its pace).
	drain := time.Duration(float64(served) / pace * float64(time.Second))
	promise := view.Round + drain
	require.Less(t, view.Round, drain, "a Round the pool outpaces: the pool would rest, and the order go unseen")
	// The first quarter of the first round, polled again: an order that
	// let any account wait for others polled since would keep some of
	// them waiting.
	var early []string
	polls.mu.Lock()
	for _, a := range polls.order[:len(polled)/4] {
		if a != hot {
			early = append(early, a)
		}
	}
	polls.mu.Unlock()
	tb.WaitUpTo(t, 2*promise, "the first round's first quarter polled again, the hot account's second poll failed", func() bool {
		return polls.polledAtLeast(2, early) == len(early) && storetest.ConnectedFeeds(t, st, stripe.Provider)[hot].Failures > 0
	})
	cancel()
	require.NoError(t, stop(context.Background()))

	polls.mu.Lock()
	defer polls.mu.Unlock()
	var worstFirst, worstAgain time.Duration
	for _, a := range polled {
		at := polls.at[a]
		worstFirst = max(worstFirst, at[0].Sub(began))
		require.WithinDuration(t, began, at[0], promise, "%s's first poll, after a Round of %s and a drain of %s", a, view.Round, drain)
		if len(at) > 1 {
			worstAgain = max(worstAgain, at[1].Sub(at[0]))
			require.LessOrEqual(t, at[1].Sub(at[0]), promise, "%s polled again %s after its first poll (Round %s, drain %s)",
				a, at[1].Sub(at[0]), view.Round, drain)
		}
	}
	// The hot account's 429s slowed it alone: while its poll was refused
	// and retried, the other accounts were polled at the pace of the run
	// (half of it at least: a loaded machine varies). A 429 that slowed
	// the platform's global rate instead would have halved it at each
	// retry, to a few polls a second.
	refused := polls.limited[hot]
	require.GreaterOrEqual(t, len(refused), 2, "the hot account's poll was not retried")
	window := refused[len(refused)-1].Sub(refused[0])
	runPace := float64(len(polls.answers)) / polls.answers[len(polls.answers)-1].Sub(polls.answers[0]).Seconds()
	during := polls.pollsBetween(refused[0], refused[len(refused)-1])
	require.GreaterOrEqual(t, float64(during), runPace*window.Seconds()/2,
		"%d polls in the %s the hot account's %d 429s took, at a run's pace of %.0f a second", during, window, len(refused), runPace)
	seen := map[string]bool{}
	for i, a := range polls.order {
		if seen[a] {
			// A poll may answer a few places out of order (the pool's
			// polls race to the fake, the slow account answers a second
			// late), never a round early.
			require.GreaterOrEqual(t, i, len(polled)-reconcile.DefaultConnectPool, "%s polled a second time before every account was polled once", a)
			break
		}
		seen[a] = true
	}

	// The store's side: every served account's feed row, polled, the two
	// accounts whose polls fail backed off alone.
	rows := storetest.ConnectedFeeds(t, st, stripe.Provider)
	require.Len(t, rows, served)
	for _, a := range polled {
		require.GreaterOrEqual(t, rows[a].Polls, int64(1), "%s's feed row", a)
	}
	for _, a := range accounts {
		require.Zero(t, rows[a].Failures, "%s failed a poll", a)
	}
	require.Zero(t, rows[failing].Polls)
	require.GreaterOrEqual(t, rows[failing].Failures, 1)
	require.NotNil(t, rows[failing].RetryAt, "the failing account is not backed off")
	require.GreaterOrEqual(t, rows[hot].Failures, 1, "the hot account's second poll did not fail")
	require.NotNil(t, rows[hot].RetryAt, "the hot account is not backed off")

	// No 429 storm. The client's global and per-operation rates are the
	// fake's, and a healthy account is polled at most once a Round (a
	// second or more) against its own 5 a second: none of their requests
	// may be refused. The hot account's own limit is spent, so each poll
	// of it answers 429 once and once per retry (the client's default 4)
	// before the poll fails and the account is backed off: at most
	// 5 × its failed polls. A limiter that did not keep to the fake's
	// limits is a storm: with the events list's limit at the fake half
	// the client's, the fake refused 123 polls of healthy accounts (of
	// 1,315), the client's slowing after each notwithstanding.
	const attempts = 1 + 4
	usage, hotUsage := fake.KeyUsage(billsyncKey), fake.Account(hot).Usage()
	require.Equal(t, usage.RateLimited, hotUsage.RateLimited, "requests refused beyond the hot account's: %+v", usage.Operations)
	require.LessOrEqual(t, hotUsage.RateLimited, int64(attempts*rows[hot].Failures), "the hot account's 429s")
	require.Positive(t, hotUsage.RateLimited, "the hot account's limit was never reached: the test tests nothing")

	// The hot account's lost webhook is caught by its feed: stored from
	// the feed alone, counted as caught in its row.
	require.Positive(t, rows[hot].Caught, "the hot account's feed caught nothing")
	events := storetest.CustomerEvents(t, st, stripe.Provider, lost)
	require.NotEmpty(t, events, "the lost events of %s were not stored", lost)
	sources := map[int64][]string{}
	for _, r := range storetest.Receipts(t, st) {
		sources[r.EventID] = append(sources[r.EventID], r.Source)
	}
	for _, e := range events {
		require.Equal(t, []string{reconcile.SourceFeed}, sources[e.ID], "event %s", e.DedupeKey)
	}
	t.Logf("%d accounts: Round %s, drain %s at %.0f polls/s: promise %s; every account first polled within %s, again within %s; "+
		"%d requests, %d refused (the hot account's), %d polls in their %s (%.0f a second in the run)",
		served, view.Round, drain, pace, promise, worstFirst.Round(time.Millisecond), worstAgain.Round(time.Millisecond),
		usage.Requests, usage.RateLimited, during, window.Round(time.Millisecond), runPace)
}
