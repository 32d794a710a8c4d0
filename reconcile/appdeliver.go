package reconcile

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// AppDeliveryStore is what the deliverer needs from the database
// (store.Store implements it).
type AppDeliveryStore interface {
	// RegisterEndpoints gives each endpoint a cursor on the change feed,
	// from now, unless it has one.
	RegisterEndpoints(ctx context.Context, endpoints []string) error
	// FanOut creates the deliveries of up to limit changes per endpoint
	// past its cursor, and moves the cursor; more when a page was full.
	// An import's changes (Why.Trigger TriggerImport) get deliveries
	// claimed after every live one, or none unless imports.
	FanOut(ctx context.Context, endpoints []string, limit int, imports bool) (more bool, err error)
	// ClaimDeliveries leases up to limit due deliveries to endpoints to
	// holder, at most one per account and endpoint, in seq order; live
	// ones before an import's, and at most imports of an import's.
	ClaimDeliveries(ctx context.Context, holder string, endpoints []string, limit, imports int, lease time.Duration) ([]AppDelivery, error)
	// RecordDelivery records an attempt and the delivery's next state;
	// ErrHeld when holder's lease was taken over meanwhile.
	RecordDelivery(ctx context.Context, holder string, d AppDelivery, a AppDeliveryAttempt, status string, retryIn time.Duration) error
}

// AppSender sends one delivery to the app, signed, and says what came of
// it (a 2xx is delivered; anything else, or no answer, is not).
type AppSender interface {
	Send(ctx context.Context, d AppDelivery) AppDeliveryAttempt
}

// Delivery retry policy (docs/app-changes.md).
const (
	DeliveryFirstRetry = 5 * time.Second
	DeliveryMaxBackoff = time.Hour
	// DeliveryMaxAge: a change not delivered this long after it was
	// written is given up (dead: an alert, a metric, the console's Retry).
	DeliveryMaxAge = 72 * time.Hour
)

// StatusGone is the answer by which an app says an endpoint no longer
// takes deliveries (the Standard Webhooks convention): given up at once.
const StatusGone = 410

// NextDelivery decides what becomes of delivery d after attempt a at now:
// a 2xx is delivered; 410 is dead at once; any other answer, a timeout or
// a connection error is retried after an exponential backoff (5 s
// doubling to at most an hour) with jitter (the delay is drawn from its
// upper half; jitter is in [0, 1)), until the change is DeliveryMaxAge
// old: the last retry lands at that age, and a failure then is dead.
func NextDelivery(d AppDelivery, a AppDeliveryAttempt, now time.Time, jitter float64) (status string, retryIn time.Duration) {
	switch {
	case a.StatusCode >= 200 && a.StatusCode < 300:
		return DeliveryDelivered, 0
	case a.StatusCode == StatusGone:
		return DeliveryDead, 0
	}
	left := DeliveryMaxAge - now.Sub(d.CreatedAt)
	if left <= 0 {
		return DeliveryDead, 0
	}
	backoff := DeliveryMaxBackoff
	if d.Attempts < 20 { // 5 s << 20 is past the cap
		backoff = min(DeliveryFirstRetry<<d.Attempts, DeliveryMaxBackoff)
	}
	delay := backoff/2 + time.Duration(jitter*float64(backoff/2))
	return DeliveryPending, min(delay, left)
}

// AppDelivererConfig configures a Deliverer. Zero values take the defaults.
type AppDelivererConfig struct {
	Name      string // lease holder: unique per replica
	Store     AppDeliveryStore
	Sender    AppSender
	Endpoints []string
	Logger    *slog.Logger
	// Concurrency is how many deliveries are in flight at once (each of a
	// different account); default 8. An import's take at most ImportSlots
	// of them, so a live change never waits for a slot behind an import's
	// backlog.
	Concurrency int
	// Lease is how long a claimed delivery stays this replica's; it must
	// outlast an attempt (the sender's deadline); default 2 minutes.
	Lease time.Duration
	// Poll is how often to look for due deliveries when not woken;
	// default 1 s.
	Poll time.Duration
	// QuietImports: an import's changes reach the change feed but no
	// endpoint (BILLSYNC_IMPORT_NOTIFY=false); by default they are
	// delivered after every live change.
	QuietImports bool
	// OnAttempt, when set, is told of every attempt and its outcome
	// (metrics).
	OnAttempt func(d AppDelivery, a AppDeliveryAttempt, status string)
}

// fanOutPage is how many changes per endpoint one fan-out creates
// deliveries for.
const fanOutPage = 500

// ImportSlots is how many of concurrency in-flight deliveries an import's
// may take: all but a quarter (at least one), which stay free for live
// changes; with one slot, that one.
func ImportSlots(concurrency int) int {
	return max(1, concurrency-max(1, concurrency/4))
}

// AppDeliverer sends the app its account changes: each one at least once,
// one account's in order, with the same id on every attempt. It creates
// the deliveries itself, from the change feed, so a change reaches every
// endpoint whichever process wrote it.
type AppDeliverer struct {
	cfg        AppDelivererConfig
	wake       chan struct{}
	registered bool // Run's own: the endpoints have their cursors
}

