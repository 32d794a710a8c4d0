package reconcile

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"
)

// The events feed is a second signal beside webhooks: on one replica at a
// time, every interval, it lists the provider's events created since its
// cursor (less an overlap window, because a list may show an event a
// little after its creation time) and stores each one through the intake's
// own call (Inbox.StoreReceipt), so an event is one row whatever brought
// it, with a receipt per source, and its customer is queued like a
// webhook's. An event the feed stores before any webhook did is a webhook
// that was late or lost: it is counted as caught.
//
// The cursor moves only past stored events, and only once a whole listing
// is stored: a crash between a page and the cursor write lists that page
// again (its events are already stored: nothing doubles), never skips one.
//
// Every poll is a read the provider counts: Stripe allocates an account
// reads per rolling 30 days (500 a transaction, at least 10,000), and a
// feed polling every minute would spend 43,200 of them listing nothing.
// So the feed paces itself by the allocation (FeedConfig.Allocation): a
// quiet feed polls as often as its Share of the allocation pays for, a
// poll that finds a webhook lost or late brings the next one down to the
// fastest Interval, and each quiet poll after it doubles the wait back up
// to the budget's.

// EventsFeedEvent is one listed event.
type EventsFeedEvent struct {
	Event Event
	// Undelivered: the provider has not delivered it to every webhook
	// endpoint yet (Stripe's pending_webhooks > 0, delivery_success=false).
	Undelivered bool
}

// EventsFeedPage is one page of a listing, newest first.
type EventsFeedPage struct {
	Events []EventsFeedEvent
	// Next is the cursor of the next (older) page; "" when none.
	Next string
}

// EventSource lists a provider's events. *stripe.Client is one.
type EventSource interface {
	// ListEvents returns a page of the events created at or after since,
	// newest first, from page cursor after ("" the newest).
	ListEvents(ctx context.Context, since time.Time, after string) (EventsFeedPage, error)
}

// EndpointChecker reads whether the provider still delivers webhooks.
type EndpointChecker interface {
	// WebhookEndpoint returns the endpoint's id and whether the provider
	// has it enabled. ErrNotFound: no such endpoint.
	WebhookEndpoint(ctx context.Context) (id string, enabled bool, err error)
}

// EventsFeedState is what the store keeps of a provider's feed, or of
// one of its connected accounts' (Stripe Connect).
type EventsFeedState struct {
	Provider string `json:"provider"`
	// Account is the connected account whose feed this is; "" the
	// platform's own.
	Account string `json:"account,omitempty"`
	// Cursor is the newest event time stored; zero before the first poll.
	Cursor          time.Time  `json:"cursor"`
	NewestEventAt   *time.Time `json:"newest_event_at,omitempty"`
	PolledAt        time.Time  `json:"polled_at"`
	Polls           int64      `json:"polls"`
	Caught          int64      `json:"caught"`
	Undelivered     int        `json:"undelivered"`
	EndpointID      string     `json:"endpoint_id,omitempty"`
	EndpointEnabled *bool      `json:"endpoint_enabled,omitempty"`
}

// EventsFeedPoll is what one poll did, for the store to record with the cursor.
type EventsFeedPoll struct {
	// Account is the connected account whose feed polled; "" the
	// platform's own.
	Account       string
	Cursor        time.Time // the new cursor (the old one when nothing newer was stored)
	NewestEventAt time.Time // zero: no event listed
	Undelivered   int       // listed events the provider had not delivered
	// EndpointID and EndpointEnabled are the webhook endpoint's health;
	// EndpointChecked false leaves what was recorded.
	EndpointChecked bool
	EndpointID      string
	EndpointEnabled bool
}

