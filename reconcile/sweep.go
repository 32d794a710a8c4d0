package reconcile

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"time"
)

// Kinds of run (sweep_runs.kind): both list every customer of a provider
// under the same lease and resume from their cursor. An import is a
// provider's first listing, what it writes recorded as imported; a sweep
// heals drift, what it writes recorded as healed.
const (
	RunSweep  = "sweep"
	RunImport = "import"
)

// SweepRun is one run of a provider's sweep or import, as sweep_runs keeps
// it.
type SweepRun struct {
	ID       int64
	Provider string
	// Account is the Stripe Connect account the run lists, "" for the
	// platform's own customers (see SweeperConfig.Account).
	Account   string
	Kind      string // RunSweep or RunImport; a resumed run keeps its own
	StartedAt time.Time
	Resumed   bool   // a run a dead sweeper left running, picked up again
	Cursor    string // where the listing resumes: each part after its last applied page, one a line
	Seen      int    // customers the listing resolved
	Healed    int    // accounts the run changed (sweep_runs.changed): healed by a sweep, imported by an import
	Failed    int    // customers whose snapshot maps to no plan (ignored)
	// Progress estimates the share of the listing applied (0..1), -1
	// when the lister cannot tell.
	Progress float64
}

// Trigger is the trigger of the run's reconciles: TriggerImport for an
// import, else TriggerSweep.
func (r SweepRun) Trigger() string {
	if r.Kind == RunImport {
		return TriggerImport
	}
	return TriggerSweep
}

// Healed is one account the sweep corrected.
type Healed struct {
	CustomerID string
	Before     Account
	After      Account
	Outcome    string
	Cause      string
}

// Causes of drift, as logged for each healed account.
const (
	CauseNoWebhook     = "no webhook stored since the provider's change"
	CauseWebhookFailed = "stored but failed"
)

// SweepReport is what one sweep or import did.
type SweepReport struct {
	Run SweepRun
	// Healed lists the first MaxHealedReported accounts a sweep healed, in
	// order; an import lists none (what it writes is no drift: Imported
	// counts it).
	Healed []Healed
	// Enqueued counts the queue rows the run made due: accounts the
	// listing did not cover, dead rows revived and, without a Lister,
	// every customer the Finder found (Found).
	Enqueued int
	Found    int  // customers the Finder found and queued (pages summed: one found twice counts twice)
	Finding  bool // the run found customers (a Finder) and queued them, rather than listing their state
	Calls    int  // list calls (pages), retries not counted
	Took     time.Duration
}

// Imported is how many accounts an import wrote (0 for a sweep, whose
// changes are healed drift).
func (r SweepReport) Imported() int {
	if r.Run.Kind == RunImport {
		return r.Run.Healed
	}
	return 0
}

// DefaultProgressEvery is how often a running import logs its progress.
const DefaultProgressEvery = 5 * time.Second

// DefaultSweepParallel is how many parts of a listing an adapting sweep
// lists at once when the Splitter's ListBudget has no rate.
const DefaultSweepParallel = 8

// MaxSweepParallel bounds how many parts an adapting sweep lists at once:
// the listing's share of 100 requests a second (Stripe's live limit) at
// a second of latency, with headroom.
const MaxSweepParallel = 64

// MaxHealedReported caps SweepReport.Healed; every healed account is
// logged regardless.
const MaxHealedReported = 100

// ErrSweepRunning means another sweep of the provider holds the lock.
var ErrSweepRunning = errors.New("a sweep is already running")

