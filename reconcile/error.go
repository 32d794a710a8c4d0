package reconcile

import (
	"context"
	"errors"
)

// Failure classes. Adapters wrap their errors with these so callers decide
// with errors.Is, and the HTTP layer maps them to status codes in one place.
var (
	// ErrBadSignature: the delivery is not provably from the provider
	// (forged, wrong secret, missing header, too old). Nothing is stored.
	ErrBadSignature = errors.New("bad signature")
	// ErrTooLarge: the body is over the intake limit. Nothing is stored.
	ErrTooLarge = errors.New("body too large")
	// ErrStoreUnavailable: the database cannot be reached or did not
	// commit. The work was not stored; the caller must retry.
	ErrStoreUnavailable = errors.New("store unavailable")
	// ErrProviderUnavailable: a provider's API could not be asked (down,
	// slow, refusing) where an answer was needed at once (Kinde's key set,
	// to verify a token that may be genuine). Nothing was stored; the
	// caller retries later (the intake answers 503: the provider delivers
	// again). A reconcile's failed fetch is not this: it is retried by
	// the queue, with the job's backoff.
	ErrProviderUnavailable = errors.New("provider unavailable")
	// ErrNotFound: no such record.
	ErrNotFound = errors.New("not found")
	// ErrHeld: another worker is reconciling the customer right now. Its
	// reconcile answers the request; asking again in a moment is safe.
	ErrHeld = errors.New("being reconciled by another worker")
	// ErrLeaseHeld: another replica holds the lease of a duty that runs
	// once across replicas (a provider's sweep or events feed, the prune).
	ErrLeaseHeld = errors.New("lease held by another replica")
	// ErrLeaseLost is the cause of a lease's context ending while its
	// holder still ran: a renewal found a successor, or none succeeded
	// before the lease ran out. The duty stops as if interrupted; its
	// successor carries on from what was recorded.
	ErrLeaseLost = errors.New("lease lost")
)

// whileHeld is ctx, ended also when held (a lease's context) ends, with
// its cause: a duty whose lease is lost stops as if interrupted.
func whileHeld(ctx, held context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(held, func() { cancel(context.Cause(held)) })
	return ctx, func() { stop(); cancel(nil) }
}