// EventsFeedStore is what the feed needs of the store.
type EventsFeedStore interface {
	Inbox
	Now(ctx context.Context) (time.Time, error)
	// EventsFeedLock takes the provider's feed lease until release (see
	// SweepStore.SweepLock); ErrLeaseHeld when another poller has it.
	EventsFeedLock(ctx context.Context, provider string) (held context.Context, release func(), err error)
	// OpenEventsFeed returns the feed state of the provider's account (""
	// the platform's own, else a connected account), recording start as
	// the cursor of a feed that never polled. The store counts an event
	// the feed stores first (StoreReceipt with SourceFeed, no webhook
	// before it) in the Caught of its account's feed (the account its
	// dedupe key names), in the event's own transaction.
	OpenEventsFeed(ctx context.Context, provider, account string, start time.Time) (EventsFeedState, error)
	// EventsFeedStored returns which of the dedupe keys the feed has stored
	// already (a receipt from the feed).
	EventsFeedStored(ctx context.Context, provider string, keys []string) (map[string]bool, error)
	// SaveEventsFeedPoll records a finished poll of p.Account's feed: the
	// cursor and the health; it clears a connected account's backoff.
	SaveEventsFeedPoll(ctx context.Context, provider string, p EventsFeedPoll) error
}

// Feed defaults.
const (
	// DefaultFeedInterval is the fastest the feed polls: after a poll
	// that caught a lost webhook, and always when it has no Allocation.
	DefaultFeedInterval = time.Minute
	// DefaultFeedOverlap is how far before its cursor each poll lists
	// again: Stripe may show an event in its list a little after the
	// event's created second.
	DefaultFeedOverlap = 2 * time.Minute
	// DefaultFeedShare is the share of the read allocation the feed
	// spends: a quarter. The rest is for the reads that do the work: the
	// worker's fetch of each customer an event names (a webhook's or the
	// feed's), the sweep's listing of every customer, support's resyncs
	// and previews. Those grow with the account's transactions, as the
	// allocation does; the feed's idle polling does not.
	DefaultFeedShare = 0.25
	// DefaultEndpointEvery is how often a quiet feed reads the webhook
	// endpoint's status: 120 reads of 30 days. Stripe disables an endpoint
	// only after days of failed deliveries, and meanwhile the events it
	// lists show them undelivered, which has the endpoint read at once.
	DefaultEndpointEvery = 6 * time.Hour
	// ReadWindow is what a read allocation counts: a rolling 30 days.
	ReadWindow = 30 * 24 * time.Hour
)

// feedSlowest is the slowest the feed polls, whatever its budget (its
// Interval when that is slower): an allocation too small to pay for
// hourly polls (Share of it under 840 reads a month) is a mistake to see
// in the log, not a reason to heal lost webhooks a day late.
const feedSlowest = time.Hour

// EventsFeedConfig configures a Feed.
type EventsFeedConfig struct {
	Provider string
	Source   EventSource
	Store    EventsFeedStore
	// Endpoint, when set, is read at a leader's first poll, at a poll
	// that lists events the provider has not delivered yet, at every poll
	// while the last read found it disabled (an alert), and otherwise once
	// every EndpointEvery.
	Endpoint EndpointChecker
	// Interval is the fastest the feed polls (-events-poll): after a poll
	// that caught events no webhook had brought, listed undelivered ones,
	// or found the endpoint disabled. Quiet, it polls at the interval its
	// budget gives, never faster than this. Default DefaultFeedInterval.
	Interval time.Duration
	// Allocation returns the provider's read allocation now, in reads per
	// ReadWindow; it is called at every poll (it follows the account's
	// transactions). nil: no budget, the feed polls every Interval.
	Allocation func() float64
	// Share is the part of Allocation the feed's own reads (the events
	// list and the endpoint's status) may spend, in (0, 1]; default
	// DefaultFeedShare.
	Share float64
	// EndpointEvery is how often a quiet feed reads the endpoint; default
	// DefaultEndpointEvery. Its reads are counted in the budget.
	EndpointEvery time.Duration
	Overlap       time.Duration // default DefaultFeedOverlap
	// Start is how far back the very first poll lists; default Overlap.
	Start  time.Duration
	Logger *slog.Logger
}

// EventsFeed polls a provider's events list. Run it on every replica: its lease
// lets one replica lead (poll) at a time.
type EventsFeed struct {
	cfg EventsFeedConfig
	log *slog.Logger

	mu sync.Mutex
	// interval is the wait after the last poll; 0 before the first.
	interval time.Duration
	// endpointReadAt is when this replica last read the endpoint (a
	// failed read too: it spent a read); zero when it has not since it
	// began to lead. endpointDisabled: the last read found it disabled.
	endpointReadAt   time.Time
	endpointDisabled bool
}