// SweepStore is what the sweeper needs from the database.
type SweepStore interface {
	Now(ctx context.Context) (time.Time, error)
	// SweepLock takes the sweep lease of provider's account ("" the
	// platform's own customers, else a Stripe Connect account's) until
	// release: held ends (cause ErrLeaseLost) if the lease is lost
	// meanwhile, not with ctx; a crashed sweeper's lease runs out.
	// ErrLeaseHeld: another sweep of the account has it.
	SweepLock(ctx context.Context, provider, account string) (held context.Context, release func(), err error)
	// StartSweep starts a run of kind (RunSweep, RunImport) of the
	// account, or resumes the one a dead sweeper or importer of it left,
	// whatever its kind.
	StartSweep(ctx context.Context, provider, account, kind string) (SweepRun, error)
	// Imported reports whether the account's customers were ever all
	// listed: a run of it (an import or a sweep) succeeded.
	Imported(ctx context.Context, provider, account string) (bool, error)
	// SweepPage records a page once it is applied, in one transaction:
	// its customers as resolved by the run (EnqueueUnswept leaves them
	// out) and the run's progress (run.Cursor, Healed, Failed). It returns
	// the customers the run has resolved, each counted once. A page whose
	// record is lost in a crash is listed and applied again, which writes
	// nothing where it was applied.
	SweepPage(ctx context.Context, run SweepRun, customers []string) (seen int, err error)
	FinishSweep(ctx context.Context, run SweepRun, failure error) error
	// ApplySweptPage is Apply for a page of swept snapshots (deciders[i]
	// decides jobs[i]), without queue rows, in one transaction: every
	// account or none. It writes nothing for an account already right, and
	// returns the outcomes aligned with jobs.
	ApplySweptPage(ctx context.Context, jobs []Job, observedAt time.Time, deciders []Decider) ([]SweptOutcome, error)
	// EnqueueUnswept queues the accounts held for customers of the run's
	// account that it did not resolve, the first due at the later of now
	// and from (zero: now) and each next one pace later, and revives the
	// dead queue rows of the account's customers.
	EnqueueUnswept(ctx context.Context, runID int64, provider, account string, from time.Time, pace time.Duration) (int, error)
	// EnqueueFound queues for the worker, with trigger, the customers a
	// Finder found (known or not), in one statement: the first due at the
	// later of now and from (zero: now), each next one pace later; a row
	// due sooner keeps its time, a dead row is revived, and a found user
	// reference is settled on the row as the newest. It returns how many
	// rows it queued and when the next customer would be due.
	EnqueueFound(ctx context.Context, provider, trigger string, found []Found, from time.Time, pace time.Duration) (n int, next time.Time, err error)
	// SweptAccounts reads the accounts held for customers, without locks,
	// by customer id (absent: no account yet).
	SweptAccounts(ctx context.Context, provider string, customers []string) (map[string]Account, error)
	// Granted returns what each grant's period already holds for its
	// account, aligned with grants.
	Granted(ctx context.Context, accountIDs []int64, grants []Grant) ([]int64, error)
}

// SweptOutcome is what applying one customer's swept snapshot did.
type SweptOutcome struct {
	Outcome
	// WebhookSince reports, for a written outcome, whether a webhook for
	// the customer was stored after the account's previous observation
	// (then one was stored but its reconcile failed; else none came).
	WebhookSince bool
}

// SweeperConfig configures a Sweeper.
type SweeperConfig struct {
	Store    SweepStore // required
	Provider string     // required: the provider's name
	// Account is the Stripe Connect account swept ("" the platform's own
	// customers): its runs, lease, cursor and unswept accounts are its
	// own, and Lister lists on its behalf (see ForAccount).
	Account string
	// Lister lists every customer in bulk. A provider without one is
	// swept by queueing customers for the worker, paced by Pace: every
	// customer its Finder finds, then every known account it did not find
	// (without a Finder: every known account).
	Lister Lister
	// Finder names every customer of a provider without a Lister (Kinde),
	// so a sweep or import reaches customers billsync never heard of.
	Finder Finder
	// Pace spaces the due times of the accounts queued without a Lister,
	// so the worker's fetches for the sweep keep within a rate budget of
	// their own and webhook-triggered work (due now) goes first; default
	// one account a second.
	Pace time.Duration
	// Parallel pins how many parts of the listing are listed at once when
	// the Lister is a Splitter. 0 (the default) adapts: as many as the
	// Splitter's ListBudget calls for (its share of the rate × the latency
	// of its list requests, with headroom), at most MaxSweepParallel, and
	// DefaultSweepParallel when the budget has no rate. Each part's
	// requests still wait for the Lister's rate limit.
	Parallel int
	Plans    *Plans // required
	Logger   *slog.Logger
	// OnPage, when set, sees the run after each page (progress output).
	OnPage func(SweepRun)
	// OnAnswered, when set, sees the stored events a page's apply
	// answered and the database's time just after its commit (the
	// freshness SLI: an event a sweep answers waited that long).
	OnAnswered func(provider string, answered []Answered, at time.Time)
	// ProgressEvery is how often an import logs its progress at INFO
	// (accounts, pages, rate, ETA when known); default
	// DefaultProgressEvery. A sweep logs no progress: it logs each account
	// it heals.
	ProgressEvery time.Duration
}

