package reconcile

import (
	"context"
	"time"
)

// Trigger says why a customer was queued.
const (
	TriggerWebhook = "webhook"
	TriggerSweep   = "sweep"
	TriggerResync  = "resync"
	TriggerReplay  = "replay"
)

// Job is a claimed queue row: one customer to reconcile.
type Job struct {
	ID          int64
	Provider    string
	CustomerID  string
	Trigger     string
	RequestedAt time.Time
	Attempts    int // failed attempts so far
	// Actor is who asked, for the audit log: "cli:<os user>", "admin-api";
	// empty for the queue's own work (see ActorOf).
	Actor string
	// Expect is the newest pending event's expectation for the customer
	// (by the provider's event time), nil when none carries one.
	Expect *Expectation
	// UserRef is the app reference named by the customer's newest stored
	// event that names one, whatever its status ('' when none ever did),
	// for a provider whose reads do not carry one.
	UserRef string
}

// Outcomes of a second read (Outcome.Recheck).
const (
	RecheckAgreed    = "agreed"    // the first read was stale
	RecheckDisagreed = "disagreed" // still contradicts: the event was older than the provider's state, or the lag is longer
)

// ActorOf returns who the job's reconcile is recorded as: its own actor,
// else "sweep" for the sweep's jobs and "worker" for the rest.
func ActorOf(job Job) string {
	switch {
	case job.Actor != "":
		return job.Actor
	case job.Trigger == TriggerSweep:
		return "sweep"
	}
	return "worker"
}

// Outcome is what one reconcile did, as recorded in reconcile_log.
type Outcome struct {
	AccountID int64   `json:"account_id"`
	Result    Result  `json:"result"`
	Text      string  `json:"text"`
	Granted   int64   `json:"granted"` // allowance added by this reconcile
	Before    Account `json:"before"`
	After     Account `json:"after"`
	Events    int     `json:"events"` // stored events this reconcile answered
	// Unmapped names the prices that left the account frozen (ignored):
	// subscriptions keep their plan but none of their prices maps to a
	// plan. Counted (billsync_unmapped_prices) and alerted by the caller.
	Unmapped []string `json:"unmapped,omitempty"`
	// Recheck says whether the customer was read a second time because the
	// first read contradicted its newest event (a stale read), and whether
	// the second read then agreed: "" (not read again), RecheckAgreed or
	// RecheckDisagreed.
	Recheck string `json:"recheck,omitempty"`
	// Took is how long the reconcile took, from the clock read to the
	// commit (set by the worker; metrics).
	Took time.Duration `json:"-"`
}

// EventStatus is the status the outcome gives the events it answers.
func (o Outcome) EventStatus() EventStatus {
	switch o.Result {
	case ResultIgnored:
		return EventIgnored
	case ResultDead:
		return EventDead
	case ResultRetry:
		return EventPending
	}
	return EventApplied
}

// Store is what the worker needs from the database. The store executes;
// the domain decides: Apply hands the locked account to decide and writes
// what it returns. Every method that writes does so in one transaction,
// and every call is bounded by the store's own deadline, so a hung
// database can neither stall a worker forever nor hold a shutdown.
type Store interface {
	// Claim leases up to limit due jobs to worker (FOR UPDATE SKIP LOCKED)
	// for lease.
	Claim(ctx context.Context, worker string, limit int, lease time.Duration) ([]Job, error)
	// Extend renews worker's leases on jobs for lease from now (the
	// heartbeat of jobs in hand) and returns how many it still held.
	Extend(ctx context.Context, worker string, jobs []Job, lease time.Duration) (int, error)
	// Now is the database's clock: observed_at, received_at and
	// requested_at all come from it.
	Now(ctx context.Context) (time.Time, error)
	// Apply locks the job's queue row and the customer's account (creating
	// it), calls decide with the account, and writes what it returns: the
	// account (when the change writes), the grant's top-up, the log row,
	// the status of the customer's events received at or before
	// observedAt; then it completes the job, or makes it due again when a
	// request came in after observedAt.
	Apply(ctx context.Context, job Job, observedAt time.Time, decide func(cur Account) Change) (Outcome, error)
	// Ignore records a permanent failure (out.Result is ResultIgnored): the
	// customer's events end as ignored with out.Text, and the job
	// completes.
	Ignore(ctx context.Context, job Job, observedAt time.Time, out Outcome) (Outcome, error)
	// Retry records a failed attempt (out.Result is ResultRetry or
	// ResultDead): the job runs again after delay, or is dead, with its
	// pending events, until a sweep, a resync or a new webhook revives it.
	// observedAt may be zero when the failure came before the clock was
	// read.
	Retry(ctx context.Context, job Job, observedAt time.Time, out Outcome, delay time.Duration) (Outcome, error)
	// Release gives back leases on jobs the worker will not process.
	Release(ctx context.Context, worker string, jobs []Job) error
}
