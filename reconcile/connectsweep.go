package reconcile

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Stripe Connect: each served connected account's customers are swept on
// their own, as the platform's are: a run of the account (see
// SweeperConfig.Account) under a lease of its own, resumed from its own
// cursor, listed on the account's behalf, queueing only the account's own
// unswept customers. A sweep of one account heals its drift and never
// reads another's; one sweep of an account runs at a time across
// replicas.
//
// ConnectSweeps schedules those runs on one replica at a time (a lease):
// every served account that authorises the platform is swept once every
// Every (a day), the most overdue first, Pool at once, spread over the day
// rather than all at the platform's nightly hour, so a thousand accounts'
// listings never crowd the webhook-triggered fetches out of the rate. An
// account never swept is swept first (its first run is its import); a run
// a dead sweeper left is resumed at once; a failed run is tried again
// after Retry. A deauthorised account is not swept; a re-authorised one
// is due at its turn.

// ConnectSweepDue is a connected account's sweep as the scheduler sees
// it.
type ConnectSweepDue struct {
	Account string
	// Last is the account's newest run: nil when it was never swept.
	Last *SweepRecord
}

// DueAt is when the account's next sweep is due: now (the zero time) for
// an account never swept or whose run was left running, retry after a
// failed run's end, else every after the last run's start.
func (d ConnectSweepDue) DueAt(every, retry time.Duration) time.Time {
	switch {
	case d.Last == nil || d.Last.Status == "running":
		return time.Time{}
	case d.Last.Status == "failed" && d.Last.FinishedAt != nil:
		return d.Last.FinishedAt.Add(retry)
	}
	return d.Last.StartedAt.Add(every)
}

// ConnectSweepQuery asks the store for the connected accounts to sweep
// next.
type ConnectSweepQuery struct {
	Policy ConnectPolicy // the accounts served (only authorised ones are swept)
	Every  time.Duration
	Retry  time.Duration
	Skip   []string // accounts being swept now, here or elsewhere
	Limit  int
}

// ConnectSweepStore is what ConnectSweeps needs of the store.
type ConnectSweepStore interface {
	Now(ctx context.Context) (time.Time, error)
	// ConnectSweepLock takes the lease that lets one replica schedule
	// the provider's connected accounts' sweeps; ErrLeaseHeld when
	// another has it.
	ConnectSweepLock(ctx context.Context, provider string) (held context.Context, release func(), err error)
	// DueConnectSweeps returns at most q.Limit of the served accounts
	// that authorise the platform, q.Skip left out, most overdue first
	// (ConnectSweepDue.DueAt), each with its newest run, and how many
	// such accounts there are, q.Skip's left out.
	DueConnectSweeps(ctx context.Context, provider string, q ConnectSweepQuery) (due []ConnectSweepDue, served int, err error)
}

// Connect sweep defaults.
const (
	// DefaultConnectSweepEvery is how often each connected account is
	// swept at most: a day, as the platform's nightly sweep.
	DefaultConnectSweepEvery = 24 * time.Hour
	// DefaultConnectSweepShare is the part of the connected accounts'
	// read allocation their sweeps may spend (a small account's sweep is
	// a read): the Connect feed takes a quarter, the worker's fetches the
	// rest.
	DefaultConnectSweepShare = 0.1
	// DefaultConnectSweepPool is how many accounts are swept at once. A
	// small account's sweep is one list request; a large one's lists its
	// parts at once itself (SweeperConfig.Parallel).
	DefaultConnectSweepPool = 2
	// DefaultConnectSweepRetry is the wait before a failed account's
	// sweep is tried again.
	DefaultConnectSweepRetry = time.Hour
	// DefaultConnectSweepLook bounds the scheduler's wait when no account
	// is due: an account authorised meanwhile is swept within it.
	DefaultConnectSweepLook = 10 * time.Second
	// connectSweepHeld is how long an account whose sweep runs elsewhere
	// (a support engineer's `billsync sweep --account`) is left out.
	connectSweepHeld = 5 * time.Minute
)

