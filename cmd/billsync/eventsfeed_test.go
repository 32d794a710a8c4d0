package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
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

// billsyncCall reports whether r is billsync's (not the test driver's)
// request.
func billsyncCall(r *http.Request) bool {
	return r.Header.Get("Authorization") == "Bearer "+stripemock.DefaultAPIKey
}

// feedEnv is the environment of a serve on the events feed alone
// (webhook-free: no webhook secret) against the fake at url.
func feedEnv(dbURL, url string, extra ...string) []string {
	return append([]string{"DATABASE_URL=" + dbURL, "STRIPE_API_KEY=" + stripemock.DefaultAPIKey, "STRIPE_API_URL=" + url,
		"STRIPE_WEBHOOK_SECRET=", "BILLSYNC_LOG_LEVEL=debug"}, extra...)
}

// TestTwoServesPollOneAtATime: two serve processes on one database: one
// leads the feed (its lease), the other is refused; never two listings are
// in flight.
func TestTwoServesPollOneAtATime(t *testing.T) {
	var inflight, most, lists atomic.Int32
	h := testenv.ForTest(t, testenv.Stripe, testenv.Options{Wrap: func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/v1/events" && billsyncCall(r) {
				n := inflight.Add(1)
				defer inflight.Add(-1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				lists.Add(1)
			}
			next.ServeHTTP(w, r)
		})
	}})
	// Each listing takes 300 ms, longer than the 100 ms poll interval.
	h.Stripe.Fake.SetFaults(stripemock.Faults{Latency: 300 * time.Millisecond, TargetKey: stripemock.DefaultAPIKey})
	dbURL := storetest.URL(t)
	var procs []*billsyncProc
	for range 2 {
		addr := freeAddr(t)
		procs = append(procs, startBillsync(t, t.TempDir(), addr,
			feedEnv(dbURL, h.URL, "BILLSYNC_TEST_ARGS=serve -workers 0 -events-poll 100ms -stripe-read-allocation 1e12 -addr "+addr)...))
	}
	const skipped = "events poll skipped: another replica is polling"
	// One leads (holds the feed's lease and polls), the other tries to
	// take it and is refused.
	require.Eventually(t, func() bool {
		return lists.Load() >= 6 && (strings.Contains(procs[0].logs.String(), skipped) || strings.Contains(procs[1].logs.String(), skipped))
	}, time.Minute, 50*time.Millisecond, "the serves never contended for the feed:\n%s\n%s", procs[0].logs, procs[1].logs)
	for _, p := range procs {
		stopBillsync(t, p)
	}
	require.EqualValues(t, 1, most.Load(), "two listings were in flight at once")
	st := storetest.OpenStore(t, dbURL, store.Options{})
	state, err := st.EventsFeedState(context.Background(), "stripe")
	require.NoError(t, err)
	require.GreaterOrEqual(t, state.Polls, int64(lists.Load())-2, "a poll per listing (but those SIGTERM cut short)")
}

// TestFeedSurvivesKillBetweenPageAndCursor: serve is killed (SIGKILL)
// after storing the first page of a listing, while it reads the second,
// before its cursor write. The cursor has not moved, and the next serve
// stores every event, the older ones of the unread page included: the
// overlap window alone would not reach them.
func TestFeedSurvivesKillBetweenPageAndCursor(t *testing.T) {
	ctx := context.Background()
	blocked := make(chan struct{})
	var blockOnce, passOn atomic.Bool
	h := testenv.ForTest(t, testenv.Stripe, testenv.Options{Wrap: func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/v1/events" && billsyncCall(r) && r.URL.Query().Get("starting_after") != "" && !passOn.Load() {
				if blockOnce.CompareAndSwap(false, true) {
					close(blocked)
				}
				<-r.Context().Done() // held until the process dies
				return
			}
			next.ServeHTTP(w, r)
		})
	}})
	fake := h.Stripe.Fake
	oldAt := fake.Clock().Now()
	var old []string
	for range 3 {
		cus := h.Customer("")
		h.Subscribe(cus, "price_pro")
		old = append(old, cus)
	}
	fake.Clock().Advance(30 * time.Minute)
	for range 60 { // well over a page of the feed's types
		h.Subscribe(h.Customer(""), "price_team")
	}
	want := feedEventIDs(t, h, oldAt.Add(-time.Minute))
	require.Greater(t, len(want), 100)

	dbURL := storetest.URL(t)
	st := storetest.OpenStore(t, dbURL, store.Options{})
	require.NoError(t, st.SaveEventsFeedPoll(ctx, "stripe", reconcile.EventsFeedPoll{Cursor: oldAt}))
	args := "BILLSYNC_TEST_ARGS=serve -workers 0 -events-poll 1h -events-overlap 1m -addr "
	addr := freeAddr(t)
	p := startBillsync(t, t.TempDir(), addr, feedEnv(dbURL, h.URL, args+addr)...)
	select {
	case <-blocked:
	case <-time.After(time.Minute):
		t.Fatalf("the feed never asked for a second page:\n%s", p.logs)
	}
	require.Len(t, storetest.Events(t, st), 100, "the first page is stored before the second is read")
	require.NoError(t, p.cmd.Process.Kill())
	<-p.exited
	state, err := st.EventsFeedState(ctx, "stripe")
	require.NoError(t, err)
	require.True(t, state.Cursor.Equal(oldAt.Truncate(time.Microsecond)), "the cursor moved (%s) before the listing was stored", state.Cursor)

	passOn.Store(true)
	addr = freeAddr(t)
	p = startBillsync(t, t.TempDir(), addr, feedEnv(dbURL, h.URL, args+addr)...)
	require.Eventually(t, func() bool {
		s, err := st.EventsFeedState(ctx, "stripe")
		return err == nil && s.Polls >= 2
	}, time.Minute, 50*time.Millisecond, "the second serve never finished a poll:\n%s", p.logs)
	stopBillsync(t, p)
	stored := map[string]int{}
	for _, e := range storetest.Events(t, st) {
		stored[e.EventID]++
	}
	for _, id := range want {
		require.Equal(t, 1, stored[id], "event %s", id)
	}
	require.Len(t, stored, len(want))
	for _, cus := range old {
		require.NotEmpty(t, storetest.CustomerEvents(t, st, "stripe", cus), "the older events were skipped")
	}
}