// Sweeper heals drift: it lists every customer of a provider in bulk (in
// parts listed at once, where the Lister can split its listing) and
// applies each snapshot with the same decision and guarded write as the
// worker. Each page is applied as observed at the database time taken
// before its list call, so a webhook-triggered reconcile that lands during
// the sweep (observed later) is never overwritten by it.
type Sweeper struct {
	cfg SweeperConfig
	log *slog.Logger
	// pageTime averages how long a part waits for the database's time
	// before each list call: an adapting sweep sizes its parts by it and
	// the list calls' latency together.
	pageTime LatencyMeter
	// progresser estimates the run's progress from its cursors; nil when
	// the Lister cannot (SweepRun.Progress stays -1).
	progresser Progresser
}

// NewSweeper validates cfg and returns a Sweeper.
func NewSweeper(cfg SweeperConfig) (*Sweeper, error) {
	var errs []error
	if cfg.Store == nil {
		errs = append(errs, errors.New("no store"))
	}
	if cfg.Provider == "" {
		errs = append(errs, errors.New("no provider name"))
	}
	if cfg.Pace < 0 {
		errs = append(errs, errors.New("negative pace"))
	}
	if cfg.Parallel < 0 {
		errs = append(errs, errors.New("negative parallel"))
	}
	if cfg.Plans == nil {
		errs = append(errs, errors.New("no plans"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("sweeper config: %w", err)
	}
	log := cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler)).With("provider", cfg.Provider, "component", "sweep")
	if cfg.Account != "" {
		log = log.With("connected_account", cfg.Account)
	}
	cfg.Pace = cmp.Or(cfg.Pace, time.Second)
	cfg.ProgressEvery = cmp.Or(cfg.ProgressEvery, DefaultProgressEvery)
	progresser, _ := cfg.Lister.(Progresser)
	return &Sweeper{cfg: cfg, log: log, progresser: progresser}, nil
}

// Provider names the provider this sweeper sweeps.
func (s *Sweeper) Provider() string { return s.cfg.Provider }

// Account names the Stripe Connect account this sweeper sweeps, "" for
// the platform's own customers.
func (s *Sweeper) Account() string { return s.cfg.Account }

// ForAccount returns a sweeper of the connected account's customers,
// listed by lister (the provider's listing on behalf of the account), with
// s's store, plans, parallelism and hooks: its runs, lease and cursor are
// the account's own.
func (s *Sweeper) ForAccount(account string, lister Lister) (*Sweeper, error) {
	if !IsConnectedAccount(account) {
		return nil, fmt.Errorf("sweeper: %q is not a connected account", account)
	}
	cfg := s.cfg
	cfg.Account, cfg.Lister, cfg.Finder = account, lister, nil
	return NewSweeper(cfg)
}

// name is the provider, or "stripe acct_X" for a connected account's
// sweeper (logs, errors).
func (s *Sweeper) name() string {
	if s.cfg.Account == "" {
		return s.cfg.Provider
	}
	return s.cfg.Provider + " " + s.cfg.Account
}

