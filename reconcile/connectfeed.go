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

// Stripe Connect: each connected account billsync serves has an events
// feed of its own (its cursor is its events_feed row), polled on behalf
// of the account exactly as the platform's feed is polled (feedPoller):
// a webhook lost on a connected account is caught by that account's feed.
//
// Thousands of accounts share the platform's rate and its read allocation
// for connected accounts (500 reads a transaction across all of them), so
// one ConnectFeed schedules them all, on one replica at a time (a lease),
// the way production connectors do: a bounded pool of polls at once (as
// many as the events list's rate can use at the polls' observed duration),
// the account whose poll is most overdue first. Every served account is
// due one Round after its last poll; Round is what the budget pays for
// (ConnectRound). An account is never skipped for another: each dispatch
// takes the most overdue, so every account is polled within a Round plus
// the time the pool needs to get through the accounts due before it. An
// account whose poll fails (it answered 429, its reads time out) is
// backed off alone (failures, retry_at), doubling; the client slows that
// account's own requests after its 429 (providers/stripe) while the
// others keep the whole rate.
//
// The accounts are discovered (Discover) at the leader's start and every
// DiscoverEvery from the provider's list of accounts, beside the
// authorisation events the intake records; a deauthorised account's feed
// stops (its row keeps the cursor) and resumes from that cursor when the
// account authorises the platform again.

// ConnectSource reads a platform's connected accounts at the provider.
// *stripe.Client is one.
type ConnectSource interface {
	// ListAccounts returns a page of the ids of the accounts connected to
	// the platform, from page cursor after ("" the first), and the next
	// page's cursor ("" when none).
	ListAccounts(ctx context.Context, after string) (accounts []string, next string, err error)
	// ListConnectedEvents is EventSource.ListEvents on behalf of the
	// connected account: its events, keyed under it (Connected).
	ListConnectedEvents(ctx context.Context, account string, since time.Time, after string) (EventsFeedPage, error)
}

// ConnectFeedDue is a connected account's feed as the scheduler sees it.
type ConnectFeedDue struct {
	Account string
	// PolledAt is its last poll (nil: it never polled); RetryAt, when set,
	// the end of its backoff after Failures failed polls in a row.
	PolledAt *time.Time
	RetryAt  *time.Time
	Failures int
}

// DueAt is when the account's next poll is due: at the end of its
// backoff, else round after its last poll; the zero time (now) for an
// account that never polled.
func (d ConnectFeedDue) DueAt(round time.Duration) time.Time {
	switch {
	case d.RetryAt != nil:
		return *d.RetryAt
	case d.PolledAt != nil:
		return d.PolledAt.Add(round)
	}
	return time.Time{}
}

// ConnectDueQuery asks the store for the connected accounts to poll next.
type ConnectDueQuery struct {
	Policy ConnectPolicy // the accounts served (only authorised ones are)
	// Round orders a backed-off account among the others: by its
	// RetryAt − Round, the last poll its backoff stands for.
	Round time.Duration
	Skip  []string // accounts being polled now
	Limit int
}

// ConnectFeedStore is what the ConnectFeed needs of the store.
type ConnectFeedStore interface {
	EventsFeedStore
	ConnectedAccountStore
	// ConnectFeedLock takes the provider's Connect feed lease (see
	// EventsFeedLock); ErrLeaseHeld when another replica has it.
	ConnectFeedLock(ctx context.Context, provider string) (held context.Context, release func(), err error)
	// DueConnectFeeds returns the feeds of at most q.Limit of the served
	// accounts that authorise the platform, not in q.Skip, most overdue
	// first (never polled first, then by last poll, a backed-off one by
	// RetryAt − Round), and how many accounts, q.Skip's left out, are
	// served and authorised.
	DueConnectFeeds(ctx context.Context, provider string, q ConnectDueQuery) (feeds []ConnectFeedDue, served int, err error)
	// FailConnectFeed records a failed poll of the account's feed: one
	// more failure, and no poll before retry from now.
	FailConnectFeed(ctx context.Context, provider, account string, retry time.Duration) error
}