// feedEventIDs lists, as the test driver, the ids of the events of the
// feed's types created since.
func feedEventIDs(t *testing.T, h *testenv.Test, since time.Time) []string {
	t.Helper()
	params := &stripeapi.EventListParams{Types: stripeapi.StringSlice(stripe.FeedTypes),
		CreatedRange: &stripeapi.RangeQueryParams{GreaterThanOrEqual: since.Unix()}}
	var ids []string
	for e, err := range h.Stripe.API.V1Events.List(context.Background(), params) {
		require.NoError(t, err)
		ids = append(ids, e.ID)
	}
	return ids
}

// TestWebhookFreeEndToEnd: every webhook is dropped at the fake, serve
// runs on the feed alone (no webhook secret, no sweep), and random plan
// changes at the fake all reach the accounts.
func TestWebhookFreeEndToEnd(t *testing.T) {
	dbURL := storetest.URL(t)
	st := storetest.OpenStore(t, dbURL, store.Options{})
	h := testenv.ForTest(t, testenv.Stripe, testenv.Options{})
	h.Stripe.Fake.AddWebhookEndpoint("http://127.0.0.1:9/webhooks/stripe") // nobody listens, and nothing is sent:
	h.Stripe.Fake.SetFaults(stripemock.Faults{DropRate: 1})
	addr := freeAddr(t)
	p := startBillsync(t, t.TempDir(), addr, feedEnv(dbURL, h.URL,
		"BILLSYNC_TEST_ARGS=serve -workers 2 -events-poll 200ms -stripe-read-allocation 1e12 -sweep-schedule off -addr "+addr)...)

	rng := rand.New(rand.NewPCG(17, 17))
	prices := []string{"price_free", "price_pro", "price_team"}
	plans := map[string]string{"price_free": "free", "price_pro": "pro", "price_team": "team"}
	want := map[string]string{}
	subs := map[string]*stripeapi.Subscription{}
	var customers []string
	for i := range 8 {
		cus := h.Customer(fmt.Sprint("u_", i))
		customers = append(customers, cus)
		price := prices[rng.IntN(len(prices))]
		subs[cus], want[cus] = h.Subscribe(cus, price), plans[price]
	}
	for range 20 {
		cus := customers[rng.IntN(len(customers))]
		switch sub := subs[cus]; {
		case sub == nil:
			price := prices[rng.IntN(len(prices))]
			subs[cus], want[cus] = h.Subscribe(cus, price), plans[price]
		case rng.IntN(5) == 0:
			h.Cancel(sub)
			subs[cus], want[cus] = nil, "free"
		default:
			price := prices[rng.IntN(len(prices))]
			h.ChangePrice(sub, price)
			want[cus] = plans[price]
		}
	}
	require.Zero(t, h.Stripe.Fake.Settled().Delivered, "no webhook was delivered")
	require.Eventually(t, func() bool {
		for cus, plan := range want {
			a, err := st.Account(context.Background(), "stripe", cus)
			if err != nil || a.Plan != plan {
				return false
			}
		}
		return true
	}, 2*time.Minute, 100*time.Millisecond, "the accounts never caught up with the fake:\n%s", p.logs)
	metrics := scrape(t, addr)
	stopBillsync(t, p)
	for _, r := range storetest.Receipts(t, st) {
		require.Equal(t, reconcile.SourceFeed, r.Source)
	}
	state, err := st.EventsFeedState(context.Background(), "stripe")
	require.NoError(t, err)
	require.EqualValues(t, len(storetest.Events(t, st)), state.Caught, "every event was caught by the feed")
	require.Regexp(t, `(?m)^billsync_events_feed_caught_total\{provider="stripe"\} [1-9]`, metrics)
	require.Regexp(t, `(?m)^billsync_events_feed_lag_seconds\{provider="stripe"\} \d`, metrics)
	require.Regexp(t, `(?m)^billsync_events_feed_last_poll_timestamp_seconds\{provider="stripe"\} \d`, metrics)
	require.NotContains(t, metrics, "billsync_stripe_webhook_endpoint_enabled", "webhook-free: the endpoint is not read")
}