// NewEventsFeed checks cfg and returns a Feed.
func NewEventsFeed(cfg EventsFeedConfig) (*EventsFeed, error) {
	if cfg.Provider == "" || cfg.Source == nil || cfg.Store == nil {
		return nil, errors.New("events feed: provider, source and store are required")
	}
	if cfg.Interval < 0 || cfg.Overlap < 0 || cfg.Start < 0 || cfg.EndpointEvery < 0 {
		return nil, errors.New("events feed: interval, overlap, start and endpoint-every must not be negative")
	}
	if !(cfg.Share >= 0 && cfg.Share <= 1) {
		return nil, fmt.Errorf("events feed: share %v is not a fraction of the read allocation (0 < share <= 1)", cfg.Share)
	}
	cfg.Interval = cmp.Or(cfg.Interval, DefaultFeedInterval)
	cfg.Share = cmp.Or(cfg.Share, DefaultFeedShare)
	cfg.EndpointEvery = cmp.Or(cfg.EndpointEvery, DefaultEndpointEvery)
	cfg.Overlap = cmp.Or(cfg.Overlap, DefaultFeedOverlap)
	cfg.Start = cmp.Or(cfg.Start, cfg.Overlap)
	log := cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	return &EventsFeed{cfg: cfg, log: log.With(slog.String("provider", cfg.Provider))}, nil
}

// feedTakeover bounds how long a replica that does not lead the feed
// waits before it tries to take the lease again (its interval when
// shorter): a leader killed -9 is replaced within its lease's TTL and this.
const feedTakeover = 5 * time.Second

// Run leads the feed whenever this replica holds its lease, until ctx
// ends: the leader polls at once and then at the interval its pace gives
// (see Interval), holding the lease between polls, so replicas together
// poll once an interval, not once each. The others try to take the lease
// every feedTakeover (or the fastest interval, when shorter). A failed
// poll is logged and tried again after the interval: the cursor has not
// moved.
func (f *EventsFeed) Run(ctx context.Context) {
	leadership{lock: func(ctx context.Context) (context.Context, func(), error) {
		return f.cfg.Store.EventsFeedLock(ctx, f.cfg.Provider)
	}, retry: min(f.cfg.Interval, feedTakeover), log: f.log, what: "events feed",
		standby: "events poll skipped: another replica is polling"}.run(ctx, f.lead)
}

// lead polls at once and then after each poll's interval until ctx ends
// or the lease (held) is lost. The wait runs from the end of a poll: a
// slow listing (a backlog) delays the next, never doubles it up.
func (f *EventsFeed) lead(ctx, held context.Context) {
	ctx, cancel := whileHeld(ctx, held)
	defer cancel()
	f.mu.Lock()
	// The endpoint may have changed while another replica led.
	f.endpointReadAt = time.Time{}
	f.mu.Unlock()
	t := time.NewTimer(f.cfg.Interval)
	defer t.Stop()
	for ctx.Err() == nil {
		res, err := f.poll(ctx)
		switch {
		case ctx.Err() != nil:
			continue
		case err != nil:
			f.log.WarnContext(ctx, "events poll failed; the next poll lists from the same cursor", slog.Any("error", err))
		default:
			f.log.DebugContext(ctx, "events polled", slog.Int("listed", res.Listed), slog.Int("stored", res.Stored),
				slog.Int("caught", res.Caught), slog.Int("undelivered", res.Undelivered), slog.Time("cursor", res.Cursor))
		}
		t.Reset(f.pace(ctx, res, err != nil))
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	}
	if held.Err() != nil {
		f.log.WarnContext(ctx, "events feed: lease lost; another replica leads now", slog.Any("error", context.Cause(held)))
	}
}

