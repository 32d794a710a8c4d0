package reconcile

import (
	"errors"
	"fmt"
	"time"
)

// Retention: what billsync may forget, and when. A handled event (applied
// or ignored) is evidence for support staff and the key that makes a
// provider's retry a copy; once no provider can still send a copy, its
// row, payload and receipts may go. Pending and dead work, accounts and
// the ledger are never pruned. The app's changes (the outbox) go once
// older than the retention and every delivery of theirs is finished.

// MinRetention is the shortest age at which a handled event may be
// forgotten: Stripe retries a delivery for up to 3 days, and billsync
// accepts a Kinde token for KINDE_REPLAY_WINDOW (72 h by default). A copy
// arriving after its event was pruned would be stored as a new event and
// cost one more reconcile (harmless: every effect is keyed or guarded),
// but dedupe is promised for as long as a provider can retry.
const MinRetention = 72 * time.Hour

// DefaultPruneBatch is how many rows one prune statement deletes: each
// batch is its own short transaction, so a prune never holds locks for
// long nor bloats one transaction.
const DefaultPruneBatch = 1000

// Retention says what a prune deletes.
type Retention struct {
	// OlderThan: handled events last seen, their receipts, reconcile
	// log rows, the app's finished changes and the correctness sample's
	// rows written longer ago than this are deleted (at least
	// MinRetention).
	OlderThan time.Duration
	// Batch bounds the rows one statement deletes (default
	// DefaultPruneBatch).
	Batch int
}

// Validate reports why r cannot be used.
func (r Retention) Validate() error {
	var errs []error
	if r.OlderThan < MinRetention {
		errs = append(errs, fmt.Errorf("%w: older-than %s is below %s: a provider may still retry such an event (Stripe for 3 days, Kinde within KINDE_REPLAY_WINDOW), and its copy must find it to be a copy",
			ErrInvalid, r.OlderThan, MinRetention))
	}
	if r.Batch < 0 || r.Batch > 100_000 {
		errs = append(errs, fmt.Errorf("%w: batch %d: want 1-100000 (0: %d)", ErrInvalid, r.Batch, DefaultPruneBatch))
	}
	return errors.Join(errs...)
}

// Pruned counts what a prune deleted.
type Pruned struct {
	Receipts   int64 // receipts of handled events
	Events     int64 // handled events (their payloads with them)
	LogRows    int64 // reconcile_log rows
	Sessions   int64 // expired console sessions
	Changes    int64 // the app's changes, every delivery finished (their deliveries with them)
	Samples    int64 // the correctness sample's rows
	SweepRuns  int64 // Stripe Connect accounts' finished sweep runs (each account's newest and newest successful kept)
	Batches    int   // statements run
	Cutoff     time.Time
	MaxInBatch int64 // the most rows one statement deleted (at most Batch)
}

// ErrPruneRunning means another prune holds the lock (another replica's
// schedule, or a `billsync prune`).
var ErrPruneRunning = errors.New("a prune is already running")

// TableSize is one table's footprint: rows and bytes with its indexes and
// TOAST.
type TableSize struct {
	Table string
	// Rows are counted when Exact; else PostgreSQL's estimate, -1 when
	// it has none (the table was never analyzed).
	Rows  int64
	Exact bool
	Bytes int64
}