// TestDisabledEndpointAlerts: with webhooks on, the feed reads the
// endpoint's status; once Stripe disables it, an ALERT line
// is logged and the metric reads 0. With the feed turned off, no feed
// metric is reported.
func TestDisabledEndpointAlerts(t *testing.T) {
	dbURL := storetest.URL(t)
	h := testenv.ForTest(t, testenv.Stripe, testenv.Options{})
	addr := freeAddr(t)
	h.Stripe.Fake.AddWebhookEndpoint("http://" + addr + "/webhooks/stripe")
	id := h.Stripe.Fake.WebhookEndpointIDs()[0]
	p := startBillsync(t, t.TempDir(), addr, feedEnv(dbURL, h.URL,
		"STRIPE_WEBHOOK_SECRET=whsec_serve_test", "BILLSYNC_TEST_ARGS=serve -workers 0 -events-poll 100ms -stripe-read-allocation 1e12 -addr "+addr)...)
	metric := func() string {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	enabled := fmt.Sprintf(`billsync_stripe_webhook_endpoint_enabled{endpoint=%q,provider="stripe"} `, id)
	require.Eventually(t, func() bool { return strings.Contains(metric(), enabled+"1") }, time.Minute, 50*time.Millisecond)
	require.NotContains(t, p.logs.String(), "ALERT")

	// The endpoint is read on a leader's first poll, when undelivered
	// events are listed, and every 6 h (docs/events-feed.md): a restarted
	// serve leads anew and reads it at once.
	require.True(t, h.Stripe.Fake.DisableWebhookEndpoint(id))
	stopBillsync(t, p)
	p = startBillsync(t, t.TempDir(), addr, feedEnv(dbURL, h.URL,
		"STRIPE_WEBHOOK_SECRET=whsec_serve_test", "BILLSYNC_TEST_ARGS=serve -workers 0 -events-poll 100ms -stripe-read-allocation 1e12 -addr "+addr)...)
	require.Eventually(t, func() bool { return strings.Contains(metric(), enabled+"0") }, time.Minute, 50*time.Millisecond)
	require.Contains(t, p.logs.String(), "ALERT: the provider has disabled the webhook endpoint")
	stopBillsync(t, p)

	// The feed turned off: its last state stays in the database, but no
	// process reports it, so neither its ageing poll nor the disabled
	// endpoint (no longer read) raises an alert.
	p = startBillsync(t, t.TempDir(), addr, feedEnv(dbURL, h.URL,
		"STRIPE_WEBHOOK_SECRET=whsec_serve_test", "BILLSYNC_TEST_ARGS=serve -workers 0 -events-poll off -addr "+addr)...)
	off := metric()
	require.Contains(t, off, "billsync_app_deliveries", "a scrape")
	require.NotContains(t, off, "billsync_events_feed_")
	require.NotContains(t, off, "billsync_stripe_webhook_endpoint_enabled")
	stopBillsync(t, p)
}

// TestEventsPollSetting: -events-poll and BILLSYNC_EVENTS_POLL take a
// positive duration or off (the flag over the variable); anything else
// stops serve with a message naming both.
func TestEventsPollSetting(t *testing.T) {
	parse := func(env string, args ...string) (config, error) {
		var c config
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		c.bindServe(fs, func(k string) string {
			if k == "BILLSYNC_EVENTS_POLL" {
				return env
			}
			return ""
		})
		if err := fs.Parse(args); err != nil {
			return c, err
		}
		return c, c.eventsPollErr
	}
	c, err := parse("")
	require.NoError(t, err)
	require.Equal(t, reconcile.DefaultFeedInterval, c.EventsPoll)
	c, err = parse("off")
	require.NoError(t, err)
	require.Zero(t, c.EventsPoll)
	c, err = parse("15s")
	require.NoError(t, err)
	require.Equal(t, 15*time.Second, c.EventsPoll)
	c, err = parse("off", "-events-poll", "30s")
	require.NoError(t, err)
	require.Equal(t, 30*time.Second, c.EventsPoll, "the flag wins")
	for _, bad := range []string{"soon", "0s", "-1m"} {
		_, err = parse(bad)
		require.ErrorContains(t, err, "BILLSYNC_EVENTS_POLL / -events-poll", bad)
		_, err = parse("", "-events-poll", bad)
		require.Error(t, err, bad)
	}
	_, err = parse("soon", "-events-poll", "1m")
	require.NoError(t, err, "a good flag replaces a bad variable")
}