// NewAppDeliverer checks cfg and returns a Deliverer.
func NewAppDeliverer(cfg AppDelivererConfig) (*AppDeliverer, error) {
	var errs []error
	if cfg.Name == "" || cfg.Store == nil || cfg.Sender == nil {
		errs = append(errs, errors.New("deliverer: a name, a store and a sender are required"))
	}
	if len(cfg.Endpoints) == 0 {
		errs = append(errs, errors.New("deliverer: no endpoint"))
	}
	if cfg.Concurrency < 0 || cfg.Lease < 0 || cfg.Poll < 0 {
		errs = append(errs, errors.New("deliverer: negative concurrency, lease or poll"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	cfg.Concurrency = cmp.Or(cfg.Concurrency, 8)
	cfg.Lease = cmp.Or(cfg.Lease, 2*time.Minute)
	cfg.Poll = cmp.Or(cfg.Poll, time.Second)
	cfg.Logger = cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	return &AppDeliverer{cfg: cfg, wake: make(chan struct{}, 1)}, nil
}

// Register gives the endpoints their cursors on the change feed. A new
// endpoint gets the changes written from now on: call it before this
// process's workers start, so none of theirs is before its cursor. Run
// registers too, when not done yet.
func (d *AppDeliverer) Register(ctx context.Context) error {
	if err := d.cfg.Store.RegisterEndpoints(ctx, d.cfg.Endpoints); err != nil {
		return fmt.Errorf("deliverer: %w", err)
	}
	return nil
}

// fanOut creates the deliveries of the changes past the endpoints'
// cursors; more when there may be more to create.
func (d *AppDeliverer) fanOut(ctx context.Context) (more bool, err error) {
	if !d.registered {
		if err := d.Register(ctx); err != nil {
			return false, err
		}
		d.registered = true
	}
	return d.cfg.Store.FanOut(ctx, d.cfg.Endpoints, fanOutPage, !d.cfg.QuietImports)
}

// Wake makes the deliverer look for due deliveries now (a change
// committed, or the console asked for a retry).
func (d *AppDeliverer) Wake() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// Run delivers until ctx is done; the deliveries in hand are finished
// first (each bounded by the sender's deadline). Up to Concurrency are in
// flight, and a slot that frees is claimed for at once: one slow answer
// holds up its own account's later changes only, never the others'.
// An answered delivery may make its account's next change due, so each
// one ends in a new claim.
func (d *AppDeliverer) Run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	var inFlight, importsInFlight atomic.Int64
	importSlots := ImportSlots(d.cfg.Concurrency)
	answered := make(chan struct{}, 1)
	idle := false // the last claim found fewer due than it asked for
	for ctx.Err() == nil {
		// Deliveries are created before each claim: a NOTIFY, a poll or
		// an answer wakes both.
		more, err := d.fanOut(ctx)
		if err != nil && ctx.Err() == nil {
			d.cfg.Logger.Warn("fan out app deliveries failed", slog.Any("error", err))
		}
		if free := d.cfg.Concurrency - int(inFlight.Load()); !idle && free > 0 {
			imports := min(free, max(0, importSlots-int(importsInFlight.Load())))
			ds, err := d.cfg.Store.ClaimDeliveries(ctx, d.cfg.Name, d.cfg.Endpoints, free, imports, d.cfg.Lease)
			if err != nil && ctx.Err() == nil {
				d.cfg.Logger.Warn("claim app deliveries failed", slog.Any("error", err))
			}
			for _, dl := range ds {
				inFlight.Add(1)
				if dl.Imported {
					importsInFlight.Add(1)
				}
				wg.Go(func() {
					defer signal(answered)
					defer inFlight.Add(-1)
					if dl.Imported {
						defer importsInFlight.Add(-1)
					}
					d.deliver(context.WithoutCancel(ctx), dl)
				})
			}
			if idle = err != nil || len(ds) < free; !idle {
				continue // more may be due
			}
		}
		if more && ctx.Err() == nil {
			idle = false
			continue // more changes to fan out
		}
		t := time.NewTimer(d.cfg.Poll)
		select {
		case <-ctx.Done():
		case <-d.wake:
		case <-answered:
		case <-t.C:
		}
		t.Stop()
		idle = false
	}
}

func (d *AppDeliverer) deliver(ctx context.Context, dl AppDelivery) {
	a := d.cfg.Sender.Send(ctx, dl)
	status, retryIn := NextDelivery(dl, a, time.Now(), rand.Float64())
	log := d.cfg.Logger.With(slog.Int64("change", dl.ChangeID), slog.Int64("account", dl.AccountID),
		slog.Int64("seq", dl.Seq), slog.String("endpoint", dl.Endpoint), slog.Int("attempt", dl.Attempts+1))
	if err := d.cfg.Store.RecordDelivery(ctx, d.cfg.Name, dl, a, status, retryIn); err != nil {
		// Not recorded: the lease runs out and the delivery is sent again
		// (at least once).
		log.Warn("app delivery not recorded; it will be sent again", slog.Any("error", err))
		return
	}
	if d.cfg.OnAttempt != nil {
		d.cfg.OnAttempt(dl, a, status)
	}
	switch status {
	case DeliveryDead:
		log.Error("ALERT: app delivery given up: retry it from the console (Deliveries) once the app is fixed",
			slog.Int("status", a.StatusCode), slog.String("error", a.Error))
	case DeliveryPending:
		log.Info("app delivery failed; will retry", slog.Int("status", a.StatusCode), slog.String("error", a.Error),
			slog.Duration("retry_in", retryIn))
	}
}

// String names a delivery for logs.
func (d AppDelivery) String() string { return fmt.Sprintf("change %d to %s", d.ChangeID, d.Endpoint) }
