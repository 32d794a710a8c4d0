package store_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store"
	"github.com/billsync/billsync/store/storetest"
)

// listSource is an EventSource over a fixed list of events (newest first),
// paged by pageSize.
type listSource struct {
	events   []reconcile.EventsFeedEvent
	pageSize int
}

func (s listSource) ListEvents(_ context.Context, since time.Time, after string) (reconcile.EventsFeedPage, error) {
	var page reconcile.EventsFeedPage
	started := after == ""
	for i, e := range s.events {
		if !started {
			started = e.Event.EventID == after
			continue
		}
		if e.Event.Time.Before(since) {
			continue
		}
		if len(page.Events) == s.pageSize {
			if i < len(s.events) {
				page.Next = page.Events[len(page.Events)-1].Event.EventID
			}
			break
		}
		page.Events = append(page.Events, e)
	}
	return page, nil
}

func feedEvent(id, customer string, at time.Time) reconcile.EventsFeedEvent {
	return reconcile.EventsFeedEvent{Event: reconcile.Event{
		Provider: "stripe", DedupeKey: id, EventID: id, Type: "customer.subscription.updated",
		CustomerID: customer, Time: at, Payload: []byte(`{}`)}}
}

func newFeed(t *testing.T, st *store.Store, src reconcile.EventSource) *reconcile.EventsFeed {
	t.Helper()
	f, err := reconcile.NewEventsFeed(reconcile.EventsFeedConfig{Provider: "stripe", Source: src, Store: st, Start: time.Hour})
	require.NoError(t, err)
	return f
}

// sourcesOf returns each stored event's receipt sources, sorted.
func sourcesOf(t *testing.T, st *store.Store) map[string][]string {
	t.Helper()
	keyOf := map[int64]string{}
	for _, e := range storetest.Events(t, st) {
		keyOf[e.ID] = e.DedupeKey
	}
	out := map[string][]string{}
	for _, r := range storetest.Receipts(t, st) {
		out[keyOf[r.EventID]] = append(out[keyOf[r.EventID]], r.Source)
	}
	for _, s := range out {
		sort.Strings(s)
	}
	return out
}

// TestFeedAndWebhookStoreOneEvent: an event delivered by webhook and
// listed by the feed, in either order or at once, is one event row with a
// receipt from each source; the feed counts as caught only the events no
// webhook brought first, and a re-read of its overlap window adds nothing.
func TestFeedAndWebhookStoreOneEvent(t *testing.T) {
	ctx := context.Background()
	now := time.Now().Add(-time.Minute)
	webhook := func(st *store.Store, e reconcile.EventsFeedEvent) {
		_, err := st.StoreReceipt(ctx, reconcile.Receipt{Event: e.Event, Source: reconcile.SourceWebhook})
		require.NoError(t, err)
	}
	caught := func(st *store.Store) int64 {
		state, err := st.EventsFeedState(ctx, "stripe")
		require.NoError(t, err)
		return state.Caught
	}

	t.Run("WebhookFirst", func(t *testing.T) {
		st := storetest.NewStore(t)
		e := feedEvent("evt_w", "cus_1", now)
		webhook(st, e)
		res, err := newFeed(t, st, listSource{events: []reconcile.EventsFeedEvent{e}, pageSize: 100}).Poll(ctx)
		require.NoError(t, err)
		require.Equal(t, 0, res.Caught)
		require.Len(t, storetest.Events(t, st), 1)
		require.Equal(t, map[string][]string{"evt_w": {"feed", "webhook"}}, sourcesOf(t, st))
		require.Zero(t, caught(st))
	})
	t.Run("FeedFirst", func(t *testing.T) {
		st := storetest.NewStore(t)
		e := feedEvent("evt_f", "cus_1", now)
		feed := newFeed(t, st, listSource{events: []reconcile.EventsFeedEvent{e}, pageSize: 100})
		_, err := feed.Poll(ctx)
		require.NoError(t, err)
		require.Equal(t, reconcile.TriggerFeed, storetest.QueueRowOf(t, st, "stripe", "cus_1").Trigger)
		webhook(st, e)
		// The next poll lists it again (overlap): no new receipt.
		_, err = feed.Poll(ctx)
		require.NoError(t, err)
		require.Len(t, storetest.Events(t, st), 1)
		require.Equal(t, map[string][]string{"evt_f": {"feed", "webhook"}}, sourcesOf(t, st))
		require.EqualValues(t, 1, caught(st))
		require.Equal(t, 2, storetest.EventByKey(t, st, "stripe", "evt_f").SeenCount)
	})
	t.Run("AtOnce", func(t *testing.T) {
		st := storetest.NewStore(t)
		var events []reconcile.EventsFeedEvent
		for i := range 300 {
			events = append(events, feedEvent(fmt.Sprintf("evt_%03d", 299-i), fmt.Sprintf("cus_%d", i%37), now.Add(-time.Duration(i)*time.Second)))
		}
		feed := newFeed(t, st, listSource{events: events, pageSize: 100})
		var wg sync.WaitGroup
		wg.Go(func() {
			for _, e := range events {
				webhook(st, e)
			}
		})
		var polled reconcile.PollResult
		wg.Go(func() {
			var err error
			polled, err = feed.Poll(ctx)
			require.NoError(t, err)
		})
		wg.Wait()
		require.Len(t, storetest.Events(t, st), len(events), "one row per event id")
		sources := sourcesOf(t, st)
		for _, e := range events {
			require.Equal(t, []string{"feed", "webhook"}, sources[e.Event.EventID], e.Event.EventID)
		}
		require.EqualValues(t, polled.Caught, caught(st), "caught = the events the feed stored first")
		require.Equal(t, 300, polled.Listed)
	})
}