// Interval returns how long the feed waits after its last poll: the
// budget's interval when quiet, down to FeedConfig.Interval after a poll
// that found a webhook lost; FeedConfig.Interval before the first poll.
// Safe for concurrent use (metrics, the console).
func (f *EventsFeed) Interval() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return cmp.Or(f.interval, f.cfg.Interval)
}

// BudgetInterval returns the interval the read budget gives a quiet feed
// now: the slowest it polls while webhooks deliver (Interval without an
// Allocation).
func (f *EventsFeed) BudgetInterval() time.Duration {
	interval, _, _ := f.budgetInterval()
	return interval
}

// pace returns the wait before the next poll, after a poll that did res
// (failed: it ended early), and logs at INFO when the wait changes. A
// poll that caught events no webhook had brought, listed events the
// provider has not delivered, or found the endpoint disabled brings it to
// the fastest Interval (a disabled endpoint: within the whole allocation,
// see disabledInterval): webhooks are failing, and the feed is what heals
// their accounts. A quiet poll doubles it, up to the budget's interval.
func (f *EventsFeed) pace(ctx context.Context, res PollResult, failed bool) time.Duration {
	budget, alloc, budgetWhy := f.budgetInterval()
	f.mu.Lock()
	from := f.interval
	var to time.Duration
	why := ""
	switch {
	case res.Caught > 0:
		to, why = f.cfg.Interval, "the feed caught events no webhook had brought"
	case res.Undelivered > 0:
		to, why = f.cfg.Interval, "the provider lists events it has not delivered to every webhook endpoint"
	case f.endpointDisabled:
		to, why = f.disabledInterval(alloc), "the webhook endpoint is disabled"
	case from == 0:
		to, why = budget, budgetWhy
	case failed:
		// No news of the webhooks: keep the pace, within the budget.
		to, why = min(from, budget), "the read allocation grew"
	default:
		to, why = min(2*from, budget), "quiet polls: webhooks deliver"
		if to < from {
			why = "the read allocation grew"
		}
	}
	f.interval = to
	f.mu.Unlock()
	if to != from {
		attrs := []slog.Attr{slog.Duration("from", from), slog.Duration("to", to), slog.String("why", why)}
		if f.cfg.Allocation != nil {
			attrs = append(attrs, slog.Float64("allocation", alloc), slog.Float64("share", f.cfg.Share),
				slog.Duration("budget_interval", budget))
		}
		f.log.LogAttrs(ctx, slog.LevelInfo, "events feed: poll interval changed", attrs...)
	}
	return to
}

// budgetInterval returns the interval at which the feed's reads spend
// Share of the allocation: ReadWindow ÷ (Share × allocation − the
// endpoint reads it plans, one every EndpointEvery), rounded up to the
// second, within [Interval, max(feedSlowest, Interval)]. Without an
// Allocation it is Interval. It returns the allocation read and why the
// interval is what it is.
func (f *EventsFeed) budgetInterval() (interval time.Duration, allocation float64, why string) {
	fastest := f.cfg.Interval
	if f.cfg.Allocation == nil {
		return fastest, 0, "no read budget"
	}
	slowest := max(feedSlowest, fastest)
	allocation = f.cfg.Allocation()
	endpointReads := 0.0
	if f.cfg.Endpoint != nil {
		endpointReads = float64(ReadWindow) / float64(f.cfg.EndpointEvery)
	}
	interval = f.paced(f.cfg.Share*allocation-endpointReads, 1)
	switch interval {
	case slowest:
		return interval, allocation, "the read allocation does not pay for the feed's reads: polling at the slowest"
	case fastest:
		return interval, allocation, "the read budget pays for the fastest interval"
	}
	return interval, allocation, "the read budget"
}

// paced returns the interval at which polls of perPoll reads each spend
// reads over ReadWindow, rounded up to the second, within [Interval,
// max(feedSlowest, Interval)]: the slowest when reads pay for nothing.
func (f *EventsFeed) paced(reads, perPoll float64) time.Duration {
	fastest := f.cfg.Interval
	slowest := max(feedSlowest, fastest)
	if math.IsNaN(reads) || reads <= 0 {
		return slowest
	}
	secs := math.Ceil(perPoll * ReadWindow.Seconds() / reads)
	return min(max(fastest, time.Duration(secs)*time.Second), slowest)
}

