package reconcile

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultBackoff is the wait after each failed attempt; after the last one
// the job is dead.
var DefaultBackoff = []time.Duration{5 * time.Second, 30 * time.Second, 2 * time.Minute, 10 * time.Minute, time.Hour}

// DefaultBatch is how many jobs a loop claims at once. Small on purpose: a
// loop reconciles its batch one job at a time, so claimed jobs wait behind
// provider round trips while other loops may be idle; one claim query per
// few fetches costs nothing next to the fetches.
const DefaultBatch = 2

// WorkerConfig configures a Worker. Zero values take the defaults;
// negative ones are an error.
type WorkerConfig struct {
	Name         string // prefix of the lease holder's id; default "worker"
	Store        Store  // required
	Providers    []Provider
	Plans        *Plans // required
	Logger       *slog.Logger
	Concurrency  int           // claim loops in this process; default 4
	Batch        int           // jobs claimed at once per loop; default DefaultBatch
	Lease        time.Duration // how long a claim holds unless renewed; default DefaultLease
	Poll         time.Duration // fallback poll when no wake-up comes; default 1 s
	FetchTimeout time.Duration // deadline of one provider fetch; default 30 s
	Backoff      []time.Duration
	// OnOutcome, when set, sees every outcome (metrics, tests).
	OnOutcome func(Job, Outcome)
}

// DefaultLease is how long a claim holds without renewal. A worker renews
// the leases it holds every third of it while it works, so only a worker
// that died keeps a customer waiting, and for at most this long.
const DefaultLease = 15 * time.Second

