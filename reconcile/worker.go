package reconcile

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultBackoff is the wait after each failed attempt; after the last one
// the job is dead.
var DefaultBackoff = []time.Duration{5 * time.Second, 30 * time.Second, 2 * time.Minute, 10 * time.Minute, time.Hour}

// DefaultBatch is how many claimed jobs a worker keeps, at least, beyond
// its fetch slots: a slot that frees finds its next job in hand instead
// of waiting for a claim round trip.
const DefaultBatch = 2

// DefaultMaxInFlight is the most fetches a worker has in flight at once
// by default: what 100 requests a second (Stripe's live limit) need at a
// second of latency, with headroom. How many are in flight below it
// follows each provider's Budget.
const DefaultMaxInFlight = 128

// WorkerConfig configures a Worker. Zero values take the defaults;
// negative ones are an error.
type WorkerConfig struct {
	Name      string // prefix of the lease holder's id; default "worker"
	Store     Store  // required
	Providers []Provider
	Plans     *Plans // required
	Logger    *slog.Logger
	// Concurrency is the most provider fetches in flight at once in this
	// process, over all providers; default DefaultMaxInFlight. Below it
	// each provider has as many as its Budget calls for (rate × latency,
	// with headroom): this is a bound, not the throughput knob. Claimed
	// jobs are at most twice the fetch slots and their spares.
	Concurrency int
	// Batch is the least number of claimed jobs kept beyond the fetch
	// slots (half as many as the slots when more); default DefaultBatch.
	Batch        int
	Lease        time.Duration // how long a claim holds unless renewed; default DefaultLease
	Poll         time.Duration // fallback poll when no wake-up comes; default 1 s
	FetchTimeout time.Duration // deadline of one provider fetch; default 30 s
	// RecheckDelay is how long the worker waits before reading a customer
	// again when the first read contradicts the newest event's own object
	// (a stale read: the provider's API lagging behind its webhook);
	// default 1 s, negative = never read again.
	RecheckDelay time.Duration
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
	cfg.Concurrency = cmp.Or(cfg.Concurrency, DefaultMaxInFlight)
	cfg.Batch = cmp.Or(cfg.Batch, DefaultBatch)
	cfg.Lease = cmp.Or(cfg.Lease, DefaultLease)
	cfg.Poll = cmp.Or(cfg.Poll, time.Second)
	cfg.FetchTimeout = cmp.Or(cfg.FetchTimeout, 30*time.Second)
	cfg.RecheckDelay = cmp.Or(cfg.RecheckDelay, time.Second)
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
	names     []string // of the providers, in config order
	slots     *slots
	wake      chan struct{}
	dead      atomic.Int64
	// claimErr is the last claim's failure, nil once one succeeds: a
	// worker whose every claim fails is not ready, whatever a ping says.
	claimErr atomic.Pointer[error]
}

// ClaimErr is the last claim's failure (wrapped in ErrStoreUnavailable), or nil
// when the last claim succeeded: a store that answers pings but refuses
// the claim (a pooler that broke its statements) leaves the worker unable
// to drain, and /readyz must say so.
func (w *Worker) ClaimErr() error {
	if err := w.claimErr.Load(); err != nil {
		return fmt.Errorf("%w: the worker's claims fail: %w", ErrStoreUnavailable, *err)
	}
	return nil
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
		w.names = append(w.names, p.Name())
	}
	w.slots = newSlots(cfg.Concurrency, w.budget)
	w.wake = make(chan struct{}, 1)
	return w, nil
}

// budget is provider's Budget; unknown for a provider not configured
// (its jobs end ignored at once).
func (w *Worker) budget(provider string) Budget {
	if p, ok := w.providers[provider]; ok {
		return p.Budget()
	}
	return Budget{}
}

// Wake tells an idle worker that work may be due (called on NOTIFY).
func (w *Worker) Wake() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// Dead returns how many jobs this worker has marked dead.
func (w *Worker) Dead() int64 { return w.dead.Load() }

// FetchSlots is one provider's fetch slots in a worker: how many of its
// reads may be in flight now (its Budget's InFlight, within the worker's
// bound), how many are, and the latency they are sized by.
type FetchSlots struct {
	Provider string
	Limit    int
	InFlight int
	Latency  time.Duration // 0 before the first answer
}