// Connect feed defaults.
const (
	// DefaultConnectPool is the fewest connected accounts' polls that run
	// at once, and how many before a poll's duration is known. A quiet
	// poll is one request and its database work: at Stripe's 300 ms, 8
	// polls in flight ask about 23 a second. With a Rate the pool grows
	// to what that rate can use at the polls' observed duration
	// (Budget.InFlight), at most MaxConnectPool: about 11 at 300 ms and
	// 25 a second, 15 when the database work makes a poll 430 ms.
	DefaultConnectPool = 8
	// MaxConnectPool bounds the adapting pool.
	MaxConnectPool = 64
	// DefaultConnectDiscover is how often the leader lists the provider's
	// connected accounts: the authorisation events announce them at once;
	// the listing catches an event missed (a page a hundred accounts:
	// 100 reads a day for 10,000 accounts).
	DefaultConnectDiscover = 24 * time.Hour
	// connectRetryMin is the first backoff of an account whose poll
	// failed; it doubles with each failure in a row, up to
	// connectRetryMax or the Round, whichever is shorter.
	connectRetryMin = 30 * time.Second
	connectRetryMax = time.Hour
	// connectIdle bounds the dispatcher's wait when no account is due
	// (a backed-off account's turn, an account authorised meanwhile).
	connectIdle = 5 * time.Second
)

// ConnectFeedConfig configures a ConnectFeed.
type ConnectFeedConfig struct {
	Provider string
	Source   ConnectSource
	Store    ConnectFeedStore
	// Policy says which connected accounts are served (ConnectAll,
	// ConnectListed); of those, the ones that authorise the platform are
	// polled.
	Policy ConnectPolicy
	// Pool pins how many accounts' polls run at once. 0 (the default)
	// adapts: DefaultConnectPool until a poll's duration is known, then as
	// many as Rate can use at the polls' average duration, at least
	// DefaultConnectPool and at most MaxConnectPool (DefaultConnectPool
	// without a Rate).
	Pool int
	// Rate returns the polls a second the feeds may make: the events
	// list's rate (Stripe's 25 per operation). nil: the pool does not
	// adapt.
	Rate func() float64
	// Interval is the shortest Round (-events-poll): an account is never
	// polled more often. Default DefaultFeedInterval.
	Interval time.Duration
	// Allocation returns the read allocation of the platform's reads on
	// behalf of its connected accounts, reads per ReadWindow (Stripe: 500
	// a transaction across all of them, at least 10,000); called at every
	// dispatch. nil: no budget, Round is Interval.
	Allocation func() float64
	// Share is the part of Allocation the feeds' polls may spend;
	// default DefaultFeedShare.
	Share float64
	// DiscoverEvery is how often the leader lists the connected accounts
	// (Discover); default DefaultConnectDiscover.
	DiscoverEvery time.Duration
	Overlap       time.Duration // default DefaultFeedOverlap
	// Start is how far back an account's first poll lists; default
	// Overlap.
	Start  time.Duration
	Logger *slog.Logger
}

// ConnectFeed polls every served connected account's events feed. Run it
// on every replica: its lease lets one replica lead at a time.
type ConnectFeed struct {
	cfg ConnectFeedConfig
	log *slog.Logger

	// pollTime averages how long a poll takes (its requests and its
	// database work): the adapting pool is sized by it.
	pollTime LatencyMeter

	mu     sync.Mutex
	served int // served, authorised accounts at the last dispatch
	polls  int64
	failed int64
	caught int64
}

// poolSize is how many polls may run at once now (see
// ConnectFeedConfig.Pool).
func (f *ConnectFeed) poolSize() int {
	return connectPoolSize(f.cfg.Pool, f.cfg.Rate, f.pollTime.Latency())
}

// connectPoolSize is pinned when set; else as many polls as rate can use
// at pollTime (Budget.InFlight), within DefaultConnectPool and
// MaxConnectPool, and DefaultConnectPool while there is no rate or no
// poll has ended yet.
func connectPoolSize(pinned int, rate func() float64, pollTime time.Duration) int {
	if pinned > 0 {
		return pinned
	}
	if rate == nil || pollTime <= 0 {
		return DefaultConnectPool
	}
	return max(DefaultConnectPool, Budget{Rate: rate(), Latency: pollTime}.InFlight(MaxConnectPool))
}

