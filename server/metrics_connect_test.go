package server_test

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/server"
	"github.com/billsync/billsync/store/storetest"
)

// TestConnectFeedMetrics: the Connect accounts' feeds are served per
// provider, read from a real store holding accounts in every state: two
// polled (one 20 minutes ago, one then backed off), two never polled,
// one deauthorised (polled two hours ago: its feed stopped, so it is not
// the oldest poll); and this replica's scheduler (its round and polls).
// No series names an account.
func TestConnectFeedMetrics(t *testing.T) {
	ctx := context.Background()
	st := storetest.NewStore(t)
	now := time.Now()
	var words []reconcile.Authorization
	for _, a := range []string{"acct_polled", "acct_failing", "acct_new", "acct_newer", "acct_gone"} {
		words = append(words, reconcile.Authorization{Account: a, Authorized: true, At: now.Add(-3 * time.Hour)})
	}
	require.NoError(t, st.SaveAuthorizations(ctx, "stripe", words))
	require.NoError(t, st.SaveAuthorizations(ctx, "stripe", []reconcile.Authorization{{Account: "acct_gone", At: now}}))
	for _, a := range []string{"acct_polled", "acct_failing", "acct_gone"} {
		_, err := st.OpenEventsFeed(ctx, "stripe", a, now)
		require.NoError(t, err)
		require.NoError(t, st.SaveEventsFeedPoll(ctx, "stripe", reconcile.EventsFeedPoll{Account: a, Cursor: now}))
	}
	storetest.AgeConnectedFeedPoll(t, st, "stripe", "acct_polled", 20*time.Minute)
	storetest.AgeConnectedFeedPoll(t, st, "stripe", "acct_gone", 2*time.Hour)
	require.NoError(t, st.FailConnectFeed(ctx, "stripe", "acct_failing", time.Hour))

	metrics := server.NewMetrics(nil, nil)
	metrics.CollectConnectFeeds(func(ctx context.Context) (reconcile.ConnectFeedStats, error) {
		return st.ConnectFeedStats(ctx, "stripe")
	}, func() reconcile.ConnectFeedView {
		return reconcile.ConnectFeedView{Provider: "stripe", Served: 3, Round: 90 * time.Second, Pool: 12, Polls: 5, Failed: 1}
	}, nil)
	srv := httptest.NewServer(server.New(server.Config{Inbox: st, Metrics: metrics}))
	t.Cleanup(srv.Close)

	for series, want := range map[string]int{
		`billsync_connect_accounts{provider="stripe",state="authorized"}`:      4,
		`billsync_connect_accounts{provider="stripe",state="deauthorized"}`:    1,
		`billsync_connect_accounts{provider="stripe",state="backed_off"}`:      1,
		`billsync_connect_accounts{provider="stripe",state="never_polled"}`:    2,
		`billsync_connect_feed_round_seconds{provider="stripe"}`:               90,
		`billsync_connect_feed_served_accounts{provider="stripe"}`:             3,
		`billsync_connect_feed_pool{provider="stripe"}`:                        12,
		`billsync_connect_feed_polls_total{provider="stripe",result="ok"}`:     5,
		`billsync_connect_feed_polls_total{provider="stripe",result="failed"}`: 1,
		`billsync_connect_feed_caught_total{provider="stripe"}`:                0,
	} {
		require.Equal(t, want, metricValue(t, srv.URL, series), series)
	}
	age := metricValue(t, srv.URL, `billsync_connect_feed_oldest_poll_age_seconds{provider="stripe"}`)
	require.GreaterOrEqual(t, age, 20*60, "the authorised account polled 20 minutes ago is the oldest")
	require.Less(t, age, 2*60*60, "the deauthorised account's old poll is not counted")
	text := scrapeText(t, srv.URL)
	require.NotContains(t, text, "acct_", "no series names an account")
}

// TestConnectSweepMetrics: the Connect accounts' sweeps per provider,
// read from a real store: one account imported then swept, one whose
// newest run failed, one never swept, and one deauthorised (its old run
// not counted as the oldest success); and this replica's scheduler (its
// interval, runs and the customers they healed). No series names an
// account.
func TestConnectSweepMetrics(t *testing.T) {
	ctx := context.Background()
	st := storetest.NewStore(t)
	now := time.Now()
	var words []reconcile.Authorization
	for _, a := range []string{"acct_swept", "acct_failing", "acct_new", "acct_gone"} {
		words = append(words, reconcile.Authorization{Account: a, Authorized: a != "acct_gone", At: now})
	}
	require.NoError(t, st.SaveAuthorizations(ctx, "stripe", words))
	run := func(account, kind string, healed int, failure error) {
		t.Helper()
		r, err := st.StartSweep(ctx, "stripe", account, kind)
		require.NoError(t, err)
		r.Healed = healed
		require.NoError(t, st.FinishSweep(ctx, r, failure))
	}
	run("acct_gone", reconcile.RunSweep, 7, nil) // oldest, but withdrawn
	run("acct_swept", reconcile.RunImport, 3, nil)
	run("acct_swept", reconcile.RunSweep, 2, nil)
	run("acct_failing", reconcile.RunSweep, 0, context.DeadlineExceeded)
	run("", reconcile.RunSweep, 5, nil) // the platform's own
	storetest.AgeSweepRuns(t, st, "stripe", "acct_gone", 48*time.Hour)
	storetest.AgeSweepRuns(t, st, "stripe", "acct_swept", time.Hour)

	metrics := server.NewMetrics(nil, nil)
	metrics.CollectConnectSweeps(func(ctx context.Context) (reconcile.ConnectSweepStats, error) {
		return st.ConnectSweepStats(ctx, "stripe")
	}, func() reconcile.ConnectSweepsView {
		return reconcile.ConnectSweepsView{Provider: "stripe", Served: 3, Every: 24 * time.Hour, Succeeded: 4, Failed: 1, Healed: 9}
	}, nil)
	srv := httptest.NewServer(server.New(server.Config{Inbox: st, Metrics: metrics}))
	t.Cleanup(srv.Close)

	for series, want := range map[string]int{
		`billsync_connect_sweep_accounts{provider="stripe",state="never_swept"}`: 1,
		`billsync_connect_sweep_accounts{provider="stripe",state="failing"}`:     1,
		`billsync_connect_sweep_healed_accounts_total{provider="stripe"}`:        9,
		`billsync_connect_sweep_every_seconds{provider="stripe"}`:                86400,
		`billsync_connect_sweep_runs_total{provider="stripe",result="ok"}`:       4,
		`billsync_connect_sweep_runs_total{provider="stripe",result="failed"}`:   1,
	} {
		require.Equal(t, want, metricValue(t, srv.URL, series), series)
	}
	age := metricValue(t, srv.URL, `billsync_connect_sweep_oldest_success_age_seconds{provider="stripe"}`)
	require.GreaterOrEqual(t, age, 60*60, "acct_swept's newest success, an hour ago, is the oldest")
	require.Less(t, age, 2*60*60, "acct_gone's, two days ago, is not counted: it withdrew")
	require.NotContains(t, scrapeText(t, srv.URL), "acct_", "no series names an account")
}