// Slots reports each configured provider's fetch slots, in the order the
// providers were given.
func (w *Worker) Slots() []FetchSlots {
	out := make([]FetchSlots, 0, len(w.names))
	for _, p := range w.names {
		s := w.slots.of(p)
		s.Latency = w.budget(p).Latency
		out = append(out, s)
	}
	return out
}

// Run claims and processes jobs until ctx is done, then finishes the jobs
// in flight and releases the leases it holds on the rest. Failures are
// logged and retried, never returned: the database may come back.
//
// Claiming and fetching are apart: each claimed job's fetch waits for a
// slot of its provider's (slots: as many as its Budget calls for), and
// the claimer keeps more jobs claimed than the slots can run (half as many
// again, at least Batch: some are applying, some wait), so a slot that
// frees starts its next fetch at once. Claimed jobs that wait keep their
// leases by the heartbeat like those in flight.
func (w *Worker) Run(ctx context.Context) {
	id := w.cfg.Name
	held := &heldJobs{}
	stop := w.heartbeat(ctx, id, held)
	defer stop()
	var jobs sync.WaitGroup
	defer jobs.Wait()              // before the heartbeat stops: deferred last, runs first
	room := make(chan struct{}, 1) // a job began its fetch, or ended
	var unstarted atomic.Int64     // claimed jobs whose fetch has not begun
	idle := false                  // the last claim found fewer due jobs than it asked for
	for ctx.Err() == nil {
		// Claim for the fetch slots, plus spares (half as many, at least
		// Batch, and at least minSpare within the bound) so a slot that
		// frees finds a job in hand. Jobs applying their fetch's result
		// do not count (the database's time must not take a fetch's
		// place), up to as many again: more would only queue for the
		// database's connections ahead of the next jobs' first query, and
		// a database that hangs must not make the worker claim without
		// end.
		capacity := w.slots.capacity(w.names)
		spare := max(w.cfg.Batch, capacity/2, min(minSpare, w.cfg.Concurrency))
		want := min(capacity+spare-w.slots.inFlight()-int(unstarted.Load()), 2*(capacity+spare)-held.len())
		// Claim when half the spares are gone: one claim query for
		// several jobs, and a slot that frees still finds one waiting.
		if !idle && want > 0 && want >= (spare+1)/2 {
			claimed, err := w.claim(ctx, id, want)
			at := time.Now()
			if err != nil && ctx.Err() == nil {
				w.cfg.Logger.Error("claim failed", slog.String("worker", id), slog.Any("error", err))
				w.claimErr.Store(&err)
			} else if err == nil {
				w.claimErr.Store(nil)
			}
			held.add(claimed)
			unstarted.Add(int64(len(claimed)))
			for _, job := range claimed {
				jobs.Go(func() {
					started := sync.OnceFunc(func() { unstarted.Add(-1); signal(room) })
					defer signal(room)
					defer held.done(job.ID)
					defer started()
					w.process(ctx, id, job, at, started)
				})
			}
			idle = err != nil || len(claimed) < want
			if !idle {
				continue // more may be due right away
			}
		}
		var roomC <-chan struct{}
		if !idle {
			roomC = room // waiting for room, not for work
		}
		select {
		case <-ctx.Done():
		case <-w.wake:
			idle = false
		case <-roomC:
		case <-time.After(w.cfg.Poll):
			idle = false
		}
	}
}

// minSpare is the fewest claimed jobs a worker keeps beyond its fetch
// slots (within its bound). A job reaches its fetch through a claim, which
// takes tens of milliseconds on a busy database: at 100 fetches a second
// and a short latency (few slots), half the slots as spares would leave
// slots idle while the next jobs are still on their way (measured: 52% of
// the limit at 50 ms with 4 spares on a loaded machine).
const minSpare = 16