// NewConnectFeed checks cfg and returns a ConnectFeed.
func NewConnectFeed(cfg ConnectFeedConfig) (*ConnectFeed, error) {
	var errs []error
	if cfg.Provider == "" || cfg.Source == nil || cfg.Store == nil {
		errs = append(errs, errors.New("provider, source and store are required"))
	}
	if !cfg.Policy.Enabled() {
		errs = append(errs, fmt.Errorf("connected accounts are not served (mode %q)", cfg.Policy.Mode))
	}
	if cfg.Pool < 0 || cfg.Interval < 0 || cfg.Overlap < 0 || cfg.Start < 0 || cfg.DiscoverEvery < 0 {
		errs = append(errs, errors.New("pool, interval, overlap, start and discover-every must not be negative"))
	}
	if !(cfg.Share >= 0 && cfg.Share <= 1) {
		errs = append(errs, fmt.Errorf("share %v is not a fraction of the read allocation (0 < share <= 1)", cfg.Share))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("connect feed: %w", err)
	}
	cfg.Interval = cmp.Or(cfg.Interval, DefaultFeedInterval)
	cfg.Share = cmp.Or(cfg.Share, DefaultFeedShare)
	cfg.DiscoverEvery = cmp.Or(cfg.DiscoverEvery, DefaultConnectDiscover)
	cfg.Overlap = cmp.Or(cfg.Overlap, DefaultFeedOverlap)
	cfg.Start = cmp.Or(cfg.Start, cfg.Overlap)
	log := cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	return &ConnectFeed{cfg: cfg, log: log.With(slog.String("provider", cfg.Provider), slog.String("component", "connect feed"))}, nil
}

// ConnectRound returns the interval between two polls of each of
// accounts connected accounts at which their polls (a read each, when
// quiet) spend share of allocation (reads per ReadWindow), rounded up to
// the second and never shorter than fastest. Without an allocation it is
// fastest. It has no upper bound: polling faster than the budget would
// spend the allocation the worker's reads need.
func ConnectRound(accounts int, allocation, share float64, fastest time.Duration) time.Duration {
	reads := share * allocation
	if accounts <= 0 || math.IsNaN(reads) || reads <= 0 {
		return fastest
	}
	secs := math.Ceil(float64(accounts) * ReadWindow.Seconds() / reads)
	if secs >= float64(math.MaxInt64/int64(time.Second)) {
		return time.Duration(math.MaxInt64)
	}
	return max(fastest, time.Duration(secs)*time.Second)
}

// Round returns the interval each served account is polled at now: what
// the budget pays for over the accounts served at the last dispatch.
func (f *ConnectFeed) Round() time.Duration {
	f.mu.Lock()
	served := f.served
	f.mu.Unlock()
	return f.round(served)
}

func (f *ConnectFeed) round(served int) time.Duration {
	if f.cfg.Allocation == nil {
		return f.cfg.Interval
	}
	return ConnectRound(served, f.cfg.Allocation(), f.cfg.Share, f.cfg.Interval)
}

// ConnectFeedView is what this replica's ConnectFeed did since it started
// (metrics, logs): per provider, never per account.
type ConnectFeedView struct {
	Provider string
	Served   int           // served, authorised accounts at the last dispatch
	Round    time.Duration // the interval each is polled at
	Pool     int           // the polls that may run at once now
	Polls    int64         // polls that succeeded
	Failed   int64         // polls that failed (the account was backed off)
	Caught   int64         // events the polls stored before any webhook
}

// View returns what the feed did on this replica.
func (f *ConnectFeed) View() ConnectFeedView {
	f.mu.Lock()
	defer f.mu.Unlock()
	return ConnectFeedView{Provider: f.cfg.Provider, Served: f.served, Round: f.round(f.served), Pool: f.poolSize(),
		Polls: f.polls, Failed: f.failed, Caught: f.caught}
}

// Run leads the Connect feed whenever this replica holds its lease, until
// ctx ends (see EventsFeed.Run).
func (f *ConnectFeed) Run(ctx context.Context) {
	leadership{lock: func(ctx context.Context) (context.Context, func(), error) {
		return f.cfg.Store.ConnectFeedLock(ctx, f.cfg.Provider)
	}, retry: feedTakeover, log: f.log, what: "connect feed", standby: "connect feed: another replica leads"}.run(ctx, f.lead)
}

