package store_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/mocks/mock"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store"
	"github.com/billsync/billsync/store/storetest"
	"github.com/billsync/billsync/store/storetest/tb"
)

// connectSource is a ConnectSource over each connected account's events
// (newest first, one page) and the provider's list of accounts (pages);
// it records each poll (the first page's request) of each account.
type connectSource struct {
	mu     sync.Mutex
	pages  [][]string
	events map[string][]reconcile.EventsFeedEvent
	fail   map[string]error
	polls  []string               // accounts polled, in order
	since  map[string][]time.Time // each poll's since, by account
}

func newConnectSource() *connectSource {
	return &connectSource{events: map[string][]reconcile.EventsFeedEvent{}, fail: map[string]error{},
		since: map[string][]time.Time{}}
}

func (s *connectSource) fake() *mock.ConnectSource {
	return &mock.ConnectSource{
		ListAccountsFn: func(_ context.Context, after string) ([]string, string, error) {
			s.mu.Lock()
			defer s.mu.Unlock()
			i := 0
			if after != "" {
				for i = 0; i < len(s.pages) && !slices.Contains(s.pages[i], after); i++ {
				}
				i++
			}
			if i >= len(s.pages) {
				return nil, "", nil
			}
			next := ""
			if i+1 < len(s.pages) {
				next = s.pages[i][len(s.pages[i])-1]
			}
			return s.pages[i], next, nil
		},
		ListConnectedEventsFn: func(_ context.Context, account string, since time.Time, after string) (reconcile.EventsFeedPage, error) {
			s.mu.Lock()
			defer s.mu.Unlock()
			if after == "" {
				s.polls = append(s.polls, account)
				s.since[account] = append(s.since[account], since)
			}
			if err := s.fail[account]; err != nil {
				return reconcile.EventsFeedPage{}, err
			}
			var page reconcile.EventsFeedPage
			for _, e := range s.events[account] {
				if !e.Event.Time.Before(since) {
					page.Events = append(page.Events, e)
				}
			}
			return page, nil
		},
	}
}

// pollsOf is how many polls of account the source saw.
func (s *connectSource) pollsOf(account string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.since[account])
}

// connectedEvent is an event of a connected account's customer, keyed
// under the account as the intake's reader keys it.
func connectedEvent(account, id, customer string, at time.Time) reconcile.EventsFeedEvent {
	e := feedEvent(reconcile.Connected(account, id), reconcile.Connected(account, customer), at)
	e.Event.EventID = id
	return e
}

func authorize(t *testing.T, st *store.Store, ok bool, at time.Time, accounts ...string) {
	t.Helper()
	var words []reconcile.Authorization
	for _, a := range accounts {
		words = append(words, reconcile.Authorization{Account: a, Authorized: ok, At: at})
	}
	require.NoError(t, st.SaveAuthorizations(context.Background(), "stripe", words))
}