func signal(c chan<- struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// claim claims up to n due jobs. It is not cut short by shutdown (the
// store bounds it): one cancelled after PostgreSQL committed it but before
// its rows were read would leave leases nobody knows of until they run
// out. A claim that returns is handed back when stopping.
func (w *Worker) claim(ctx context.Context, id string, n int) ([]Job, error) {
	return w.cfg.Store.Claim(context.WithoutCancel(ctx), id, n, w.cfg.Lease)
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

// runBatch claims one batch and processes it one job at a time (Drain),
// renewing the leases of the
// jobs it still holds while it works; on shutdown it releases what it did
// not start.
func (w *Worker) runBatch(ctx context.Context, id string) (int, error) {
	jobs, err := w.claim(ctx, id, w.cfg.Batch)
	at := time.Now()
	if err != nil || len(jobs) == 0 {
		return 0, err
	}
	held := &heldJobs{jobs: slices.Clone(jobs)}
	stop := w.heartbeat(ctx, id, held)
	defer stop()
	for i, job := range jobs {
		if ctx.Err() != nil {
			// Stopping: hand the rest back now rather than after the lease.
			w.release(ctx, id, jobs[i:]...)
			return i, ctx.Err()
		}
		w.process(ctx, id, job, at, nil)
		held.done(job.ID)
	}
	return len(jobs), nil
}

// heldJobs are the claimed jobs a worker holds: in flight, or waiting
// for a slot.
type heldJobs struct {
	mu   sync.Mutex
	jobs []Job
}

func (h *heldJobs) add(jobs []Job) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.jobs = append(h.jobs, jobs...)
}

func (h *heldJobs) len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.jobs)
}

func (h *heldJobs) done(id int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.jobs = slices.DeleteFunc(h.jobs, func(j Job) bool { return j.ID == id })
}

func (h *heldJobs) list() []Job {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.jobs)
}

// heartbeat renews the leases of held every third of a lease until stop is
// called, so a worker that is alive never loses a customer, and one that
// died (kill -9, a lost host) holds it for one lease at most.
func (w *Worker) heartbeat(ctx context.Context, id string, held *heldJobs) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	// Renewing outlives the caller's ctx: jobs in hand are finished on
	// shutdown, and must stay leased until they are.
	ctx = context.WithoutCancel(ctx)
	go func() {
		defer close(finished)
		tick := time.NewTicker(w.cfg.Lease / 3)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			jobs := held.list()
			if len(jobs) == 0 {
				continue
			}
			n, err := w.cfg.Store.Extend(ctx, id, jobs, w.cfg.Lease)
			switch {
			case err != nil:
				w.cfg.Logger.Warn("renew leases", slog.String("worker", id), slog.Any("error", err))
			case n < len(jobs):
				// The lease ran out and another worker took the job: the
				// guarded write makes the overlap harmless.
				w.cfg.Logger.Warn("lost a lease", slog.String("worker", id), slog.Int("held", n), slog.Int("jobs", len(jobs)))
			}
		}
	}()
	return func() { close(done); <-finished }
}

// alertUnmapped logs an alert naming the prices that map to no plan when
// they leave an account frozen: a new price version or a moved lookup key
// must be noticed, not only logged as ignored.
func alertUnmapped(ctx context.Context, log *slog.Logger, out Outcome) {
	if len(out.Unmapped) == 0 {
		return
	}
	log.ErrorContext(ctx, "ALERT: price maps to no plan, account left as it was; map it in the plans file",
		slog.Any("prices", out.Unmapped), slog.String("outcome", out.Text))
}

