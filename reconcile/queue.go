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
}

// Outcome is what one reconcile did, as recorded in reconcile_log.
type Outcome struct {
	AccountID int64
	Result    Result
	Text      string
	Granted   int64 // allowance added by this reconcile
	Before    Account
	After     Account
	Events    int // stored events this reconcile answered
}

// Store is what the worker needs from the database. Every method that
// writes does so in one transaction.
type Store interface {
	// Claim leases up to limit due jobs to worker (FOR UPDATE SKIP LOCKED).
	Claim(ctx context.Context, worker string, limit int, lease time.Duration) ([]Job, error)
	// Now is the database's clock: observed_at, received_at and
	// requested_at all come from it.
	Now(ctx context.Context) (time.Time, error)
	// Apply locks the account, applies snap as Decide says, writes the
	// grant, the log row, marks the customer's events received at or before
	// observedAt, and completes or re-dues the job.
	Apply(ctx context.Context, job Job, observedAt time.Time, snap Snapshot, plans *Plans) (Outcome, error)
	// Ignore records a permanent failure: the customer's events end as
	// ignored with reason, and the job completes.
	Ignore(ctx context.Context, job Job, observedAt time.Time, reason string) (Outcome, error)
	// Retry releases the job to run again after delay, or marks it dead
	// (and the events it holds) when dead is set.
	Retry(ctx context.Context, job Job, observedAt time.Time, cause error, delay time.Duration, dead bool) (Outcome, error)
	// Release gives back leases on jobs the worker will not process.
	Release(ctx context.Context, worker string, jobs []Job) error
}