// validate checks cfg and fills in the defaults.
func (cfg *WorkerConfig) validate() error {
	var errs []error
	if cfg.Store == nil {
		errs = append(errs, errors.New("no store"))
	}
	if cfg.Plans == nil {
		errs = append(errs, errors.New("no plans"))
	}
	if len(cfg.Providers) == 0 {
		errs = append(errs, errors.New("no providers"))
	}
	seen := map[string]bool{}
	for _, p := range cfg.Providers {
		switch {
		case p == nil:
			errs = append(errs, errors.New("a nil provider"))
		case seen[p.Name()]:
			errs = append(errs, fmt.Errorf("provider %q given twice", p.Name()))
		default:
			seen[p.Name()] = true
		}
	}
	if cfg.Concurrency < 0 || cfg.Batch < 0 || cfg.Lease < 0 || cfg.Poll < 0 || cfg.FetchTimeout < 0 {
		errs = append(errs, errors.New("negative concurrency, batch, lease, poll or fetch timeout"))
	}
	for _, d := range cfg.Backoff {
		if d < 0 {
			errs = append(errs, errors.New("negative backoff"))
			break
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("worker config: %w", err)
	}
	cfg.Name = cmp.Or(cfg.Name, "worker")
	cfg.Concurrency = cmp.Or(cfg.Concurrency, 4)
	cfg.Batch = cmp.Or(cfg.Batch, DefaultBatch)
	cfg.Lease = cmp.Or(cfg.Lease, DefaultLease)
	cfg.Poll = cmp.Or(cfg.Poll, time.Second)
	cfg.FetchTimeout = cmp.Or(cfg.FetchTimeout, 30*time.Second)
	if len(cfg.Backoff) == 0 {
		cfg.Backoff = DefaultBackoff
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Worker drains the reconcile queue: for each claimed customer it takes the
// database's time, fetches the snapshot with no transaction open, and
// applies it in one transaction.
type Worker struct {
	cfg       WorkerConfig
	providers map[string]Provider
	wake      []chan struct{}
	dead      atomic.Int64
}

// NewWorker returns a Worker for cfg, or an error saying what is wrong
// with cfg.
func NewWorker(cfg WorkerConfig) (*Worker, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	w := &Worker{cfg: cfg, providers: map[string]Provider{}}
	for _, p := range cfg.Providers {
		w.providers[p.Name()] = p
	}
	for range cfg.Concurrency {
		w.wake = append(w.wake, make(chan struct{}, 1))
	}
	return w, nil
}

// Wake tells idle loops that work may be due (called on NOTIFY).
func (w *Worker) Wake() {
	for _, c := range w.wake {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

// Dead returns how many jobs this worker has marked dead.
func (w *Worker) Dead() int64 { return w.dead.Load() }

// Run claims and processes jobs until ctx is done, then finishes the job in
// hand and releases the leases it holds on the rest. Failures are logged
// and retried, never returned: the database may come back.
func (w *Worker) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for i := range w.cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.loop(ctx, fmt.Sprintf("%s-%d", w.cfg.Name, i), w.wake[i])
		}()
	}
	wg.Wait()
}

func (w *Worker) loop(ctx context.Context, id string, wake <-chan struct{}) {
	for ctx.Err() == nil {
		n, err := w.runBatch(ctx, id)
		if err != nil && ctx.Err() == nil {
			w.cfg.Logger.Error("claim failed", slog.String("worker", id), slog.Any("error", err))
		}
		if n == w.cfg.Batch && err == nil {
			continue // more may be due right away
		}
		select {
		case <-ctx.Done():
		case <-wake:
		case <-time.After(w.cfg.Poll):
		}
	}
}

// Drain processes due jobs until none is left (for the demo, bench and
// tests). It returns how many it processed.
func (w *Worker) Drain(ctx context.Context) (int, error) {
	total := 0
	for {
		n, err := w.runBatch(ctx, w.cfg.Name+"-drain")
		total += n
		if err != nil || n == 0 {
			return total, err
		}
	}
}

// runBatch claims one batch and processes it; on shutdown it releases what
// it did not start.
func (w *Worker) runBatch(ctx context.Context, id string) (int, error) {
	jobs, err := w.cfg.Store.Claim(ctx, id, w.cfg.Batch, w.cfg.Lease)
	if err != nil {
		return 0, err
	}
	for i, job := range jobs {
		if ctx.Err() != nil {
			// Stopping: hand the rest back now rather than after the lease.
			if err := w.cfg.Store.Release(context.WithoutCancel(ctx), id, jobs[i:]); err != nil {
				w.cfg.Logger.Error("release leases", slog.String("worker", id), slog.Any("error", err))
			}
			return i, ctx.Err()
		}
		w.process(ctx, id, job)
	}
	return len(jobs), nil
}

// process reconciles one job claimed by worker id and records its outcome.
// Failures are recorded, never returned: the job is retried, ignored or
// dead.
func (w *Worker) process(ctx context.Context, id string, job Job) Outcome {
	log := w.cfg.Logger.With(slog.String("provider", job.Provider), slog.String("customer", job.CustomerID))
	// Finishing a job must not be cut short by shutdown: its lease would
	// hold the customer back for nothing.
	storeCtx := context.WithoutCancel(ctx)
	if ctx.Err() != nil {
		return w.release(storeCtx, id, job)
	}
	observedAt, err := w.cfg.Store.Now(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return w.release(storeCtx, id, job)
		}
		log.Error("read database clock", slog.Any("error", err))
		return Outcome{Result: ResultRetry, Text: err.Error()}
	}
	out, err := w.reconcile(ctx, storeCtx, id, job, observedAt)
	if err != nil {
		// The store failed: the lease runs out and the job is claimed again.
		log.Error("record reconcile", slog.Any("error", err))
		return Outcome{Result: ResultRetry, Text: err.Error()}
	}
	switch out.Result {
	case ResultDead:
		w.dead.Add(1)
		log.Error("ALERT: reconcile dead, customer needs attention", slog.String("outcome", out.Text), slog.Int("attempts", job.Attempts+1))
	case ResultRetry:
		log.Warn("reconcile failed, will retry", slog.String("outcome", out.Text))
	default:
		log.Info("reconciled", slog.String("result", string(out.Result)), slog.String("outcome", out.Text), slog.Int("events", out.Events))
	}
	if w.cfg.OnOutcome != nil {
		w.cfg.OnOutcome(job, out)
	}
	return out
}

// release hands a job back untouched on shutdown: no attempt is counted
// and the next worker may claim it at once.
func (w *Worker) release(ctx context.Context, id string, job Job) Outcome {
	if err := w.cfg.Store.Release(ctx, id, []Job{job}); err != nil {
		w.cfg.Logger.Error("release lease", slog.String("worker", id), slog.Any("error", err))
	}
	return Outcome{Result: ResultRetry, Text: "released on shutdown"}
}

func (w *Worker) reconcile(ctx, storeCtx context.Context, id string, job Job, observedAt time.Time) (Outcome, error) {
	p, ok := w.providers[job.Provider]
	if !ok {
		return w.cfg.Store.Ignore(storeCtx, job, observedAt, fmt.Sprintf("provider %q is not configured", job.Provider))
	}
	fetchCtx, cancel := context.WithTimeout(ctx, w.cfg.FetchTimeout)
	snap, err := p.Fetch(fetchCtx, job.CustomerID)
	cancel()
	switch {
	case err == nil:
		return w.cfg.Store.Apply(storeCtx, job, observedAt, snap, w.cfg.Plans)
	case errors.Is(err, ErrCustomerUnknown):
		return w.cfg.Store.Ignore(storeCtx, job, observedAt, fmt.Sprintf("customer %s is unknown to %s", job.CustomerID, job.Provider))
	case IsPermanent(err):
		return w.cfg.Store.Ignore(storeCtx, job, observedAt, err.Error())
	}
	if ctx.Err() != nil {
		// Shutting down, not a provider failure: give the job back as is.
		return w.release(storeCtx, id, job), nil
	}
	// Each wait follows a failed attempt; the attempt after the last wait
	// is the last one.
	dead := job.Attempts >= len(w.cfg.Backoff)
	delay := w.cfg.Backoff[min(job.Attempts, len(w.cfg.Backoff)-1)]
	return w.cfg.Store.Retry(storeCtx, job, observedAt, err, delay, dead)
}