// Imported reports whether the provider's (or the connected account's)
// customers were ever all listed (a run of it succeeded): until then serve
// imports them.
func (s *Sweeper) Imported(ctx context.Context) (bool, error) {
	return s.cfg.Store.Imported(ctx, s.cfg.Provider, s.cfg.Account)
}

// Run sweeps once: Start, then the started sweep's Sweep (an import when
// the provider was never imported).
func (s *Sweeper) Run(ctx context.Context) (SweepReport, error) {
	return s.RunKind(ctx, RunSweep)
}

// RunKind runs once a run of kind (RunSweep, RunImport), or resumes the
// run left running, whatever its kind.
func (s *Sweeper) RunKind(ctx context.Context, kind string) (SweepReport, error) {
	started, err := s.Start(ctx, kind)
	if err != nil {
		return SweepReport{}, err
	}
	return started.Sweep(ctx)
}

// StartedSweep is a sweep that holds its provider's sweep lock and whose
// run is recorded (started, or resumed). Its Sweep runs it and releases
// the lock; until then no other sweep of the provider starts anywhere.
type StartedSweep struct {
	Run     SweepRun // as started or resumed
	s       *Sweeper
	held    context.Context // ends if the lease is lost
	release func()
	begin   time.Time
}

// Start takes the provider's sweep lock and starts or resumes its run,
// both before it returns, so the caller knows at once whether a sweep
// starts: ErrSweepRunning (and nothing written) when another sweep holds
// the lock. The caller must call the StartedSweep's Sweep, which releases
// the lock.
//
// kind is the run to start (RunSweep, RunImport); a sweep of a provider
// never imported (see Imported) starts as its import, and a run left
// running is resumed whatever its kind: StartedSweep.Run says which it is.
func (s *Sweeper) Start(ctx context.Context, kind string) (*StartedSweep, error) {
	return s.start(ctx, kind, false)
}

// StartFirstImport is Start of an import unless the provider was imported
// meanwhile (ErrImported, nothing written): it looks again once it holds
// the lock, so a replica that found no import completed, while another
// was finishing one, does not import a second time.
func (s *Sweeper) StartFirstImport(ctx context.Context) (*StartedSweep, error) {
	return s.start(ctx, RunImport, true)
}

// ErrImported means the provider's import completed already.
var ErrImported = errors.New("imported already")

func (s *Sweeper) start(ctx context.Context, kind string, firstOnly bool) (*StartedSweep, error) {
	held, release, err := s.cfg.Store.SweepLock(ctx, s.cfg.Provider, s.cfg.Account)
	if errors.Is(err, ErrLeaseHeld) {
		return nil, fmt.Errorf("%s: %w", s.name(), ErrSweepRunning)
	}
	if err != nil {
		return nil, err
	}
	asked := kind
	if firstOnly || kind == RunSweep {
		// Looked at under the lock, so that no import completes meanwhile.
		done, err := s.Imported(ctx)
		if err == nil && done && firstOnly {
			err = fmt.Errorf("%s: %w", s.name(), ErrImported)
		}
		if err != nil {
			release()
			return nil, err
		}
		if !done {
			// A provider never imported has no account to heal yet: its
			// sweep is its import (the same listing), recorded as imported,
			// logged as progress, not as drift account by account.
			kind = RunImport
		}
	}
	begin := time.Now()
	run, err := s.cfg.Store.StartSweep(ctx, s.cfg.Provider, s.cfg.Account, kind)
	if err != nil {
		release()
		return nil, err
	}
	if asked == RunSweep && run.Kind == RunImport && !run.Resumed {
		s.log.InfoContext(ctx, fmt.Sprintf("no import of %s has completed: this sweep runs as its import", s.name()),
			"run", run.ID)
	}
	s.log.InfoContext(ctx, run.Kind+" started", "run", run.ID, "resumed", run.Resumed, "cursor", run.Cursor)
	return &StartedSweep{Run: run, s: s, held: held, release: release, begin: begin}, nil
}

