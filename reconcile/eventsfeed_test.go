package reconcile_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/mocks/mock"
	"github.com/billsync/billsync/reconcile"
)

// These tests drive the events feed's pace against function-field fakes
// in a synctest bubble: 30 days of polling pass in milliseconds, and the
// reads the feed makes are counted where the provider would count them.
// What the feed stores is tested against PostgreSQL in package store.

// feedProvider is what the fakes share: the events the provider lists
// (one page, every poll: the overlap window lists the newest event again
// until a newer one comes), which of them a webhook brought first, the
// endpoint's status, the reads made, and the feed's lease.
type feedProvider struct {
	mu        sync.Mutex
	events    []reconcile.EventsFeedEvent
	webhooked map[string]bool // StoreDelivery answers Duplicate
	stored    map[string]bool // the feed stored it
	disabled  bool
	lists     []time.Time // when each listing was read
	endpoints []time.Time // when the endpoint was read
	lose      func()      // ends the lease held now
	stop      func()      // stops the feed (runFeed sets it)
	runaway   bool        // the feed listed more than maxLists times
}

// maxLists stops a feed that polls without waiting (a zero interval),
// which would spin the bubble's clock still: a month at one poll a
// minute is 43,200.
const maxLists = 100_000

func newFeedProvider() *feedProvider {
	return &feedProvider{webhooked: map[string]bool{}, stored: map[string]bool{}}
}

// list makes the provider list e from now on; byWebhook: a webhook
// brought it before the feed (the feed catches nothing).
func (p *feedProvider) list(e reconcile.EventsFeedEvent, byWebhook bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.events = append([]reconcile.EventsFeedEvent{e}, p.events...)
	p.webhooked[e.Event.DedupeKey] = byWebhook
}

func (p *feedProvider) setDisabled(d bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.disabled = d
}

// reads returns the listings and endpoint reads made so far.
func (p *feedProvider) reads() (lists, endpoints []time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]time.Time(nil), p.lists...), append([]time.Time(nil), p.endpoints...)
}

// loseLease ends the lease the feed holds, as a lost renewal would.
func (p *feedProvider) loseLease() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lose()
}

// config returns a feed's config on the fakes; withEndpoint: webhooks are
// on, so the feed reads the endpoint's status.
func (p *feedProvider) config(withEndpoint bool) reconcile.EventsFeedConfig {
	st := &mock.EventsFeedStore{
		Inbox: mock.Inbox{StoreReceiptFn: func(_ context.Context, d reconcile.Receipt) (reconcile.Stored, error) {
			p.mu.Lock()
			defer p.mu.Unlock()
			p.stored[d.Event.DedupeKey] = true
			return reconcile.Stored{InboxID: 1, Duplicate: p.webhooked[d.Event.DedupeKey], Status: reconcile.EventPending}, nil
		}},
		NowFn: func(context.Context) (time.Time, error) { return time.Now(), nil },
		EventsFeedLockFn: func(ctx context.Context, _ string) (context.Context, func(), error) {
			held, cancel := context.WithCancel(ctx)
			p.mu.Lock()
			p.lose = cancel
			p.mu.Unlock()
			return held, cancel, nil
		},
		OpenEventsFeedFn: func(_ context.Context, provider, _ string, start time.Time) (reconcile.EventsFeedState, error) {
			return reconcile.EventsFeedState{Provider: provider, Cursor: start}, nil
		},
		EventsFeedStoredFn: func(_ context.Context, _ string, keys []string) (map[string]bool, error) {
			p.mu.Lock()
			defer p.mu.Unlock()
			out := map[string]bool{}
			for _, k := range keys {
				out[k] = p.stored[k]
			}
			return out, nil
		},
		SaveEventsFeedPollFn: func(context.Context, string, reconcile.EventsFeedPoll) error { return nil },
	}
	cfg := reconcile.EventsFeedConfig{
		Provider: "stripe", Store: st,
		Source: &mock.EventSource{ListEventsFn: func(ctx context.Context, _ time.Time, _ string) (reconcile.EventsFeedPage, error) {
			if err := ctx.Err(); err != nil {
				return reconcile.EventsFeedPage{}, err
			}
			p.mu.Lock()
			defer p.mu.Unlock()
			if p.runaway = len(p.lists) >= maxLists; p.runaway {
				p.stop()
				return reconcile.EventsFeedPage{}, context.Canceled
			}
			p.lists = append(p.lists, time.Now())
			return reconcile.EventsFeedPage{Events: append([]reconcile.EventsFeedEvent(nil), p.events...)}, nil
		}},
	}
	if withEndpoint {
		cfg.Endpoint = &mock.EndpointChecker{WebhookEndpointFn: func(context.Context) (string, bool, error) {
			p.mu.Lock()
			defer p.mu.Unlock()
			p.endpoints = append(p.endpoints, time.Now())
			return "we_1", !p.disabled, nil
		}}
	}
	return cfg
}