// process reconciles one job claimed by worker id and records its outcome.
// Failures are recorded, never returned: the job is retried, ignored or
// dead. A failure of the store itself counts as a failed attempt too, so a
// fault that never clears (a constraint violation, say) ends dead and
// visible instead of looping silently. started, when not nil, is called
// as the job's first read begins (Run's claimer counts the jobs still
// waiting for a fetch slot by it).
func (w *Worker) process(ctx context.Context, id string, job Job, claimed time.Time, started func()) Outcome {
	log := w.cfg.Logger.With(slog.String("provider", job.Provider), slog.String("customer", job.CustomerID))
	if ctx.Err() != nil {
		w.release(ctx, id, job)
		return Outcome{Result: ResultRetry, Text: "released on shutdown"}
	}
	start := time.Now()
	observe := w.observer(job, claimed)
	job, out, observedAt, err := w.resolve(ctx, job, observe, started)
	if err == nil && out.Result == "" {
		out, observedAt, err = w.reconcile(ctx, job, observe, started)
	}
	switch {
	case errors.Is(err, errShutdown):
		// Shutting down, not a failure: give the job back as it is.
		w.release(ctx, id, job)
		return Outcome{Result: ResultRetry, Text: "released on shutdown"}
	case err != nil:
		log.Error("reconcile failed in the store", slog.Any("error", err))
		out = w.recordFailure(ctx, job, observedAt, fmt.Errorf("store: %w", err))
	default:
		out.AnsweredAt = answeredAt(ctx, observe, out)
	}
	out.Took = time.Since(start)
	switch out.Result {
	case ResultDead:
		w.dead.Add(1)
		log.Error("ALERT: reconcile dead, customer needs attention", slog.String("outcome", out.Text), slog.Int("attempts", job.Attempts+1))
	case ResultRetry:
		log.Warn("reconcile failed, will retry", slog.String("outcome", out.Text))
	default:
		log.Info("reconciled", slog.String("result", string(out.Result)), slog.String("outcome", out.Text), slog.Int("events", out.Events))
	}
	alertUnmapped(ctx, log, out)
	if w.cfg.OnOutcome != nil {
		w.cfg.OnOutcome(job, out)
	}
	return out
}

// answeredAt is the database's time just after the commit that answered
// out's events, on the job's observer (no round trip for a claimed job),
// so each event's wait to be reflected is measured on the clock that
// stamped it; zero when none were answered or the time cannot be had.
func answeredAt(ctx context.Context, observe observer, out Outcome) time.Time {
	if len(out.Answered) == 0 {
		return time.Time{}
	}
	at, err := observe(context.WithoutCancel(ctx))
	if err != nil {
		return time.Time{}
	}
	return at
}

// errShutdown is a fetch cut short by shutdown.
var errShutdown = errors.New("shutting down")

// release hands jobs back untouched: no attempt is counted and the next
// worker may claim them at once.
func (w *Worker) release(ctx context.Context, id string, jobs ...Job) {
	if err := w.cfg.Store.Release(context.WithoutCancel(ctx), id, jobs); err != nil {
		w.cfg.Logger.Error("release leases; they run out on their own", slog.String("worker", id), slog.Any("error", err))
	}
}

// reconcile fetches the customer's snapshot and records what it means,
// and returns the database time it is observed at (zero when even that
// could not be had). Store calls are not cut short by shutdown (the store
// bounds them): a job whose snapshot is in hand is finished, not thrown
// away.
func (w *Worker) reconcile(ctx context.Context, job Job, observe observer, started func()) (Outcome, time.Time, error) {
	storeCtx := context.WithoutCancel(ctx)
	if _, ok := w.providers[job.Provider]; !ok {
		observedAt, err := observe(ctx)
		if err != nil {
			return Outcome{}, observedAt, w.stopping(ctx, err)
		}
		out, err := w.cfg.Store.Ignore(storeCtx, job, observedAt, ignored(fmt.Sprintf("provider %q is not configured", job.Provider)))
		return out, observedAt, err
	}
	snap, observedAt, err := w.fetch(ctx, job, observe, started)
	var recheck string
	if why, stale := job.Expect.Contradicts(snap); err == nil && stale && w.cfg.RecheckDelay > 0 {
		if err := w.awaitRecheck(ctx, job, why); err != nil {
			return Outcome{}, observedAt, err
		}
		snap, observedAt, err = w.fetch(ctx, job, observe, nil)
		recheck = RecheckAgreed
		if _, still := job.Expect.Contradicts(snap); err == nil && still {
			recheck = RecheckDisagreed
		}
	}
	if err != nil {
		out, err := w.failure(ctx, job, observedAt, err)
		return out, observedAt, err
	}
	out, err := w.cfg.Store.Apply(storeCtx, job, observedAt, NewDecider(job, snap, w.cfg.Plans, observedAt))
	out.Recheck = recheck
	return out, observedAt, err
}