// Sweep runs the started sweep once, to its end or until ctx is done, and
// releases the lock: the report and the run's failure, if any (the run is
// then recorded as failed, never as succeeded). A run stopped by ctx stays
// recorded as running, so the next sweep resumes it from its cursor.
func (st *StartedSweep) Sweep(ctx context.Context) (SweepReport, error) {
	s := st.s
	defer st.release()
	// A sweep whose lease is lost stops as if interrupted: its successor
	// resumes the run from its cursor.
	ctx, cancel := whileHeld(ctx, st.held)
	defer cancel()
	rep := SweepReport{Run: st.Run}
	kind := cmp.Or(st.Run.Kind, RunSweep)
	err := s.sweep(ctx, &rep, newRunProgress(st.Run, st.begin))
	rep.Took = time.Since(st.begin)
	changed := changedWord(kind)
	if err != nil && ctx.Err() != nil {
		// Stopped (SIGTERM, Ctrl-C), not failed: the run stays running
		// with its cursor, and the next sweep resumes it.
		msg := "sweep interrupted; the next sweep resumes it"
		if kind == RunImport {
			msg = "import interrupted; the next start (serve, billsync import or sweep) resumes it"
		}
		s.log.WarnContext(ctx, msg, "run", rep.Run.ID,
			"cursor", rep.Run.Cursor, "seen", rep.Run.Seen, changed, rep.Run.Healed)
		return rep, fmt.Errorf("%s %s %d interrupted: %w", s.name(), kind, rep.Run.ID, err)
	}
	if ferr := s.cfg.Store.FinishSweep(ctx, rep.Run, err); ferr != nil {
		err = errors.Join(err, ferr)
	}
	if err != nil {
		s.log.ErrorContext(ctx, kind+" failed", "run", rep.Run.ID, "seen", rep.Run.Seen, changed, rep.Run.Healed, slog.Any("error", err))
		return rep, fmt.Errorf("%s %s %d: %w", s.name(), kind, rep.Run.ID, err)
	}
	s.log.InfoContext(ctx, kind+" succeeded", "run", rep.Run.ID, "seen", rep.Run.Seen, changed, rep.Run.Healed,
		"failed", rep.Run.Failed, "enqueued", rep.Enqueued, "calls", rep.Calls, "took", rep.Took)
	return rep, nil
}

// changedWord names what a run of kind did to the accounts it changed.
func changedWord(kind string) string {
	if kind == RunImport {
		return "imported"
	}
	return "healed"
}

func (s *Sweeper) sweep(ctx context.Context, rep *SweepReport, prog *runProgress) error {
	if s.cfg.Lister == nil {
		return s.find(ctx, rep, prog)
	}
	// Pages are applied by one goroutine while the listers fetch the next
	// ones, so a sweep takes about the longer of listing and applying, not
	// their sum. A page is recorded (its customers, the resume cursor after
	// it) only once it is applied: a sweeper killed half way through a page
	// leaves the whole page to the run's next sweeper. A stopped sweep (ctx
	// done) still applies the pages already handed over, each store call
	// bounded by the store's own deadline.
	listCtx, stopListing := context.WithCancelCause(ctx)
	defer stopListing(nil)
	cursor := parseRunCursor(rep.Run.Cursor)
	pages := make(chan listedPage, s.parallel().bound)
	applied := make(chan error, 1)
	go func() {
		applied <- s.applyPages(context.WithoutCancel(ctx), stopListing, rep, cursor, prog, pages)
	}()
	err := s.list(listCtx, cursor.parts(), pages)
	close(pages)
	if aerr := <-applied; aerr != nil {
		return aerr
	}
	if err != nil {
		return err
	}
	n, err := s.cfg.Store.EnqueueUnswept(ctx, rep.Run.ID, s.cfg.Provider, s.cfg.Account, time.Time{}, 0)
	if err != nil {
		return err
	}
	rep.Enqueued = n
	return nil
}

