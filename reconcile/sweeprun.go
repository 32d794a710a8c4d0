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

// ErrSweepsStopped means the process is shutting down: no sweep starts.
var ErrSweepsStopped = errors.New("shutting down: no sweep starts now")

// SweepStart is how starting one provider's sweep went.
type SweepStart struct {
	Provider string
	Account  string   // the Stripe Connect account swept (StartAccount); "" the provider's own customers
	Run      SweepRun // the run started or resumed; zero when Err is set
	// Err is ErrSweepRunning when a sweep of the provider already runs,
	// here or on another replica; nothing was written then.
	Err error
}

// SweepRunnerConfig configures a SweepRunner.
type SweepRunnerConfig struct {
	Sweepers []*Sweeper // required: one per provider
	Logger   *slog.Logger
	// ImportRetry is how long StartImports waits before it starts again an
	// import that failed (or could not start), doubled after each failure
	// up to MaxImportRetry; default DefaultImportRetry.
	ImportRetry time.Duration
	// AccountSweeper, when set, returns the sweeper of one Stripe Connect
	// account's customers (Sweeper.ForAccount on its behalf), or why it
	// cannot be swept (wrapping ErrInvalid): StartAccount uses it.
	AccountSweeper func(account string) (*Sweeper, error)
}

// DefaultImportRetry is the wait before a failed import at start is
// tried again; each failure doubles it, up to MaxImportRetry.
const DefaultImportRetry = time.Minute

// MaxImportRetry bounds the wait between two tries of a failing import.
const MaxImportRetry = 30 * time.Minute

// SweepRunner starts sweeps in the background for whoever asks (the admin
// API, the console, the schedule) and keeps each one it started, so that
// the end of Run stops them all and waits for them: a stopped sweep
// applies the pages already handed over and leaves its run running, for
// the next sweep to resume from its cursor. Each provider is swept on its
// own: one provider's running sweep never keeps another's from starting,
// and each reports its own run.
type SweepRunner struct {
	sweepers []*Sweeper
	account  func(string) (*Sweeper, error) // SweepRunnerConfig.AccountSweeper
	log      *slog.Logger
	retry    time.Duration   // the first wait before a failed import is tried again
	ctx      context.Context // the started sweeps'; cancelled when Run ends
	cancel   context.CancelFunc

	mu      sync.Mutex
	stopped bool
	running sync.WaitGroup // sweeps started and not yet returned
}

// NewSweepRunner validates cfg and returns a SweepRunner.
func NewSweepRunner(cfg SweepRunnerConfig) (*SweepRunner, error) {
	var errs []error
	if len(cfg.Sweepers) == 0 {
		errs = append(errs, errors.New("no sweepers"))
	}
	if cfg.ImportRetry < 0 {
		errs = append(errs, errors.New("negative import retry"))
	}
	seen := map[string]bool{}
	for _, s := range cfg.Sweepers {
		if seen[s.Provider()] {
			errs = append(errs, fmt.Errorf("two sweepers of provider %s", s.Provider()))
		}
		seen[s.Provider()] = true
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("sweep runner config: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &SweepRunner{
		sweepers: cfg.Sweepers,
		account:  cfg.AccountSweeper,
		log:      cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler)).With("component", "sweep"),
		retry:    min(cmp.Or(cfg.ImportRetry, DefaultImportRetry), MaxImportRetry),
		ctx:      ctx,
		cancel:   cancel,
	}, nil
}

// Start starts a sweep of every provider whose sweep is not running and
// returns at once, one SweepStart per provider, in order: each sweep's
// lock is taken and its run recorded before Start returns, and the sweep
// goes on in the background until it ends or Run ends. The error is nil
// when at least one sweep started; else it joins each provider's reason
// (ErrSweepRunning, ErrSweepsStopped, or a store failure).
func (r *SweepRunner) Start(ctx context.Context) ([]SweepStart, error) {
	starts := make([]SweepStart, len(r.sweepers))
	var errs []error
	for i, sw := range r.sweepers {
		starts[i] = SweepStart{Provider: sw.Provider()}
		run, err := r.start(ctx, sw, RunSweep, nil)
		if err != nil {
			starts[i].Err = err
			errs = append(errs, err)
			continue
		}
		starts[i].Run = run
	}
	if len(errs) == len(r.sweepers) {
		return starts, errors.Join(errs...)
	}
	return starts, nil
}

// ErrNoAccountSweeps means this process cannot sweep a connected account
// (Stripe Connect is off here, or no Stripe sweeper runs).
var ErrNoAccountSweeps = fmt.Errorf("%w: this process sweeps no Stripe Connect account (-stripe-connect off)", ErrInvalid)

// StartAccount starts a sweep of one Stripe Connect account's customers,
// as Start does a provider's (its own lease, run and cursor; the
// account's first run is its import), and returns at once: ErrSweepRunning
// when that account's sweep runs, here or elsewhere; an error wrapping
// ErrInvalid for an account that is not served.
func (r *SweepRunner) StartAccount(ctx context.Context, account string) (SweepStart, error) {
	if r.account == nil {
		return SweepStart{Account: account}, ErrNoAccountSweeps
	}
	sw, err := r.account(account)
	if err != nil {
		return SweepStart{Account: account}, err
	}
	run, err := r.start(ctx, sw, RunSweep, nil)
	return SweepStart{Provider: sw.Provider(), Account: account, Run: run, Err: err}, err
}

