package reconcile

import (
	"context"
	"time"
)

// Store is what the worker needs from the database. The store executes;
// the domain decides: Apply reads the locked account and its ledger, hands
// them to the decision once, and writes the whole Write it returns. Every method that writes does so in one transaction,
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
	// it), reads the account's ledger in its period and in d.Period, calls
	// d.Decide once with them, and writes the Write it returns: the account
	// (when it writes), the ledger rows, the log row, the status of the
	// customer's events received at or before observedAt, the app's change;
	// then it completes the job, or makes it due again when a request came
	// in after observedAt.
	Apply(ctx context.Context, job Job, observedAt time.Time, d Decider) (Outcome, error)
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
	// Resolve hands a job keyed by a related object (see Related) to the
	// object's customer, in one transaction: the object's pending and dead
	// events become the customer's, and the job's queue row becomes the
	// customer's, keeping its id and lease: next is the customer's job,
	// to reconcile at once (ok). When the customer has a queue row
	// already, the object's row is folded into it instead (made due now,
	// revived when dead, the newer request kept) and deleted, and ok is
	// false: that row's reconcile, due or under way, answers the events.
	Resolve(ctx context.Context, job Job, customerID string) (next Job, ok bool, err error)
	// Release gives back leases on jobs the worker will not process.
	Release(ctx context.Context, worker string, jobs []Job) error
}