// find sweeps a provider without a Lister: it pages through the Finder
// (when there is one), queueing each customer found for the worker with
// the run's trigger and the reference found, and records each page (its
// customers, the cursor after it) so a run that dies resumes after it;
// then it queues every known account not found, which the worker's fetch
// settles (a customer the provider forgot). The due times follow one
// another Pace apart across pages, so the worker's fetches for the run
// keep within a budget of their own and webhook-triggered work (due now)
// goes first. A page whose record is lost in a crash is found and queued
// again: a row still queued keeps its sooner due time; a customer already
// reconciled is fetched once more.
func (s *Sweeper) find(ctx context.Context, rep *SweepReport, prog *runProgress) error {
	var from time.Time
	if rep.Finding = s.cfg.Finder != nil; rep.Finding {
		cursor := rep.Run.Cursor
		for {
			found, next, more, err := s.cfg.Finder.FindPage(ctx, cursor)
			if err != nil {
				return err
			}
			rep.Calls++
			n, due, err := s.cfg.Store.EnqueueFound(ctx, s.cfg.Provider, rep.Run.Trigger(), found, from, s.cfg.Pace)
			if err != nil {
				return err
			}
			from = due
			rep.Enqueued += n
			rep.Found += len(found)
			ids := make([]string, len(found))
			for i, f := range found {
				ids[i] = f.CustomerID
			}
			// A Finder cannot tell how far it has come: Kinde gives no total.
			rep.Run.Cursor, rep.Run.Progress = next, -1
			if rep.Run.Seen, err = s.cfg.Store.SweepPage(ctx, rep.Run, ids); err != nil {
				return err
			}
			if rep.Run.Kind == RunImport {
				prog.page(ctx, s.log, s.cfg.ProgressEvery, *rep)
			}
			if s.cfg.OnPage != nil {
				s.cfg.OnPage(rep.Run)
			}
			if !more {
				break
			}
			cursor = next
		}
	}
	// Every known account not found (every account, without a Finder) is
	// queued too: the worker's reconciles (trigger sweep or import) heal
	// and log what drifted.
	n, err := s.cfg.Store.EnqueueUnswept(ctx, rep.Run.ID, s.cfg.Provider, s.cfg.Account, from, s.cfg.Pace)
	if err != nil {
		return err
	}
	rep.Enqueued += n
	if rep.Run.Kind == RunImport {
		msg := "no bulk listing: the import queued every known account for the workers, as a sweep does"
		if s.cfg.Finder != nil {
			msg = "the import queued every customer found, and every known account not found, for the workers"
		}
		s.log.InfoContext(ctx, msg, "run", rep.Run.ID, "found", rep.Run.Seen, "queued", rep.Enqueued, "pace", s.cfg.Pace)
	}
	return nil
}

// applyPages applies pages in order and records progress after each. On
// failure it stops the listing and drains what was sent.
func (s *Sweeper) applyPages(ctx context.Context, stop context.CancelCauseFunc, rep *SweepReport, cursor *runCursor,
	prog *runProgress, pages <-chan listedPage) error {
	var failed error
	for p := range pages {
		if failed != nil {
			continue
		}
		if failed = s.applyPage(ctx, rep, cursor, prog, p); failed != nil {
			stop(failed)
		}
	}
	return failed
}

func (s *Sweeper) applyPage(ctx context.Context, rep *SweepReport, cursor *runCursor, prog *runProgress, p listedPage) error {
	if p.split {
		// Recorded with the next page: until then the cursor before the
		// split covers both parts.
		cursor.set(p.part, p.next)
		cursor.set(p.given, p.givenCursor)
		return nil
	}
	rep.Calls++
	customers, err := s.page(ctx, rep, p.snaps, p.at)
	if err != nil {
		return err
	}
	if p.more {
		cursor.set(p.part, p.next)
	} else {
		cursor.finish(p.part, p.next)
	}
	rep.Run.Cursor = cursor.String()
	if s.progresser != nil {
		rep.Run.Progress = s.progresser.Progress(cursor.parts())
	}
	if rep.Run.Seen, err = s.cfg.Store.SweepPage(ctx, rep.Run, customers); err != nil {
		return err
	}
	if rep.Run.Kind == RunImport {
		prog.page(ctx, s.log, s.cfg.ProgressEvery, *rep)
	}
	if s.cfg.OnPage != nil {
		s.cfg.OnPage(rep.Run)
	}
	return nil
}