// runFeed runs a feed of p on cfg in the bubble until the test ends; the
// first poll is done when it returns.
func runFeed(t *testing.T, p *feedProvider, cfg reconcile.EventsFeedConfig) *reconcile.EventsFeed {
	t.Helper()
	feed, err := reconcile.NewEventsFeed(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	p.mu.Lock()
	p.stop = cancel
	p.mu.Unlock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		feed.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		require.False(t, p.runaway, "the feed polled without waiting")
	})
	synctest.Wait()
	return feed
}

// sleepUntil sleeps in the bubble until at, and until the feed waits.
func sleepUntil(at time.Time) {
	time.Sleep(time.Until(at))
	synctest.Wait()
}

// slogTo logs everything, as JSON lines, to w.
func slogTo(w io.Writer) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// fixed returns an Allocation of reads a month.
func fixed(reads float64) func() float64 { return func() float64 { return reads } }

// gaps returns the time between successive reads.
func gaps(at []time.Time) []time.Duration {
	var out []time.Duration
	for i := 1; i < len(at); i++ {
		out = append(out, at[i].Sub(at[i-1]))
	}
	return out
}

func feedEvent(id string, undelivered bool) reconcile.EventsFeedEvent {
	return reconcile.EventsFeedEvent{Undelivered: undelivered, Event: reconcile.Event{
		Provider: "stripe", DedupeKey: id, EventID: id, Type: "customer.subscription.updated",
		CustomerID: "cus_1", Time: time.Now(), Payload: []byte(`{}`)}}
}

// TestFeedIntervalFollowsTheBudget: quiet, the feed polls at 30 days ÷
// (a quarter of the allocation − 120 endpoint reads), rounded up to the
// second: about 18 minutes at Stripe's floor of 10,000 reads a month,
// faster for a larger allocation, never faster than Interval, never
// slower than an hour; and the allocation is read again at each poll.
func TestFeedIntervalFollowsTheBudget(t *testing.T) {
	for name, tc := range map[string]struct {
		allocation float64
		share      float64
		endpoint   bool
		want       time.Duration
	}{
		"Floor":            {10_000, 0, true, 18*time.Minute + 10*time.Second},  // 2,592,000 s ÷ (2,500 − 120)
		"FloorWebhookFree": {10_000, 0, false, 17*time.Minute + 17*time.Second}, // ÷ 2,500
		"HalfShare":        {10_000, 0.5, true, 8*time.Minute + 52*time.Second}, // ÷ (5,000 − 120)
		"Larger":           {100_000, 0, true, time.Minute + 45*time.Second},    // ÷ (25,000 − 120)
		"ClampedAtFastest": {1_000_000, 0, true, time.Minute},                   // 52 s
		"TooSmall_Slowest": {400, 0, true, time.Hour},                           // 100 − 120 < 0
		"Unknown_Slowest":  {math.NaN(), 0, true, time.Hour},
		"Infinite_Fastest": {math.Inf(1), 0, true, time.Minute},
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := newFeedProvider()
				cfg := p.config(tc.endpoint)
				cfg.Allocation, cfg.Share = fixed(tc.allocation), tc.share
				feed := runFeed(t, p, cfg)
				require.Equal(t, tc.want, feed.Interval())
				time.Sleep(3*time.Hour + time.Second)
				lists, _ := p.reads()
				require.Greater(t, len(lists), 3)
				for _, g := range gaps(lists) {
					require.Equal(t, tc.want, g)
				}
			})
		})
	}
	t.Run("FollowsTheAllocation", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p := newFeedProvider()
			cfg := p.config(true)
			var mu sync.Mutex
			allocation := 10_000.0
			cfg.Allocation = func() float64 {
				mu.Lock()
				defer mu.Unlock()
				return allocation
			}
			feed := runFeed(t, p, cfg)
			require.Equal(t, 1090*time.Second, feed.Interval())
			mu.Lock()
			allocation = 100_000 // the account's transactions grew
			mu.Unlock()
			time.Sleep(1090 * time.Second)
			synctest.Wait()
			require.Equal(t, 105*time.Second, feed.Interval(), "the next poll reads the allocation again")
			mu.Lock()
			allocation = 20_000
			mu.Unlock()
			// A smaller budget (÷ 4,880: 532 s) is reached as after a
			// speed-up: doubling at each quiet poll.
			for _, want := range []time.Duration{210 * time.Second, 420 * time.Second, 532 * time.Second, 532 * time.Second} {
				time.Sleep(feed.Interval())
				synctest.Wait()
				require.Equal(t, want, feed.Interval())
			}
		})
	})
}