// disabledInterval is the wait while the webhook endpoint is disabled,
// however long that lasts: Interval, unless its polls (a listing and an
// endpoint read each) would spend reads faster than the whole allocation
// allows; then the interval that spends exactly that, so the feed alone
// never overspends a small account's allocation. alloc is the allocation
// budgetInterval read.
func (f *EventsFeed) disabledInterval(alloc float64) time.Duration {
	if f.cfg.Allocation == nil {
		return f.cfg.Interval
	}
	return f.paced(alloc, 2)
}

// ErrFeedBusy: another replica holds the feed lock.
var ErrFeedBusy = errors.New("events feed: another replica is polling")

// PollResult is what one poll did.
type PollResult struct {
	Listed, Stored, Caught int
	// Undelivered counts the listed events the provider had not delivered
	// to every webhook endpoint that the feed had not stored before: one
	// re-listed by the overlap window (the newest event stays listed until
	// a newer one comes) is old news, and would keep a feed fast for as
	// long as some endpoint fails.
	Undelivered int
	Cursor      time.Time
}

// Poll lists and stores once, under the feed lock.
func (f *EventsFeed) Poll(ctx context.Context) (PollResult, error) {
	held, release, err := f.cfg.Store.EventsFeedLock(ctx, f.cfg.Provider)
	if errors.Is(err, ErrLeaseHeld) {
		return PollResult{}, ErrFeedBusy
	}
	if err != nil {
		return PollResult{}, err
	}
	defer release()
	ctx, cancel := whileHeld(ctx, held)
	defer cancel()
	return f.poll(ctx)
}

func (f *EventsFeed) poll(ctx context.Context) (PollResult, error) {
	p := feedPoller{provider: f.cfg.Provider, source: f.cfg.Source, store: f.cfg.Store,
		overlap: f.cfg.Overlap, start: f.cfg.Start, log: f.log}
	res, rec, err := p.list(ctx)
	if err != nil {
		return res, err
	}
	if f.endpointDue(res) {
		f.checkEndpoint(ctx, &rec)
	}
	if err := f.cfg.Store.SaveEventsFeedPoll(ctx, f.cfg.Provider, rec); err != nil {
		return res, err
	}
	return res, nil
}

// feedPoller lists one account's events since its feed's cursor and
// stores them: the poll the platform's EventsFeed and each connected
// account's (ConnectFeed) share.
type feedPoller struct {
	provider string
	account  string // "" the platform's own; else the connected account whose events source lists
	source   EventSource
	store    EventsFeedStore
	overlap  time.Duration
	start    time.Duration
	log      *slog.Logger
}

// list lists and stores the events since the cursor (less the overlap)
// and returns what it did and what to record; the caller records it
// (SaveEventsFeedPoll) once it has added its own.
func (p feedPoller) list(ctx context.Context) (PollResult, EventsFeedPoll, error) {
	now, err := p.store.Now(ctx)
	if err != nil {
		return PollResult{}, EventsFeedPoll{}, err
	}
	state, err := p.store.OpenEventsFeed(ctx, p.provider, p.account, now.Add(-p.start+p.overlap))
	if err != nil {
		return PollResult{}, EventsFeedPoll{}, err
	}
	res := PollResult{Cursor: state.Cursor}
	rec := EventsFeedPoll{Account: p.account}
	since := state.Cursor.Add(-p.overlap)
	// Every page is stored before the next is read, and the cursor is
	// written once the listing is done: a crash re-reads, never skips.
	for after := ""; ; {
		page, err := p.source.ListEvents(ctx, since, after)
		if err != nil {
			return res, rec, fmt.Errorf("list %s events since %s: %w", p.name(), since.Format(time.RFC3339), err)
		}
		if err := p.storePage(ctx, page, &res, &rec); err != nil {
			return res, rec, err
		}
		if after = page.Next; after == "" {
			break
		}
	}
	rec.Cursor = res.Cursor
	return res, rec, nil
}