// runConnectFeed runs a Connect feed over st and src until the test ends.
func runConnectFeed(t *testing.T, st *store.Store, src *connectSource, cfg reconcile.ConnectFeedConfig) *reconcile.ConnectFeed {
	t.Helper()
	cfg.Provider, cfg.Source, cfg.Store = "stripe", src.fake(), st
	cfg.Start = time.Hour
	f, err := reconcile.NewConnectFeed(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return f
}

func feedState(t *testing.T, st *store.Store, account string) reconcile.EventsFeedState {
	t.Helper()
	s, err := st.ConnectedFeedState(context.Background(), "stripe", account)
	if errors.Is(err, reconcile.ErrNotFound) {
		return reconcile.EventsFeedState{}
	}
	require.NoError(t, err)
	return s
}

// TestConnectFeedCatchesALostWebhook: an event of a connected account
// that no webhook brought is caught by that account's own feed (listed
// on its behalf, stored and queued under its key, counted as caught in
// its feed's row), an event its webhook did bring is not counted, and an
// account billsync does not serve is never read.
func TestConnectFeedCatchesALostWebhook(t *testing.T) {
	ctx := context.Background()
	st := storetest.NewStore(t)
	now := time.Now()
	authorize(t, st, true, now.Add(-time.Hour), "acct_a", "acct_b", "acct_c")
	src := newConnectSource()
	src.pages = [][]string{{"acct_a", "acct_b", "acct_c"}}
	lost := connectedEvent("acct_a", "evt_1", "cus_1", now.Add(-time.Minute))
	delivered := connectedEvent("acct_b", "evt_1", "cus_1", now.Add(-time.Minute))
	src.events["acct_a"] = []reconcile.EventsFeedEvent{lost}
	src.events["acct_b"] = []reconcile.EventsFeedEvent{delivered}
	src.events["acct_c"] = []reconcile.EventsFeedEvent{connectedEvent("acct_c", "evt_1", "cus_1", now.Add(-time.Minute))}
	_, err := st.StoreReceipt(ctx, reconcile.Receipt{Event: delivered.Event, Source: reconcile.SourceWebhook})
	require.NoError(t, err)

	runConnectFeed(t, st, src, reconcile.ConnectFeedConfig{
		Policy: reconcile.ConnectPolicy{Mode: reconcile.ConnectListed, Listed: []string{"acct_a", "acct_b"}}, Interval: time.Hour})
	tb.WaitFor(t, "both served accounts polled", func() bool {
		return feedState(t, st, "acct_a").Polls >= 1 && feedState(t, st, "acct_b").Polls >= 1
	})

	require.Equal(t, reconcile.TriggerFeed, storetest.QueueRowOf(t, st, "stripe", "acct_a/cus_1").Trigger)
	require.Equal(t, map[string][]string{"acct_a/evt_1": {"feed"}, "acct_b/evt_1": {"feed", "webhook"}}, sourcesOf(t, st))
	a, b := feedState(t, st, "acct_a"), feedState(t, st, "acct_b")
	require.EqualValues(t, 1, a.Caught, "the lost webhook is counted in its account's feed")
	require.Zero(t, b.Caught)
	require.True(t, a.Cursor.Equal(lost.Event.Time.Truncate(time.Microsecond)), "cursor %s", a.Cursor)
	_, err = st.EventsFeedState(ctx, "stripe")
	require.ErrorIs(t, err, reconcile.ErrNotFound, "the platform's own feed was not touched")
	require.Zero(t, src.pollsOf("acct_c"), "an account not served was read")
	stats, err := st.ConnectFeedStats(ctx, "stripe")
	require.NoError(t, err)
	require.EqualValues(t, 1, stats.Caught)
	require.Equal(t, 3, stats.Authorized)
}

// TestConnectFeedDeauthorizationStopsAndResumes: an account that
// deauthorises the platform is polled no more while the others are, and
// once it authorises it again its feed resumes from its cursor.
func TestConnectFeedDeauthorizationStopsAndResumes(t *testing.T) {
	st := storetest.NewStore(t)
	now := time.Now()
	authorize(t, st, true, now.Add(-time.Hour), "acct_a", "acct_w")
	src := newConnectSource()
	src.pages = [][]string{{"acct_a", "acct_w"}}
	ev := connectedEvent("acct_a", "evt_1", "cus_1", now.Add(-10*time.Minute))
	src.events["acct_a"] = []reconcile.EventsFeedEvent{ev}
	const overlap = time.Minute
	runConnectFeed(t, st, src, reconcile.ConnectFeedConfig{Policy: reconcile.ConnectPolicy{Mode: reconcile.ConnectAll},
		Interval: time.Millisecond, Overlap: overlap, Pool: 2})
	tb.WaitFor(t, "acct_a polled", func() bool { return feedState(t, st, "acct_a").Polls >= 2 })
	cursor := feedState(t, st, "acct_a").Cursor

	authorize(t, st, false, time.Now(), "acct_a")
	// A dispatch that read the accounts before the word may still start
	// a poll; every dispatch after the witness's next polls has read it.
	witness := func(n int) {
		t.Helper()
		from := src.pollsOf("acct_w")
		tb.WaitFor(t, "the other account polled", func() bool { return src.pollsOf("acct_w") >= from+n })
	}
	witness(3)
	stopped := src.pollsOf("acct_a")
	witness(20)
	require.Equal(t, stopped, src.pollsOf("acct_a"), "a deauthorised account's feed was polled")

	authorize(t, st, true, time.Now().Add(time.Second), "acct_a")
	tb.WaitFor(t, "acct_a polled again", func() bool { return src.pollsOf("acct_a") > stopped })
	src.mu.Lock()
	since := src.since["acct_a"][stopped]
	src.mu.Unlock()
	require.True(t, since.Equal(cursor.Add(-overlap)), "resumed from %s, want its cursor %s less the overlap", since, cursor)
}

// TestConnectFeedBacksOffAFailingAccountAlone: an account whose poll
// fails (a 429 after the client's retries) is backed off alone: it is
// not polled again before its backoff ends, while the others keep being
// polled at their pace.
func TestConnectFeedBacksOffAFailingAccountAlone(t *testing.T) {
	ctx := context.Background()
	st := storetest.NewStore(t)
	authorize(t, st, true, time.Now().Add(-time.Hour), "acct_bad", "acct_good")
	src := newConnectSource()
	src.pages = [][]string{{"acct_bad", "acct_good"}}
	src.fail["acct_bad"] = errors.New("stripe list events: 429 rate_limit: Too many requests")
	runConnectFeed(t, st, src, reconcile.ConnectFeedConfig{Policy: reconcile.ConnectPolicy{Mode: reconcile.ConnectAll},
		Interval: time.Millisecond, Pool: 2})
	tb.WaitFor(t, "the good account polled on", func() bool { return feedState(t, st, "acct_good").Polls >= 20 })
	require.Equal(t, 1, src.pollsOf("acct_bad"), "the failing account was not backed off")
	stats, err := st.ConnectFeedStats(ctx, "stripe")
	require.NoError(t, err)
	require.Equal(t, 1, stats.BackedOff)

	// Its backoff over, it is the most overdue: polled first, and a poll
	// that succeeds clears the backoff.
	delete(src.fail, "acct_bad")
	storetest.EndConnectBackoff(t, st, "stripe", "acct_bad")
	tb.WaitFor(t, "the account polled after its backoff", func() bool { return feedState(t, st, "acct_bad").Polls >= 1 })
	stats, err = st.ConnectFeedStats(ctx, "stripe")
	require.NoError(t, err)
	require.Zero(t, stats.BackedOff)
}

// TestDueConnectFeedsOldestFirst: the accounts due come most overdue
// first (never polled, then by last poll, a backed-off one by its
// backoff's end less a round), only served and authorised ones, those in
// flight left out.
func TestDueConnectFeedsOldestFirst(t *testing.T) {
	ctx := context.Background()
	st := storetest.NewStore(t)
	now := time.Now()
	authorize(t, st, true, now.Add(-time.Hour), "acct_1", "acct_2", "acct_3", "acct_4", "acct_new", "acct_off")
	authorize(t, st, false, now, "acct_off")
	for _, a := range []string{"acct_1", "acct_2", "acct_3", "acct_4", "acct_off"} {
		_, err := st.OpenEventsFeed(ctx, "stripe", a, now)
		require.NoError(t, err)
		require.NoError(t, st.SaveEventsFeedPoll(ctx, "stripe", reconcile.EventsFeedPoll{Account: a, Cursor: now}))
	}
	storetest.AgeConnectedFeedPoll(t, st, "stripe", "acct_1", 10*time.Minute)
	storetest.AgeConnectedFeedPoll(t, st, "stripe", "acct_2", 30*time.Minute)
	storetest.AgeConnectedFeedPoll(t, st, "stripe", "acct_3", 20*time.Minute)
	storetest.AgeConnectedFeedPoll(t, st, "stripe", "acct_off", time.Hour)
	// acct_4 failed: retried in 5 minutes, which a round of an hour
	// places 55 minutes in the past: before every other.
	require.NoError(t, st.FailConnectFeed(ctx, "stripe", "acct_4", 5*time.Minute))

	order := func(q reconcile.ConnectDueQuery) ([]string, int) {
		t.Helper()
		feeds, served, err := st.DueConnectFeeds(ctx, "stripe", q)
		require.NoError(t, err)
		var out []string
		for _, f := range feeds {
			out = append(out, f.Account)
		}
		return out, served
	}
	all := reconcile.ConnectPolicy{Mode: reconcile.ConnectAll}
	got, served := order(reconcile.ConnectDueQuery{Policy: all, Round: time.Hour, Limit: 10})
	require.Equal(t, []string{"acct_new", "acct_4", "acct_2", "acct_3", "acct_1"}, got)
	require.Equal(t, 5, served)
	got, _ = order(reconcile.ConnectDueQuery{Policy: all, Round: time.Minute, Limit: 10})
	require.Equal(t, []string{"acct_new", "acct_2", "acct_3", "acct_1", "acct_4"}, got)
	got, served = order(reconcile.ConnectDueQuery{Policy: all, Round: time.Hour, Skip: []string{"acct_new", "acct_2"}, Limit: 2})
	require.Equal(t, []string{"acct_4", "acct_3"}, got)
	require.Equal(t, 3, served)
	got, _ = order(reconcile.ConnectDueQuery{Policy: reconcile.ConnectPolicy{Mode: reconcile.ConnectListed,
		Listed: []string{"acct_1", "acct_off", "acct_unknown"}}, Round: time.Hour, Limit: 10})
	require.Equal(t, []string{"acct_1"}, got)
}

// TestDiscoverConnectedAccounts: the listing records every account it
// names as authorising the platform, and an account known as authorising
// it that the whole listing no longer names as having withdrawn; a word
// newer than the listing stands.
func TestDiscoverConnectedAccounts(t *testing.T) {
	ctx := context.Background()
	st := storetest.NewStore(t)
	now := time.Now()
	authorize(t, st, true, now.Add(-time.Hour), "acct_gone", "acct_a")
	authorize(t, st, false, now.Add(-time.Hour), "acct_back")
	// Authorised by an event after the listing began: the listing that
	// does not name it yet changes nothing.
	authorize(t, st, true, now.Add(time.Hour), "acct_new")
	src := newConnectSource()
	src.pages = [][]string{{"acct_a", "acct_b"}, {"acct_back", "not_an_account"}, {"acct_c"}}
	f, err := reconcile.NewConnectFeed(reconcile.ConnectFeedConfig{Provider: "stripe", Source: src.fake(), Store: st,
		Policy: reconcile.ConnectPolicy{Mode: reconcile.ConnectAll}})
	require.NoError(t, err)
	got, err := f.Discover(ctx)
	require.NoError(t, err)
	require.Equal(t, reconcile.Discovered{Listed: 4, Deauthorized: 2}, got)
	accounts, err := st.ConnectedAccounts(ctx, "stripe")
	require.NoError(t, err)
	state := map[string]bool{}
	for _, a := range accounts {
		state[a.Account] = a.Authorized
	}
	require.Equal(t, map[string]bool{"acct_a": true, "acct_b": true, "acct_back": true, "acct_c": true,
		"acct_gone": false, "acct_new": true}, state)
}
