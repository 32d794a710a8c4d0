package reconcile

import "errors"

// Failure classes. Adapters wrap their errors with these so callers decide
// with errors.Is, and the HTTP layer maps them to status codes in one place.
var (
	// ErrBadSignature: the delivery is not provably from the provider
	// (forged, wrong secret, missing header, too old). Nothing is stored.
	ErrBadSignature = errors.New("bad signature")
	// ErrTooLarge: the body is over the intake limit. Nothing is stored.
	ErrTooLarge = errors.New("body too large")
	// ErrUnavailable: the database cannot be reached or did not commit.
	// The work was not stored; the caller must retry.
	ErrUnavailable = errors.New("store unavailable")
	// ErrNotFound: no such record.
	ErrNotFound = errors.New("not found")
	// ErrHeld: another worker is reconciling the customer right now. Its
	// reconcile answers the request; asking again in a moment is safe.
	ErrHeld = errors.New("being reconciled by another worker")
)