// failure records a failed read of the job's provider: ignored when
// retrying cannot fix it, else retried after the job's backoff, or dead.
func (w *Worker) failure(ctx context.Context, job Job, observedAt time.Time, err error) (Outcome, error) {
	storeCtx := context.WithoutCancel(ctx)
	out, perm := permanent(job, err)
	switch {
	case observedAt.IsZero():
		// No read was made: no slot (shutdown) or no time (the store).
		return Outcome{}, w.stopping(ctx, err)
	case perm:
		return w.cfg.Store.Ignore(storeCtx, job, observedAt, out)
	case ctx.Err() != nil:
		return Outcome{}, errShutdown
	}
	out, delay := w.failed(job, err)
	return w.cfg.Store.Retry(storeCtx, job, observedAt, out, delay)
}

// resolve turns a job keyed by a related object (a Stripe thin event's
// subscription or invoice: see Related) into its customer's job: it reads
// the object's customer from the provider, in a fetch slot like any read,
// and hands the job over in the store (Store.Resolve). The intake stored
// the event without asking the provider; this is where it is asked. A job
// keyed by a customer comes back as it is. An outcome with a Result means
// the job ended here: the object names no customer billsync can read
// (ignored), the provider failed (retried, then dead, as a failed fetch),
// or the customer was queued already and that row's reconcile answers the
// events.
func (w *Worker) resolve(ctx context.Context, job Job, observe observer, started func()) (Job, Outcome, time.Time, error) {
	obj, ok := RelatedOf(job.CustomerID)
	if _, known := w.providers[job.Provider]; !ok || !known {
		return job, Outcome{}, time.Time{}, nil
	}
	customer, observedAt, err := w.customerOf(ctx, job, obj, observe, started)
	if err != nil {
		out, err := w.failure(ctx, job, observedAt, err)
		return job, out, observedAt, err
	}
	next, ok, err := w.cfg.Store.Resolve(context.WithoutCancel(ctx), job, customer)
	switch {
	case err != nil:
		return job, Outcome{}, observedAt, err
	case !ok:
		return job, handedOver(obj, customer), observedAt, nil
	}
	return next, Outcome{}, time.Time{}, nil
}

// customerOf reads the customer of obj from the job's provider within
// FetchTimeout, once a slot is free, and returns the database time the
// read is observed at (see fetch).
func (w *Worker) customerOf(ctx context.Context, job Job, obj Related, observe observer, started func()) (string, time.Time, error) {
	var customer string
	observedAt, err := w.read(ctx, job, observe, started, func(ctx context.Context, p Provider) (err error) {
		customer, err = p.CustomerOf(ctx, obj)
		return err
	})
	if err != nil {
		return "", observedAt, err
	}
	customer, err = customerOfRelated(obj, customer)
	return customer, observedAt, err
}

// stopping is errShutdown when ctx is done (a store call cut short by
// shutdown), else err.
func (w *Worker) stopping(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return errShutdown
	}
	return err
}

// awaitRecheck waits RecheckDelay before a second read of a customer whose
// first read contradicted its newest event. The second read is applied
// whatever it says: the event may just be older than the provider's state.
func (w *Worker) awaitRecheck(ctx context.Context, job Job, why string) error {
	w.cfg.Logger.Warn("the provider's answer contradicts the customer's newest event; reading it again",
		slog.String("provider", job.Provider), slog.String("customer", job.CustomerID),
		slog.String("why", why), slog.Duration("in", w.cfg.RecheckDelay))
	select {
	case <-ctx.Done():
		return errShutdown
	case <-time.After(w.cfg.RecheckDelay):
		return nil
	}
}

// An observer returns the database time a fetch beginning now is
// observed at: never later than the moment it begins, so that every event
// received before it happened at the provider before the read.
type observer func(ctx context.Context) (time.Time, error)

// observer is job's: its claim's database time plus the time since the
// claim came back, on this process's monotonic clock, less clockSkew of
// it (the two clocks may run at slightly different rates). The claim's
// time is no later than the claim's return, so the sum is no later than
// now: no database round trip between a fetch slot and its request, and
// the time stays fresh however long the job waited for a slot. A job
// whose store gave no claim time asks the database.
func (w *Worker) observer(job Job, claimed time.Time) observer {
	if job.ClaimedAt.IsZero() || claimed.IsZero() {
		return w.cfg.Store.Now
	}
	return func(context.Context) (time.Time, error) {
		waited := time.Since(claimed)
		return job.ClaimedAt.Add(waited - waited/clockSkew), nil
	}
}

