package reconcile

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
)

// ErrSweepsStopped means the process is shutting down: no sweep starts.
var ErrSweepsStopped = errors.New("shutting down: no sweep starts now")

// SweepStart is how starting one provider's sweep went.
type SweepStart struct {
	Provider string
	Run      SweepRun // the run started or resumed; zero when Err is set
	// Err is ErrSweepRunning when a sweep of the provider already runs,
	// here or on another replica; nothing was written then.
	Err error
}

// SweepRunnerConfig configures a SweepRunner.
type SweepRunnerConfig struct {
	Sweepers []*Sweeper // required: one per provider
	Logger   *slog.Logger
}

// SweepRunner starts sweeps in the background for whoever asks (the admin
// API, the console, the schedule) and keeps each one it started, so that
// the end of Run stops them all and waits for them: a stopped sweep
// applies the pages already handed over and leaves its run running, for
// the next sweep to resume from its cursor. Each provider is swept on its
// own: one provider's running sweep never keeps another's from starting,
// and each reports its own run.
type SweepRunner struct {
	sweepers []*Sweeper
	log      *slog.Logger
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
		log:      cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler)).With("component", "sweep"),
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
		run, err := r.start(ctx, sw, RunSweep)
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

// StartImports starts, in the background, the import of every provider
// whose customers were never all listed (no run of it succeeded: see
// SweepStore.Imported), saying so at INFO, and returns at once; a run
// left running is resumed. An import running elsewhere (the lease) is
// left to it. Like any run started here, the end of Run stops the
// imports, and the next StartImports resumes them from their cursors.
// It returns the imports it started.
func (r *SweepRunner) StartImports(ctx context.Context) []SweepStart {
	var starts []SweepStart
	for _, sw := range r.sweepers {
		done, err := sw.Imported(ctx)
		if err != nil {
			r.log.ErrorContext(ctx, "cannot tell whether the provider was imported", "provider", sw.Provider(), slog.Any("error", err))
			continue
		}
		if done {
			r.log.DebugContext(ctx, "provider imported already: no import at start", "provider", sw.Provider())
			continue
		}
		r.log.InfoContext(ctx, fmt.Sprintf("no import of %s has completed: importing its customers now", sw.Provider()),
			"provider", sw.Provider())
		run, err := r.start(ctx, sw, RunImport)
		switch {
		case errors.Is(err, ErrSweepRunning):
			r.log.InfoContext(ctx, "import left to the replica running it", "provider", sw.Provider())
		case errors.Is(err, ErrImported):
			r.log.InfoContext(ctx, "import completed meanwhile, by another replica", "provider", sw.Provider())
		case errors.Is(err, ErrSweepsStopped), ctx.Err() != nil:
		case err != nil:
			r.log.ErrorContext(ctx, "import did not start", "provider", sw.Provider(), slog.Any("error", err))
		default:
			starts = append(starts, SweepStart{Provider: sw.Provider(), Run: run})
		}
	}
	return starts
}

// start starts a run of kind of sw's in the background.
func (r *SweepRunner) start(ctx context.Context, sw *Sweeper, kind string) (SweepRun, error) {
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
		_, _ = started.Sweep(r.ctx)
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