// ConnectSweepsConfig configures ConnectSweeps.
type ConnectSweepsConfig struct {
	Provider string
	// SweeperOf returns the sweeper of one account's customers (the
	// platform sweeper's ForAccount, listing on the account's behalf).
	SweeperOf func(account string) (*Sweeper, error)
	Store     ConnectSweepStore
	// Policy says which connected accounts are served; of those, the ones
	// that authorise the platform are swept.
	Policy ConnectPolicy
	// Every is the shortest interval between two sweeps of an account;
	// default DefaultConnectSweepEvery.
	Every time.Duration
	// Allocation returns the read allocation of the platform's reads on
	// behalf of its connected accounts, reads per ReadWindow; called at
	// every dispatch. With it each account is swept every
	// ConnectRound(accounts, Allocation(), Share, Every): no more often
	// than Share of it pays for. nil: every Every.
	Allocation func() float64
	// Share is the part of Allocation the sweeps may spend; default
	// DefaultConnectSweepShare.
	Share  float64
	Retry  time.Duration // default DefaultConnectSweepRetry
	Pool   int           // default DefaultConnectSweepPool
	Look   time.Duration // default DefaultConnectSweepLook
	Logger *slog.Logger
}

// ConnectSweeps sweeps every served connected account in turn. Run it on
// every replica: its lease lets one replica lead at a time.
type ConnectSweeps struct {
	cfg ConnectSweepsConfig
	log *slog.Logger

	mu            sync.Mutex
	heldElsewhere map[string]time.Time // account → until when it is left out
	view          ConnectSweepsView
}

// NewConnectSweeps checks cfg and returns a ConnectSweeps.
func NewConnectSweeps(cfg ConnectSweepsConfig) (*ConnectSweeps, error) {
	var errs []error
	if cfg.Provider == "" || cfg.SweeperOf == nil || cfg.Store == nil {
		errs = append(errs, errors.New("provider, sweeper and store are required"))
	}
	if !cfg.Policy.Enabled() {
		errs = append(errs, fmt.Errorf("connected accounts are not served (mode %q)", cfg.Policy.Mode))
	}
	if cfg.Every < 0 || cfg.Retry < 0 || cfg.Pool < 0 || cfg.Look < 0 {
		errs = append(errs, errors.New("every, retry, pool and look must not be negative"))
	}
	if !(cfg.Share >= 0 && cfg.Share <= 1) {
		errs = append(errs, fmt.Errorf("share %v is not a fraction of the read allocation (0 < share <= 1)", cfg.Share))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("connect sweeps: %w", err)
	}
	cfg.Every = cmp.Or(cfg.Every, DefaultConnectSweepEvery)
	cfg.Retry = cmp.Or(cfg.Retry, DefaultConnectSweepRetry)
	cfg.Pool = cmp.Or(cfg.Pool, DefaultConnectSweepPool)
	cfg.Look = cmp.Or(cfg.Look, DefaultConnectSweepLook)
	cfg.Share = cmp.Or(cfg.Share, DefaultConnectSweepShare)
	log := cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler)).With(slog.String("provider", cfg.Provider),
		slog.String("component", "connect sweep"))
	return &ConnectSweeps{cfg: cfg, log: log, heldElsewhere: map[string]time.Time{},
		view: ConnectSweepsView{Provider: cfg.Provider}}, nil
}

// ConnectSweepsView is what this replica's ConnectSweeps did since it
// started (logs, metrics): per provider, never per account.
type ConnectSweepsView struct {
	Provider  string
	Served    int           // served, authorised accounts at the last dispatch
	Every     time.Duration // the interval each is swept at
	Succeeded int64         // runs that succeeded
	Failed    int64         // runs that failed (tried again after Retry)
	Healed    int64         // customers the sweeps healed (an account's first run, its import, not counted)
}

// View returns what the sweeps did on this replica.
func (c *ConnectSweeps) View() ConnectSweepsView {
	c.mu.Lock()
	defer c.mu.Unlock()
	v := c.view
	v.Every = c.every(v.Served)
	return v
}

// every is the interval each of served accounts is swept at: what Share
// of the allocation pays for, never shorter than Every.
func (c *ConnectSweeps) every(served int) time.Duration {
	if c.cfg.Allocation == nil {
		return c.cfg.Every
	}
	return ConnectRound(served, c.cfg.Allocation(), c.cfg.Share, c.cfg.Every)
}

// Run leads the connected accounts' sweeps whenever this replica holds
// their lease, until ctx ends; the sweeps in flight stop with it and are
// resumed from their cursors by the next leader.
func (c *ConnectSweeps) Run(ctx context.Context) {
	leadership{lock: func(ctx context.Context) (context.Context, func(), error) {
		return c.cfg.Store.ConnectSweepLock(ctx, c.cfg.Provider)
	}, retry: feedTakeover, log: c.log, what: "connect sweep", standby: "connect sweep: another replica leads"}.run(ctx, c.lead)
}