// clockSkew is 1/1000: the database's clock and this process's are
// assumed to run within 0.1% of each other over a job's wait (NTP keeps
// clocks within 0.05%).
const clockSkew = 1000

// fetch reads the job's customer from its provider within FetchTimeout,
// once a slot of the provider's is free, and returns the database time
// the read is observed at (taken in the slot, just before the request;
// zero when no read was made: no slot, or the observer failed).
// The slot covers the fetch only, so the database's part of a reconcile
// (the apply) never takes a place the provider's latency needs.
func (w *Worker) fetch(ctx context.Context, job Job, observe observer, started func()) (Snapshot, time.Time, error) {
	var snap Snapshot
	observedAt, err := w.read(ctx, job, observe, started, func(ctx context.Context, p Provider) (err error) {
		snap, err = p.Fetch(ctx, job.CustomerID)
		return err
	})
	return snap, observedAt, err
}

// read runs one read of the job's provider within FetchTimeout, in one of
// the provider's slots, and returns the database time it is observed at
// (zero when no read was made).
func (w *Worker) read(ctx context.Context, job Job, observe observer, started func(), f func(context.Context, Provider) error) (time.Time, error) {
	if err := w.slots.acquire(ctx, job.Provider); err != nil {
		return time.Time{}, fmt.Errorf("wait for a %s fetch slot: %w", job.Provider, err)
	}
	defer w.slots.release(job.Provider)
	if started != nil {
		started() // Run's claimer: this job no longer waits
	}
	observedAt, err := observe(ctx)
	if err != nil {
		return time.Time{}, err
	}
	fetchCtx, cancel := context.WithTimeout(ctx, w.cfg.FetchTimeout)
	defer cancel()
	return observedAt, f(fetchCtx, w.providers[job.Provider])
}

// permanent returns the ignored outcome of a fetch failure that retrying
// cannot fix.
func permanent(job Job, err error) (Outcome, bool) {
	switch {
	case errors.Is(err, ErrCustomerUnknown):
		return ignored(fmt.Sprintf("customer %s is unknown to %s", job.CustomerID, job.Provider)), true
	case IsPermanent(err):
		return ignored(err.Error()), true
	}
	return Outcome{}, false
}

func ignored(reason string) Outcome {
	return Outcome{Result: ResultIgnored, Text: "ignored: " + reason}
}

// failed returns the outcome of a failed attempt and the wait before the
// next one: after the last wait the job is dead.
func (w *Worker) failed(job Job, cause error) (Outcome, time.Duration) {
	delay := w.cfg.Backoff[min(job.Attempts, len(w.cfg.Backoff)-1)]
	if job.Attempts >= len(w.cfg.Backoff) {
		return Outcome{Result: ResultDead, Text: fmt.Sprintf("dead after %d attempts: %v", job.Attempts+1, cause)}, delay
	}
	return Outcome{Result: ResultRetry, Text: fmt.Sprintf("retry in %s after attempt %d: %v", delay, job.Attempts+1, cause)}, delay
}

// recordFailure records a failed attempt whose cause was the store itself.
// The store may be failing for good (then the attempt counts, and the job
// ends dead) or only for a moment (a restart): one second later it is
// tried once more. If it still cannot be recorded, the job's lease runs out
// on its own (its heartbeat stops with this call) and the next claim
// retries it.
func (w *Worker) recordFailure(ctx context.Context, job Job, observedAt time.Time, cause error) Outcome {
	want, delay := w.failed(job, cause)
	storeCtx := context.WithoutCancel(ctx)
	out, err := w.cfg.Store.Retry(storeCtx, job, observedAt, want, delay)
	if err != nil {
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
		out, err = w.cfg.Store.Retry(storeCtx, job, observedAt, want, delay)
	}
	if err != nil {
		w.cfg.Logger.Error("cannot record the failure; the lease runs out on its own", slog.String("provider", job.Provider),
			slog.String("customer", job.CustomerID), slog.Any("error", err))
		return want
	}
	return out
}