// monthAtTheFloor runs a feed on p for 30 days (in a synctest bubble) with
// Stripe's floor of 10,000 reads as its allocation and returns its reads.
func monthAtTheFloor(t *testing.T, p *feedProvider) (lists, endpoints []time.Time) {
	cfg := p.config(true)
	cfg.Allocation = fixed(10_000)
	runFeed(t, p, cfg)
	time.Sleep(reconcile.ReadWindow - time.Second)
	synctest.Wait()
	return p.reads()
}

// TestFeedSpendsItsShareOfTheFloor: over 30 days of a quiet account at
// Stripe's floor of 10,000 reads, the feed's listings and endpoint reads
// together stay within a quarter of it, and use most of it (a feed much
// slower heals lost webhooks later than it could).
func TestFeedSpendsItsShareOfTheFloor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lists, endpoints := monthAtTheFloor(t, newFeedProvider())
		reads := len(lists) + len(endpoints)
		t.Logf("30 days: %d listings + %d endpoint reads = %d reads", len(lists), len(endpoints), reads)
		require.LessOrEqual(t, reads, 2_500, "a quarter of 10,000")
		require.Greater(t, reads, 2_400)
		require.LessOrEqual(t, len(endpoints), 121, "the endpoint is read every 6 h, not at every poll")
	})
}

// TestFeedSpeedsUpOnACaughtEvent: a poll that stores an event no webhook
// had brought (a lost webhook) brings the next poll to the fastest
// Interval; each quiet poll after it doubles the wait back up to the
// budget's. An event a webhook brought first changes nothing. The
// interval's changes are logged at INFO, the polls are not.
func TestFeedSpeedsUpOnACaughtEvent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs bytes.Buffer
		p := newFeedProvider()
		cfg := p.config(true)
		cfg.Allocation = fixed(10_000)
		cfg.Logger = slogTo(&logs)
		budget := 1090 * time.Second
		t0 := time.Now()
		feed := runFeed(t, p, cfg)
		sleepUntil(t0.Add(2*budget + time.Second))
		p.list(feedEvent("evt_webhooked", false), true)
		sleepUntil(t0.Add(3*budget + time.Second))
		require.Equal(t, budget, feed.Interval(), "a webhook brought it: nothing lost")
		p.list(feedEvent("evt_lost", false), false)
		sleepUntil(t0.Add(4*budget + time.Second))
		require.Equal(t, time.Minute, feed.Interval(), "the feed caught a lost webhook")
		time.Sleep(3 * time.Hour)
		lists, _ := p.reads()
		require.Greater(t, len(lists), 17)
		require.Equal(t, []time.Duration{
			budget, budget, budget, budget, // quiet, the webhooked event, the lost one
			time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 16 * time.Minute,
			budget, budget, budget, budget, budget, budget, budget, budget,
		}, gaps(lists)[:17])
		require.Equal(t, budget, feed.Interval())

		var changes []string
		infos := 0
		for line := range bytes.Lines(logs.Bytes()) {
			var rec struct {
				Level, Msg, Why string
				From, To        time.Duration
			}
			require.NoError(t, json.Unmarshal(line, &rec))
			if rec.Level != "INFO" {
				continue
			}
			infos++
			if rec.Msg == "events feed: poll interval changed" {
				changes = append(changes, rec.From.String()+"→"+rec.To.String())
				require.NotEmpty(t, rec.Why)
			}
		}
		require.Equal(t, []string{"0s→18m10s", "18m10s→1m0s", "1m0s→2m0s", "2m0s→4m0s", "4m0s→8m0s",
			"8m0s→16m0s", "16m0s→18m10s"}, changes)
		require.Equal(t, len(changes)+1, infos, "the interval's changes and the caught event; no poll at INFO")
	})
}

