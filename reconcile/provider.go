package reconcile

import (
	"context"
	"errors"
	"fmt"
)

// The providers billsync knows. The plans file maps each one's price
// references (Stripe prices, Kinde plan codes) to plans, so their names are
// the domain's; each adapter names itself with its constant.
const (
	ProviderStripe = "stripe"
	ProviderKinde  = "kinde"
)

// Provider reads a customer's current state from a billing provider.
type Provider interface {
	Name() string
	// Fetch returns the customer's snapshot now. A customer the provider does
	// not know is ErrCustomerUnknown; data billsync cannot read is a
	// *PermanentError; anything else is transient and retried.
	Fetch(ctx context.Context, customerID string) (Snapshot, error)
	// CustomerOf returns the customer of an object one of the provider's
	// events names instead of its customer (see Related), "" when it names
	// none. An object the provider does not know, or cannot say the
	// customer of, is a *PermanentError; anything else is transient and
	// retried. A provider whose events always name their customer answers
	// every object with a *PermanentError.
	CustomerOf(ctx context.Context, obj Related) (string, error)
	// Budget returns the requests per second this process may send the
	// provider and its recent latency: the worker keeps as many fetches
	// in flight as they call for (Budget.InFlight). A zero Rate is
	// unknown: the worker then keeps its bound in flight.
	Budget() Budget
}

// Lister is the optional bulk read the nightly sweep uses where a provider
// allows it: every customer's snapshot, a page at a time.
type Lister interface {
	// ListPage reads the page of the listing at cursor ("" its start):
	// the snapshots of its customers, the cursor after it, and whether a
	// page follows. next is a place to resume even when more is false
	// (resuming there lists nothing); it holds no newline.
	ListPage(ctx context.Context, cursor string) (snaps []Snapshot, next string, more bool, err error)
}

// Found is one customer a Finder found: the provider's id for it and the
// app's reference to the user or organisation it bills ("" when the
// provider names none), without its state.
type Found struct {
	CustomerID string
	UserRef    string
}

// Finder is the optional listing of a provider whose customers' state
// cannot be read in bulk but whose customers can be named (Kinde lists its
// users and organisations with their billing customer): a sweep or import
// queues each customer found for the worker, whose fetch reads its state,
// so a customer billsync never heard of is found too.
type Finder interface {
	// FindPage reads the page of the listing at cursor ("" its start): the
	// customers it names (a customer may appear on more than one page),
	// the cursor after it, and whether a page follows. next is a place to
	// resume even when more is false (resuming there finds nothing); it
	// holds no newline.
	FindPage(ctx context.Context, cursor string) (found []Found, next string, more bool, err error)
}

// Splitter is a Lister whose listing divides into parts listed at the same
// time: one request at a time, at a provider's latency, uses a small share
// of the sweep's rate budget.
type Splitter interface {
	// Split divides what remains of a listing after a page (next, with
	// more true) into the part the caller keeps listing and a part given
	// to another lister; between them they list each remaining customer
	// once. given is "" when the rest is not divided; kept is then where
	// the caller goes on (next, or next with what Split learnt). It may
	// ask the provider (a few small requests).
	Split(ctx context.Context, next string) (kept, given string, err error)
	// ListBudget is the listing's share of the provider's rate and the
	// latency of its list requests: an adapting sweep lists as many parts
	// at once as they call for.
	ListBudget() Budget
}

// Progresser is a Lister that can estimate how far a run of its listing
// has come from the cursors of the parts it has yet to end (as
// SweepRun.Cursor holds them, one a line): the share of the listing
// already listed, 0..1, or -1 when it cannot tell. It is an estimate,
// for progress and ETA only (Stripe's measures the share of the
// customers' creation times covered, which is the share of customers
// only where sign-ups were even over time); nothing is decided by it.
type Progresser interface {
	Progress(cursors []string) float64
}

// ErrCustomerUnknown means the provider has no such customer: permanent.
var ErrCustomerUnknown = errors.New("customer unknown to the provider")

// PermanentError is a failure that retrying cannot fix (a required field
// absent, a malformed object). The events it answers end as ignored with
// Reason.
type PermanentError struct {
	Reason string
}

func (e *PermanentError) Error() string { return e.Reason }

// Permanent returns a *PermanentError with a formatted reason.
func Permanent(format string, args ...any) error {
	return &PermanentError{Reason: fmt.Sprintf(format, args...)}
}

// IsPermanent reports whether err cannot be fixed by retrying.
func IsPermanent(err error) bool {
	var p *PermanentError
	return errors.As(err, &p) || errors.Is(err, ErrCustomerUnknown)
}