// page applies one page's snapshots and returns its customers. Customers
// whose account is already right are only counted: one read for the whole
// page finds them, and only the rest are applied, together in one
// transaction under their row locks (where each decision is taken again).
func (s *Sweeper) page(ctx context.Context, rep *SweepReport, snaps []Snapshot, at time.Time) ([]string, error) {
	byCustomer := make(map[string]Snapshot, len(snaps))
	ids := make([]string, 0, len(snaps))
	for _, snap := range snaps {
		if account, _ := SplitConnected(snap.CustomerID); account != s.cfg.Account {
			// A listing on behalf of one account names only its customers:
			// anything else is the listing's bug, never applied here.
			return nil, fmt.Errorf("%s listing named customer %s, of another account", s.name(), snap.CustomerID)
		}
		if _, dup := byCustomer[snap.CustomerID]; !dup {
			ids = append(ids, snap.CustomerID)
		}
		byCustomer[snap.CustomerID] = snap
	}
	if len(ids) == 0 {
		return nil, nil
	}
	settled, err := s.settled(ctx, ids, byCustomer, at)
	if err != nil {
		return nil, err
	}
	var jobs []Job
	var deciders []Decider
	for _, id := range ids {
		if settled[id] {
			continue
		}
		job := Job{Provider: s.cfg.Provider, CustomerID: id, Trigger: rep.Run.Trigger()}
		jobs = append(jobs, job)
		deciders = append(deciders, NewDecider(job, byCustomer[id], s.cfg.Plans, at))
	}
	if len(jobs) == 0 {
		return ids, nil
	}
	outs, err := s.cfg.Store.ApplySweptPage(ctx, jobs, at, deciders)
	if err != nil {
		return nil, err
	}
	s.observeAnswered(ctx, outs)
	for i, job := range jobs {
		id, out := job.CustomerID, outs[i].Outcome
		switch out.Result {
		case ResultApplied:
			rep.Run.Healed++
			if rep.Run.Kind == RunImport {
				continue // no line per account: the import logs its progress
			}
			h := Healed{CustomerID: id, Before: out.Before, After: out.After, Outcome: out.Text, Cause: CauseNoWebhook}
			if outs[i].WebhookSince {
				h.Cause = CauseWebhookFailed
			}
			if len(rep.Healed) < MaxHealedReported {
				rep.Healed = append(rep.Healed, h)
			}
			s.log.WarnContext(ctx, "sweep healed an account", "customer", id, "account", out.AccountID,
				"before", DescribeAccount(out.Before), "after", DescribeAccount(out.After), "outcome", out.Text, "cause", h.Cause)
		case ResultIgnored:
			rep.Run.Failed++
			s.log.ErrorContext(ctx, rep.Run.Kind+" could not apply a customer", "customer", id, "outcome", out.Text)
			alertUnmapped(ctx, s.log.With(slog.String("provider", s.cfg.Provider), slog.String("customer", id)), out)
		}
	}
	return ids, nil
}