// lead discovers the accounts and polls their feeds until ctx ends or the
// lease (held) is lost; the polls in flight end with it.
func (f *ConnectFeed) lead(ctx, held context.Context) {
	ctx, cancel := whileHeld(ctx, held)
	defer cancel()
	pool := newAccountPool(cmp.Or(f.cfg.Pool, MaxConnectPool))
	defer pool.wait()
	var discovered time.Time
	for ctx.Err() == nil {
		if time.Since(discovered) >= f.cfg.DiscoverEvery {
			if _, err := f.Discover(ctx); err != nil && ctx.Err() == nil {
				// Tried again at the next interval; the events keep
				// announcing accounts meanwhile.
				f.log.WarnContext(ctx, "connect feed: listing the connected accounts failed", slog.Any("error", err))
			}
			discovered = time.Now()
		}
		pool.sleep(ctx, f.dispatch(ctx, pool))
	}
	if held.Err() != nil {
		f.log.WarnContext(ctx, "connect feed: lease lost; another replica leads now", slog.Any("error", context.Cause(held)))
	}
}

// dispatch starts polls of the due accounts, most overdue first, as slots
// free up, and returns how long to wait before looking again (0: at once,
// more may be due).
func (f *ConnectFeed) dispatch(ctx context.Context, pool *accountPool) time.Duration {
	st := f.cfg.Store
	now, err := st.Now(ctx)
	if err != nil {
		f.log.WarnContext(ctx, "connect feed: no database time", slog.Any("error", err))
		return connectIdle
	}
	skip := pool.busy()
	size := f.poolSize()
	limit := 2 * size
	feeds, served, err := st.DueConnectFeeds(ctx, f.cfg.Provider,
		ConnectDueQuery{Policy: f.cfg.Policy, Round: f.Round(), Skip: skip, Limit: limit})
	if err != nil {
		if ctx.Err() == nil {
			f.log.WarnContext(ctx, "connect feed: reading the accounts due failed", slog.Any("error", err))
		}
		return connectIdle
	}
	f.setServed(ctx, served+len(skip))
	round := f.Round()
	for _, fd := range feeds {
		if due := fd.DueAt(round); due.After(now) {
			return min(due.Sub(now), connectIdle)
		}
		if pool.running() >= size {
			return connectIdle // looked at again when a poll ends
		}
		if !pool.start(ctx, fd.Account, func() { f.pollAccount(ctx, fd, round) }) {
			return 0
		}
	}
	if len(feeds) == limit {
		return 0
	}
	// Every account not in flight was dispatched: look again when a poll
	// ends (its account may be due again at once after a failure's
	// backoff elapses) or after a while (accounts authorised meanwhile).
	return connectIdle
}

// setServed records how many accounts are served, and logs the Round
// when it changes.
func (f *ConnectFeed) setServed(ctx context.Context, served int) {
	f.mu.Lock()
	from := f.served
	f.served = served
	f.mu.Unlock()
	if from != served {
		f.log.InfoContext(ctx, "connect feed: accounts served", slog.Int("accounts", served),
			slog.Duration("round", f.round(served)), slog.Int("pool", f.poolSize()))
	}
}

// pollAccount polls one account's feed (the platform feed's poll, on
// behalf of the account) and records it; a failure backs the account off
// alone.
func (f *ConnectFeed) pollAccount(ctx context.Context, fd ConnectFeedDue, round time.Duration) {
	st := f.cfg.Store
	p := feedPoller{provider: f.cfg.Provider, account: fd.Account,
		source: accountEvents{src: f.cfg.Source, account: fd.Account}, store: st,
		overlap: f.cfg.Overlap, start: f.cfg.Start, log: f.log.With(slog.String("account", fd.Account))}
	began := time.Now()
	res, rec, err := p.list(ctx)
	if err == nil {
		err = st.SaveEventsFeedPoll(ctx, f.cfg.Provider, rec)
		f.pollTime.Observe(time.Since(began))
	}
	f.mu.Lock()
	if err == nil {
		f.polls++
		f.caught += int64(res.Caught)
	} else if ctx.Err() == nil {
		f.failed++
	}
	f.mu.Unlock()
	if err == nil || ctx.Err() != nil {
		return
	}
	retry := connectBackoff(fd.Failures, round)
	f.log.WarnContext(ctx, "connect feed: poll failed; the account is backed off, the others keep their turns",
		slog.String("account", fd.Account), slog.Int("failures", fd.Failures+1), slog.Duration("retry_in", retry),
		slog.Any("error", err))
	if ferr := st.FailConnectFeed(ctx, f.cfg.Provider, fd.Account, retry); ferr != nil && ctx.Err() == nil {
		f.log.WarnContext(ctx, "connect feed: recording a failed poll failed", slog.String("account", fd.Account),
			slog.Any("error", ferr))
	}
}