// TestFeedCatchesAnEventListedLate: Stripe may list an event a little
// after its created second. The fake's list lag shows it only after the
// poll that moved the cursor past it; the next poll's overlap window
// still reaches it, and it is stored and caught.
func TestFeedCatchesAnEventListedLate(t *testing.T) {
	ctx := context.Background()
	st := storetest.NewStore(t)
	h := testenv.ForTest(t, testenv.Stripe, testenv.Options{})
	feed, err := reconcile.NewEventsFeed(reconcile.EventsFeedConfig{Provider: "stripe", Source: h.Stripe.Client, Store: st,
		Overlap: 10 * time.Minute, Start: time.Hour})
	require.NoError(t, err)

	cusA, err := h.Stripe.Customer(ctx, "u_a")
	require.NoError(t, err)
	_, err = h.Stripe.Subscribe(ctx, cusA, "price_pro")
	require.NoError(t, err)
	// cusB's events are made one fake minute later but listed only five
	// fake minutes after they were made.
	h.Stripe.Fake.SetEventListLag(5 * time.Minute)
	h.Stripe.Fake.Clock().Advance(time.Minute)
	cusB, err := h.Stripe.Customer(ctx, "u_b")
	require.NoError(t, err)
	_, err = h.Stripe.Subscribe(ctx, cusB, "price_pro")
	require.NoError(t, err)
	h.Stripe.Fake.Clock().Advance(time.Minute)
	h.Stripe.Fake.SetEventListLag(0)
	cusC, err := h.Stripe.Customer(ctx, "u_c")
	require.NoError(t, err)
	_, err = h.Stripe.Subscribe(ctx, cusC, "price_pro")
	require.NoError(t, err)

	_, err = feed.Poll(ctx)
	require.NoError(t, err)
	stored := func(customer string) int { return len(storetest.CustomerEvents(t, st, "stripe", customer)) }
	require.Positive(t, stored(cusA))
	require.Positive(t, stored(cusC))
	require.Zero(t, stored(cusB), "B's events are not listed yet")
	state, err := st.EventsFeedState(ctx, "stripe")
	require.NoError(t, err)
	require.True(t, state.Cursor.After(h.Stripe.Fake.Clock().Now().Add(-30*time.Second)), "the cursor moved past B's events")

	h.Stripe.Fake.Clock().Advance(5 * time.Minute) // B's events appear, older than the cursor
	res, err := feed.Poll(ctx)
	require.NoError(t, err)
	require.Positive(t, stored(cusB), "the overlap window reached B's late-listed events")
	require.Equal(t, stored(cusB), res.Caught, "only B's events were new")
	require.Equal(t, reconcile.TriggerFeed, storetest.QueueRowOf(t, st, "stripe", cusB).Trigger)
}

// failAfter is an EventSource that fails every listing after its first n
// pages, as a poller killed between a page and its cursor write.
type failAfter struct {
	listSource
	n     int
	pages *int
}

func (s failAfter) ListEvents(ctx context.Context, since time.Time, after string) (reconcile.EventsFeedPage, error) {
	if *s.pages == s.n {
		return reconcile.EventsFeedPage{}, fmt.Errorf("the poller died")
	}
	*s.pages++
	return s.listSource.ListEvents(ctx, since, after)
}

// TestFeedCountsCaughtWithTheEvent: an event the feed stores first is
// counted caught in the event's own transaction, not when the poll ends:
// the count is never behind an account it already queued, a poll that dies
// after its first page keeps that page's count, and the poll that re-reads
// the page counts nothing twice.
func TestFeedCountsCaughtWithTheEvent(t *testing.T) {
	ctx := context.Background()
	st := storetest.NewStore(t)
	now := time.Now().Add(-time.Minute)
	var events []reconcile.EventsFeedEvent
	for i := range 150 {
		events = append(events, feedEvent(fmt.Sprintf("evt_%03d", 149-i), fmt.Sprintf("cus_%d", i), now.Add(-time.Duration(i)*time.Second)))
	}
	// The webhook brought ten of the first page's events first.
	for _, e := range events[:10] {
		_, err := st.StoreReceipt(ctx, reconcile.Receipt{Event: e.Event, Source: reconcile.SourceWebhook})
		require.NoError(t, err)
	}
	pages := 0
	_, err := newFeed(t, st, failAfter{listSource{events: events, pageSize: 100}, 1, &pages}).Poll(ctx)
	require.ErrorContains(t, err, "the poller died")
	state, err := st.EventsFeedState(ctx, "stripe")
	require.NoError(t, err)
	require.Zero(t, state.Polls, "no poll was recorded")
	require.EqualValues(t, 90, state.Caught, "the first page's events no webhook brought, counted as they were stored")

	res, err := newFeed(t, st, listSource{events: events, pageSize: 100}).Poll(ctx)
	require.NoError(t, err)
	require.Equal(t, 50, res.Caught, "the re-read first page is stored already")
	state, err = st.EventsFeedState(ctx, "stripe")
	require.NoError(t, err)
	require.EqualValues(t, 1, state.Polls)
	require.EqualValues(t, 140, state.Caught)
}