// name names the feed in errors: the provider, and the connected account.
func (p feedPoller) name() string {
	if p.account == "" {
		return p.provider
	}
	return p.provider + " " + p.account
}

// storePage stores a page's events the feed has not stored yet, through
// the intake's call, and moves res.Cursor to the newest event time stored.
func (p feedPoller) storePage(ctx context.Context, page EventsFeedPage, res *PollResult, rec *EventsFeedPoll) error {
	keys := make([]string, 0, len(page.Events))
	for _, e := range page.Events {
		keys = append(keys, e.Event.DedupeKey)
	}
	stored, err := p.store.EventsFeedStored(ctx, p.provider, keys)
	if err != nil {
		return err
	}
	for _, e := range page.Events {
		res.Listed++
		if e.Undelivered {
			rec.Undelivered++
			if !stored[e.Event.DedupeKey] {
				res.Undelivered++
			}
		}
		if t := e.Event.Time; t.After(rec.NewestEventAt) {
			rec.NewestEventAt = t
		}
		if !stored[e.Event.DedupeKey] {
			st, err := p.store.StoreReceipt(ctx, Receipt{Event: e.Event, Source: SourceFeed})
			if err != nil {
				return fmt.Errorf("store %s event %s from the feed: %w", p.name(), e.Event.EventID, err)
			}
			stored[e.Event.DedupeKey] = true
			res.Stored++
			if !st.Duplicate {
				// No webhook brought it before the feed: late or lost.
				res.Caught++
				p.log.InfoContext(ctx, "events feed caught an event no webhook had brought",
					slog.String("event", e.Event.EventID), slog.String("type", e.Event.Type),
					slog.String("customer", e.Event.CustomerID))
			}
		}
		if t := e.Event.Time; t.After(res.Cursor) {
			res.Cursor = t
		}
	}
	return nil
}

// endpointDue says whether a poll that did res reads the endpoint: at the
// first poll since this replica began to lead, when it listed events not
// delivered yet, while the last read found the endpoint disabled, and
// otherwise once every EndpointEvery. A quiet poll is then one read.
func (f *EventsFeed) endpointDue(res PollResult) bool {
	if f.cfg.Endpoint == nil {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.endpointReadAt.IsZero() || res.Undelivered > 0 || f.endpointDisabled ||
		time.Since(f.endpointReadAt) >= f.cfg.EndpointEvery
}

// checkEndpoint reads the webhook endpoint's status into rec; a disabled
// endpoint is an alert (the provider sends nothing until it is enabled
// again: the feed is the only signal). A failed read is logged and leaves
// the recorded status as it was; it counts as a read (it spent one), so
// it is tried again EndpointEvery later, or sooner on undelivered events.
func (f *EventsFeed) checkEndpoint(ctx context.Context, rec *EventsFeedPoll) {
	id, enabled, err := f.cfg.Endpoint.WebhookEndpoint(ctx)
	f.mu.Lock()
	f.endpointReadAt = time.Now()
	if err == nil {
		f.endpointDisabled = !enabled
	}
	f.mu.Unlock()
	if err != nil {
		f.log.WarnContext(ctx, "events feed: read the webhook endpoint", slog.Any("error", err))
		return
	}
	rec.EndpointChecked, rec.EndpointID, rec.EndpointEnabled = true, id, enabled
	if !enabled {
		f.log.ErrorContext(ctx, "ALERT: the provider has disabled the webhook endpoint; billsync hears of changes only through the events feed until it is enabled again",
			slog.String("endpoint", id))
	}
}

// NewestEvent is NewestEventAt, the zero time when no event was seen.
func (s EventsFeedState) NewestEvent() time.Time {
	if s.NewestEventAt == nil {
		return time.Time{}
	}
	return *s.NewestEventAt
}

// EndpointStatus says what the last poll read of the webhook endpoint:
// enabled, disabled, or "not read" (webhook-free, or no read yet).
func (s EventsFeedState) EndpointStatus() string {
	switch {
	case s.EndpointEnabled == nil:
		return "not read"
	case *s.EndpointEnabled:
		return "enabled"
	}
	return "disabled"
}