// settled returns the customers for whom applying their snapshot would
// write nothing: a stale snapshot, or an unchanged account whose period is
// granted in full. It reads without locks; a customer it misses is applied
// (and decided again) under the lock, so a wrong guess costs a transaction,
// never a wrong write.
func (s *Sweeper) settled(ctx context.Context, ids []string, byCustomer map[string]Snapshot, at time.Time) (map[string]bool, error) {
	accounts, err := s.cfg.Store.SweptAccounts(ctx, s.cfg.Provider, ids)
	if err != nil {
		return nil, err
	}
	settled := make(map[string]bool, len(accounts))
	var pending []string // one per grant: a customer has one per meter
	var accountIDs []int64
	var grants []Grant
	for id, cur := range accounts {
		ch := Decide(cur, byCustomer[id], s.cfg.Plans, at)
		switch gs := ch.Grants(); {
		case ch.Result == ResultStale, ch.Result == ResultUnchanged && len(gs) == 0:
			settled[id] = true
		case ch.Result == ResultUnchanged:
			for _, g := range gs {
				pending = append(pending, id)
				accountIDs = append(accountIDs, cur.ID)
				grants = append(grants, g)
			}
		}
	}
	if len(grants) == 0 {
		return settled, nil
	}
	granted, err := s.cfg.Store.Granted(ctx, accountIDs, grants)
	if err != nil {
		return nil, err
	}
	full := map[string]bool{}
	for i, id := range pending {
		if _, seen := full[id]; !seen {
			full[id] = true
		}
		full[id] = full[id] && grants[i].TopUp(granted[i]) == 0
	}
	maps.Copy(settled, full)
	return settled, nil
}

// DescribeAccount renders an account's state in a few words (logs, the
// sweep's summary).
func DescribeAccount(a Account) string {
	if a.ObservedAt.IsZero() && a.Plan == "" {
		return "(no account)"
	}
	return fmt.Sprintf("%s (%s)", a.Plan, orNone(a.Status))
}

// SweepStat sums a provider's sweeps of one status (running, succeeded,
// failed), as read from the database for metrics: every replica reports
// the same figures, whichever ran the sweeps.
type SweepStat struct {
	Provider     string
	Status       string
	Runs         int
	Healed       int       // accounts healed by these runs, in all (sweeps only: an import heals nothing)
	Seen         int       // customers seen by these runs (for running: progress)
	LastFinished time.Time // zero when none finished
}

// SweepRecord is one sweep_runs row, as support staff see it.
type SweepRecord struct {
	ID          int64      `json:"id"`
	Provider    string     `json:"provider"`
	Account     string     `json:"account,omitempty"` // a Stripe Connect account's run; "" the platform's
	Kind        string     `json:"kind"`              // RunSweep or RunImport
	Status      string     `json:"status"`            // running, succeeded or failed
	StartedAt   time.Time  `json:"started_at"`
	HeartbeatAt time.Time  `json:"heartbeat_at"`
	FinishedAt  *time.Time `json:"finished_at,omitempty"`
	Seen        int        `json:"seen"`
	Healed      int        `json:"healed"`
	Failed      int        `json:"failed"`
	Error       string     `json:"error,omitempty"`
	// Progress estimates the share of the listing applied (0..1), nil
	// when the lister cannot tell.
	Progress *float64 `json:"progress,omitempty"`
}

// Rate is a run's pace so far: customers listed a second since it started
// (0 before the first page).
func (r SweepRecord) Rate(now time.Time) float64 {
	elapsed := now.Sub(r.StartedAt).Seconds()
	if elapsed <= 0 {
		return 0
	}
	return float64(r.Seen) / elapsed
}

// Left estimates the time a running run needs to finish at its pace so
// far, from its Progress; false when that cannot be told (no progress
// known yet, or the run is not running).
func (r SweepRecord) Left(now time.Time) (time.Duration, bool) {
	if r.Status != "running" || r.Progress == nil || *r.Progress <= 0 || *r.Progress >= 1 {
		return 0, false
	}
	p := *r.Progress
	return time.Duration(float64(now.Sub(r.StartedAt)) * (1 - p) / p), true
}

// observeAnswered hands the events a page's apply answered to OnAnswered,
// with the database's time after the commit (none when it cannot be read:
// the events are then not observed, never observed with a wrong age).
func (s *Sweeper) observeAnswered(ctx context.Context, outs []SweptOutcome) {
	if s.cfg.OnAnswered == nil {
		return
	}
	var answered []Answered
	for _, o := range outs {
		answered = append(answered, o.Answered...)
	}
	if len(answered) == 0 {
		return
	}
	at, err := s.cfg.Store.Now(ctx)
	if err != nil {
		return
	}
	s.cfg.OnAnswered(s.cfg.Provider, answered, at)
}