// TestFeedReadsTheEndpointOnlyWhenItMatters: a quiet poll is one read
// (the listing): the endpoint's status is read at a leader's first poll,
// once every EndpointEvery, at a poll that lists an event not delivered
// yet (and the feed then polls fast), and at every poll while it is
// disabled (fast too, the feed being the only signal, but never faster
// than the whole allocation pays for, however long it stays disabled).
func TestFeedReadsTheEndpointOnlyWhenItMatters(t *testing.T) {
	budget := 1090 * time.Second
	start := func(t *testing.T) (*feedProvider, *reconcile.EventsFeed) {
		p := newFeedProvider()
		cfg := p.config(true)
		cfg.Allocation = fixed(10_000)
		return p, runFeed(t, p, cfg)
	}
	t.Run("FirstPollAndEveryEndpointEvery", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p, _ := start(t)
			t0 := time.Now()
			time.Sleep(13 * time.Hour)
			lists, endpoints := p.reads()
			require.Len(t, lists, 43) // 13 h ÷ 1,090 s, and the first
			// The first poll, then the first poll 6 h after each read.
			require.Equal(t, []time.Time{t0, t0.Add(20 * budget), t0.Add(40 * budget)}, endpoints)
		})
	})
	t.Run("Undelivered", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			t0 := time.Now()
			p, feed := start(t)
			sleepUntil(t0.Add(3*budget + time.Second))
			_, before := p.reads()
			require.Len(t, before, 1)
			// Stripe has not delivered it everywhere yet; the webhook to
			// billsync came (nothing caught): the endpoint may be failing.
			p.list(feedEvent("evt_pending", true), true)
			sleepUntil(t0.Add(4*budget + time.Second))
			_, endpoints := p.reads()
			require.Len(t, endpoints, 2, "read at the poll that listed it")
			require.Equal(t, time.Minute, feed.Interval())
			// Listed again by the overlap window: old news.
			sleepUntil(t0.Add(4*budget + time.Minute + time.Second))
			_, endpoints = p.reads()
			require.Len(t, endpoints, 2)
			require.Equal(t, 2*time.Minute, feed.Interval())
		})
	})
	t.Run("Disabled", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p := newFeedProvider()
			p.setDisabled(true)
			cfg := p.config(true)
			var allocation atomic.Int64 // read by the feed's goroutine
			allocation.Store(10_000)
			cfg.Allocation = func() float64 { return float64(allocation.Load()) }
			feed := runFeed(t, p, cfg)
			require.Equal(t, 519*time.Second, feed.Interval(), "2 reads a poll at the whole allocation's pace: 2 × 30 days ÷ 10,000")
			allocation.Store(100_000) // Stripe raised it (or -stripe-read-allocation): it pays for polls every minute
			time.Sleep(519 * time.Second)
			synctest.Wait()
			require.Equal(t, time.Minute, feed.Interval())
			time.Sleep(10*time.Minute + time.Second)
			lists, endpoints := p.reads()
			require.Len(t, lists, 12)
			require.Len(t, endpoints, 12, "read at every poll while disabled")
			p.setDisabled(false) // re-enabled in the dashboard
			time.Sleep(time.Hour)
			lists, endpoints = p.reads()
			require.Len(t, endpoints, 13, "one read finds it enabled; then quiet")
			require.Greater(t, len(lists), 14)
			quiet := 105 * time.Second // the budget of 100,000
			require.Equal(t, []time.Duration{time.Minute, quiet, quiet}, gaps(lists)[11:14])
			require.Equal(t, quiet, feed.Interval())
		})
	})
	t.Run("DisabledForAMonth", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p := newFeedProvider()
			p.setDisabled(true)
			lists, endpoints := monthAtTheFloor(t, p)
			t.Logf("30 days disabled: %d listings + %d endpoint reads", len(lists), len(endpoints))
			require.LessOrEqual(t, len(lists)+len(endpoints), 10_000, "within the whole allocation")
			require.Greater(t, len(lists)+len(endpoints), 9_900)
			require.Equal(t, len(lists), len(endpoints), "the endpoint read at every poll")
		})
	})
	t.Run("NewLeader", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p, _ := start(t)
			time.Sleep(time.Hour)
			p.loseLease() // another replica leads, then this one again
			synctest.Wait()
			lists, endpoints := p.reads()
			require.Len(t, endpoints, 2, "a leader's first poll reads the endpoint")
			require.Equal(t, lists[len(lists)-1], endpoints[1])
		})
	})
}

// TestFeedWithoutAllocationPollsEveryInterval: with no Allocation there is
// no budget: the feed polls every Interval, quiet or not, as it always did.
func TestFeedWithoutAllocationPollsEveryInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newFeedProvider()
		cfg := p.config(true)
		cfg.Interval = 2 * time.Minute
		feed := runFeed(t, p, cfg)
		require.Equal(t, 2*time.Minute, feed.Interval())
		time.Sleep(time.Hour + time.Second)
		p.list(feedEvent("evt_lost", true), false)
		time.Sleep(time.Hour)
		lists, _ := p.reads()
		require.Len(t, lists, 61)
		for _, g := range gaps(lists) {
			require.Equal(t, 2*time.Minute, g)
		}
		require.Equal(t, 2*time.Minute, feed.Interval())
	})
}

func TestNewFeedRefusesABadShare(t *testing.T) {
	p := newFeedProvider()
	for name, share := range map[string]float64{"Negative": -0.25, "OverOne": 1.5, "NaN": math.NaN()} {
		t.Run(name, func(t *testing.T) {
			cfg := p.config(false)
			cfg.Share = share
			_, err := reconcile.NewEventsFeed(cfg)
			require.ErrorContains(t, err, "share")
		})
	}
	t.Run("EndpointEveryNegative", func(t *testing.T) {
		cfg := p.config(false)
		cfg.EndpointEvery = -time.Hour
		_, err := reconcile.NewEventsFeed(cfg)
		require.Error(t, err)
	})
}