func (c *ConnectSweeps) lead(ctx, held context.Context) {
	ctx, cancel := whileHeld(ctx, held)
	defer cancel()
	pool := newAccountPool(c.cfg.Pool)
	defer pool.wait()
	for ctx.Err() == nil {
		pool.sleep(ctx, c.dispatch(ctx, pool))
	}
	if held.Err() != nil {
		c.log.WarnContext(ctx, "connect sweep: lease lost; another replica leads now; its sweeps resume from their cursors",
			slog.Any("error", context.Cause(held)))
	}
}

// dispatch starts the sweeps of the accounts due, most overdue first, as
// slots free up, and returns how long to wait before looking again.
func (c *ConnectSweeps) dispatch(ctx context.Context, pool *accountPool) time.Duration {
	st := c.cfg.Store
	now, err := st.Now(ctx)
	if err != nil {
		c.log.WarnContext(ctx, "connect sweep: no database time", slog.Any("error", err))
		return c.cfg.Look
	}
	limit := 2 * c.cfg.Pool
	skip := append(pool.busy(), c.elsewhere()...)
	c.mu.Lock()
	every := c.every(c.view.Served)
	c.mu.Unlock()
	due, served, err := st.DueConnectSweeps(ctx, c.cfg.Provider, ConnectSweepQuery{Policy: c.cfg.Policy,
		Every: every, Retry: c.cfg.Retry, Skip: skip, Limit: limit})
	if err != nil {
		if ctx.Err() == nil {
			c.log.WarnContext(ctx, "connect sweep: reading the accounts due failed", slog.Any("error", err))
		}
		return c.cfg.Look
	}
	c.setServed(ctx, served+len(skip))
	for _, d := range due {
		if at := d.DueAt(every, c.cfg.Retry); at.After(now) {
			return min(at.Sub(now), c.cfg.Look)
		}
		if !pool.start(ctx, d.Account, func() { c.sweep(ctx, d.Account) }) {
			return 0
		}
	}
	if len(due) == limit {
		return 0
	}
	return c.cfg.Look
}

// setServed records how many accounts are served, and logs the interval
// each is swept at when it changes.
func (c *ConnectSweeps) setServed(ctx context.Context, served int) {
	c.mu.Lock()
	from := c.view.Served
	c.view.Served = served
	c.mu.Unlock()
	if from != served {
		c.log.InfoContext(ctx, "connect sweep: accounts served", slog.Int("accounts", served),
			slog.Duration("every", c.every(served)), slog.Int("pool", c.cfg.Pool))
	}
}

// elsewhere returns the accounts whose sweep runs on another replica, as
// last found, forgetting those whose wait (on this process's clock) is
// over.
func (c *ConnectSweeps) elsewhere() []string {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for a, until := range c.heldElsewhere {
		if now.After(until) {
			delete(c.heldElsewhere, a)
			continue
		}
		out = append(out, a)
	}
	return out
}

// sweep runs one account's sweep (its import, when it was never swept)
// to its end; the run logs how it ended.
func (c *ConnectSweeps) sweep(ctx context.Context, account string) {
	sw, err := c.cfg.SweeperOf(account)
	if err != nil {
		c.log.ErrorContext(ctx, "connect sweep: no sweeper for the account", slog.String("account", account), slog.Any("error", err))
		return
	}
	rep, err := sw.Run(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case errors.Is(err, ErrSweepRunning):
		c.heldElsewhere[account] = time.Now().Add(connectSweepHeld)
	case ctx.Err() != nil:
	case err != nil:
		c.view.Failed++
	default:
		c.view.Succeeded++
		if rep.Run.Kind == RunSweep {
			c.view.Healed += int64(rep.Run.Healed)
		}
	}
}

// ConnectSweepStats sums a provider's connected accounts' sweeps, as the
// store keeps them (every replica reads the same): per provider, never
// per account.
type ConnectSweepStats struct {
	Provider string
	// NeverSwept counts the authorising accounts no run of which has
	// started yet; Failing, those whose newest run failed.
	NeverSwept int
	Failing    int
	// OldestSuccess is the least recent start of an authorising account's
	// newest successful run; nil when none succeeded. now − OldestSuccess
	// is the longest any such account has gone unswept: about the
	// interval they are swept at while the pool keeps up.
	OldestSuccess *time.Time
}