// StartImports starts, in the background, the import of every provider
// whose customers were never all listed (no run of it succeeded: see
// SweepStore.Imported), saying so at INFO, and returns at once; a run
// left running is resumed. An import running elsewhere (the lease) is
// left to it. An import that fails, or cannot start, is started again
// after ImportRetry, then twice as long after each failure (at most
// MaxImportRetry), until it succeeds or Run ends. Like any run started
// here, the end of Run stops the imports, and the next StartImports
// resumes them from their cursors. It returns the imports it started.
func (r *SweepRunner) StartImports(ctx context.Context) []SweepStart {
	var starts []SweepStart
	for _, sw := range r.sweepers {
		done, err := sw.Imported(ctx)
		if err != nil {
			r.log.ErrorContext(ctx, "cannot tell whether the provider was imported; trying again later", "provider", sw.Provider(),
				"in", r.retry, slog.Any("error", err))
			r.importAgain(sw, r.retry)
			continue
		}
		if done {
			r.log.DebugContext(ctx, "provider imported already: no import at start", "provider", sw.Provider())
			continue
		}
		r.log.InfoContext(ctx, fmt.Sprintf("no import of %s has completed: importing its customers now", sw.Provider()),
			"provider", sw.Provider())
		if run, err := r.startImport(ctx, sw, r.retry); err == nil {
			starts = append(starts, SweepStart{Provider: sw.Provider(), Run: run})
		}
	}
	return starts
}

// startImport starts sw's import in the background, unless it completed
// already or runs elsewhere; if it fails or cannot start, it is tried
// again retry later.
func (r *SweepRunner) startImport(ctx context.Context, sw *Sweeper, retry time.Duration) (SweepRun, error) {
	run, err := r.start(ctx, sw, RunImport, func(err error) {
		// Stopped by Run's end: the next start resumes it. Else it failed
		// (and logged why).
		if err != nil && r.ctx.Err() == nil {
			r.log.InfoContext(r.ctx, "import to be tried again", "provider", sw.Provider(), "in", retry)
			r.importAgain(sw, retry)
		}
	})
	switch {
	case errors.Is(err, ErrSweepRunning):
		r.log.InfoContext(ctx, "import left to the replica running it", "provider", sw.Provider())
	case errors.Is(err, ErrImported):
		r.log.InfoContext(ctx, "import completed meanwhile, by another replica", "provider", sw.Provider())
	case errors.Is(err, ErrSweepsStopped), ctx.Err() != nil:
	case err != nil:
		r.log.ErrorContext(ctx, "import did not start; trying again later", "provider", sw.Provider(), "in", retry, slog.Any("error", err))
		r.importAgain(sw, retry)
	}
	return run, err
}

// importAgain starts sw's import again after wait, in the background,
// unless Run ends first; a next failure waits twice as long.
func (r *SweepRunner) importAgain(sw *Sweeper, wait time.Duration) {
	r.mu.Lock()
	if r.stopped {
		r.mu.Unlock()
		return
	}
	r.running.Add(1) // so that Run's end waits for this wait too
	r.mu.Unlock()
	go func() {
		defer r.running.Done()
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-r.ctx.Done():
			return
		case <-t.C:
		}
		_, _ = r.startImport(r.ctx, sw, min(2*wait, MaxImportRetry))
	}()
}

// start starts a run of kind of sw's in the background; ended, when not
// nil, is called with the run's outcome once it returns.
func (r *SweepRunner) start(ctx context.Context, sw *Sweeper, kind string, ended func(error)) (SweepRun, error) {
	// Counted before the lock is taken, so that a Run ending meanwhile
	// waits for this sweep too (which then stops at once).
	r.mu.Lock()
	if r.stopped {
		r.mu.Unlock()
		return SweepRun{}, fmt.Errorf("%s: %w", sw.Provider(), ErrSweepsStopped)
	}
	r.running.Add(1)
	r.mu.Unlock()
	start := sw.Start
	if kind == RunImport {
		start = func(ctx context.Context, _ string) (*StartedSweep, error) { return sw.StartFirstImport(ctx) }
	}
	started, err := start(ctx, kind)
	if err != nil {
		r.running.Done()
		return SweepRun{}, err
	}
	go func() {
		defer r.running.Done()
		// Sweep logs how it ended (succeeded, failed, interrupted).
		_, err := started.Sweep(r.ctx)
		if ended != nil {
			ended(err)
		}
	}()
	return started.Run, nil
}

// Run returns once ctx is done and every sweep started here has stopped.
// Sweeps started before Run is called are stopped by it too; none starts
// after it returns (ErrSweepsStopped).
func (r *SweepRunner) Run(ctx context.Context) {
	<-ctx.Done()
	r.mu.Lock()
	r.stopped = true
	r.mu.Unlock()
	r.cancel()
	r.running.Wait()
	r.log.Info("sweeps stopped")
}