// connectBackoff is the wait after failures+1 failed polls in a row:
// connectRetryMin doubling, at most connectRetryMax or round, whichever
// is shorter (a backoff never outlasts the account's turn).
func connectBackoff(failures int, round time.Duration) time.Duration {
	limit := max(min(connectRetryMax, round), connectRetryMin)
	if failures >= 16 {
		return limit
	}
	return min(connectRetryMin<<failures, limit)
}

// accountEvents is a ConnectSource's events of one connected account.
type accountEvents struct {
	src     ConnectSource
	account string
}

func (a accountEvents) ListEvents(ctx context.Context, since time.Time, after string) (EventsFeedPage, error) {
	return a.src.ListConnectedEvents(ctx, a.account, since, after)
}

// Discovered is what one listing of the connected accounts found.
type Discovered struct {
	Listed       int // accounts the provider lists: they authorise the platform
	Deauthorized int // accounts known as authorising it that the listing no longer names
}

// Discover lists every account connected to the platform and records
// them (SaveAuthorizations): each listed one authorises the platform as
// of the listing's start; a known account recorded as authorising it that
// the whole listing no longer names has withdrawn. A word newer than the
// listing (an authorisation event during it) is kept.
func (f *ConnectFeed) Discover(ctx context.Context) (Discovered, error) {
	st := f.cfg.Store
	at, err := st.Now(ctx)
	if err != nil {
		return Discovered{}, err
	}
	listed := map[string]bool{}
	var words []Authorization
	for after := ""; ; {
		accounts, next, err := f.cfg.Source.ListAccounts(ctx, after)
		if err != nil {
			return Discovered{}, fmt.Errorf("list %s connected accounts: %w", f.cfg.Provider, err)
		}
		for _, a := range accounts {
			if !IsConnectedAccount(a) || listed[a] {
				continue
			}
			listed[a] = true
			words = append(words, Authorization{Account: a, Authorized: true, At: at})
		}
		if after = next; after == "" {
			break
		}
	}
	known, err := st.ConnectedAccounts(ctx, f.cfg.Provider)
	if err != nil {
		return Discovered{}, err
	}
	res := Discovered{Listed: len(listed)}
	for _, k := range known {
		if k.Authorized && !listed[k.Account] {
			words = append(words, Authorization{Account: k.Account, Authorized: false, At: at})
			res.Deauthorized++
		}
	}
	if len(words) > 0 {
		if err := st.SaveAuthorizations(ctx, f.cfg.Provider, words); err != nil {
			return Discovered{}, err
		}
	}
	f.log.InfoContext(ctx, "connect feed: connected accounts listed", slog.Int("listed", res.Listed),
		slog.Int("no_longer_listed", res.Deauthorized))
	return res, nil
}

// ConnectFeedStats sums a provider's connected accounts' feeds, as the
// store keeps them (every replica reads the same): per provider, never
// per account.
type ConnectFeedStats struct {
	Provider     string
	Authorized   int // accounts that authorise the platform
	Deauthorized int // accounts that withdrew: their feeds stopped
	BackedOff    int // authorising accounts whose polls failed, waiting out their backoff
	NeverPolled  int // authorising accounts not polled yet
	// OldestPoll is the least recent last poll of an authorising account
	// polled at least once; nil when none was. now − OldestPoll is the
	// longest any such account has gone unpolled: about a Round when the
	// pool keeps up.
	OldestPoll *time.Time
	Caught     int64 // events the accounts' feeds stored before any webhook
}
