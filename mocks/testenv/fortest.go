package testenv

import (
	"context"
	"sync"
	"time"

	stripeapi "github.com/stripe/stripe-go/v82"

	kindemock "github.com/billsync/billsync/mocks/kinde"
	"github.com/billsync/billsync/providers/kinde"
	"github.com/billsync/billsync/providers/stripe"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store/storetest/tb"
)

// TB is the part of testing.TB a Test fails (so this package does not
// import testing): a test's *testing.T, or a property check's *rapid.T, so
// that a failure inside a property is shrunk and replayable. It is package
// tb's: one TB for every test helper.
type TB = tb.TB

// CleanupTB is a TB that runs functions when the test ends.
type CleanupTB = tb.CleanupTB

// Test is an Env driven by a test: its helpers fail the test instead of
// returning an error, and the workers it builds record their outcomes.
type Test struct {
	*Env
	t TB

	mu       *sync.Mutex
	outcomes *[]reconcile.Outcome
}

// ForTest is New for tests: the clients get Fast settings, a failure to
// start fails t, and the Env is closed at t's cleanup.
func ForTest(t CleanupTB, provider string, opts Options) *Test {
	t.Helper()
	e, err := New(provider, Fast(opts))
	if err != nil {
		tb.Fatalf(t, "testenv: %v", err)
	}
	t.Cleanup(e.Close)
	return e.For(t)
}

// For returns e driven by t (for an Env whose lifetime the test manages
// itself, as a property check does for each of its runs).
func (e *Env) For(t TB) *Test {
	return &Test{Env: e, t: t, mu: &sync.Mutex{}, outcomes: &[]reconcile.Outcome{}}
}

// With returns the same Test failing t instead (a property check's
// *rapid.T); the two share the recorded outcomes.
func (h *Test) With(t TB) *Test {
	c := *h
	c.t = t
	return &c
}

func (h *Test) check(err error) {
	h.t.Helper()
	if err != nil {
		tb.Fatalf(h.t, "testenv: %v", err)
	}
}

func (h *Test) stripe() *StripeSide {
	h.t.Helper()
	if h.Stripe == nil {
		tb.Fatalf(h.t, "testenv: a Stripe helper on an Env that fakes %s", h.Provider)
	}
	return h.Stripe
}

func (h *Test) kinde() *KindeSide {
	h.t.Helper()
	if h.Kinde == nil {
		tb.Fatalf(h.t, "testenv: a Kinde helper on an Env that fakes %s", h.Provider)
	}
	return h.Kinde
}

// Worker is Env.Worker, and records every outcome it reports (after cfg's
// own OnOutcome) for TakeOutcomes.
func (h *Test) Worker(cfg reconcile.WorkerConfig) *reconcile.Worker {
	h.t.Helper()
	next := cfg.OnOutcome
	cfg.OnOutcome = func(j reconcile.Job, o reconcile.Outcome) {
		if next != nil {
			next(j, o)
		}
		h.mu.Lock()
		*h.outcomes = append(*h.outcomes, o)
		h.mu.Unlock()
	}
	w, err := h.Env.Worker(cfg)
	h.check(err)
	return w
}

// TakeOutcomes returns the outcomes the Test's workers reported since the
// last call, oldest first.
func (h *Test) TakeOutcomes() []reconcile.Outcome {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := *h.outcomes
	*h.outcomes = nil
	return out
}

// Drain runs one w.Drain and returns the number of customers it
// reconciled.
func (h *Test) Drain(w *reconcile.Worker) int {
	h.t.Helper()
	n, err := w.Drain(context.Background())
	h.check(err)
	return n
}

// DrainAll drains until no customer is queued while the fake's API fails
// at failRate (only while draining: the test's own calls must land),
// riding out jobs that a failed fetch put into (short) backoff.
func (h *Test) DrainAll(w *reconcile.Worker, failRate float64) {
	h.t.Helper()
	f := h.Faults()
	f.Error5xxRate = failRate
	h.SetFaults(f)
	defer func() {
		f.Error5xxRate = 0
		h.SetFaults(f)
	}()
	for range 1000 {
		h.Drain(w)
		depth, err := h.Store.QueueDepth(context.Background())
		h.check(err)
		if depth.Pending == 0 {
			return
		}
		time.Sleep(2 * time.Millisecond) // a backoff of a millisecond or two to ride out
	}
	tb.Fatalf(h.t, "testenv: the queue never drained")
}

// Delivered waits until the fake has sent every webhook it owes.
func (h *Test) Delivered() {
	h.t.Helper()
	h.check(h.WaitDelivered(context.Background()))
}

// Customer creates a customer at the fake Stripe (see StripeSide.Customer).
func (h *Test) Customer(userRef string) string {
	h.t.Helper()
	id, err := h.stripe().Customer(context.Background(), userRef)
	h.check(err)
	return id
}

// Subscribe subscribes customer to price at the fake Stripe.
func (h *Test) Subscribe(customer, price string) *stripeapi.Subscription {
	h.t.Helper()
	sub, err := h.stripe().Subscribe(context.Background(), customer, price)
	h.check(err)
	return sub
}

// ChangePrice moves sub's first item to price at the fake Stripe.
func (h *Test) ChangePrice(sub *stripeapi.Subscription, price string) {
	h.t.Helper()
	h.check(h.stripe().ChangePrice(context.Background(), sub, price))
}

// Cancel cancels sub at once at the fake Stripe.
func (h *Test) Cancel(sub *stripeapi.Subscription) {
	h.t.Helper()
	h.check(h.stripe().Cancel(context.Background(), sub))
}

// NewStripeClient returns billsync's Stripe client on the fake with cfg's
// settings, unset limits and waits at test speed (FastStripe).
func (h *Test) NewStripeClient(cfg stripe.Config) *stripe.Client {
	h.t.Helper()
	c, err := h.stripe().NewClient(FastStripe(cfg))
	h.check(err)
	return c
}

// NewKindeClient returns billsync's Kinde client on the fake with cfg's
// settings, unset limits and waits at test speed (FastKinde).
func (h *Test) NewKindeClient(cfg kinde.Config) *kinde.Client {
	h.t.Helper()
	c, err := h.kinde().NewClient(FastKinde(cfg))
	h.check(err)
	return c
}

// SetPlan makes plan the customer's one agreement at the fake Kinde (see
// KindeSide.SetPlan).
func (h *Test) SetPlan(customer, plan string) {
	h.t.Helper()
	h.kinde().SetPlan(customer, plan)
}

// Send sends a webhook of type typ about customer from the fake Kinde.
func (h *Test) Send(typ, customer string) kindemock.Sent {
	h.t.Helper()
	sent, err := h.kinde().Send(typ, customer)
	h.check(err)
	return sent
}

// Feature creates a Stripe feature with lookupKey and grants it to the
// subscribers of price (see StripeSide.Feature and Grant); it returns the
// product feature's id, for Revoke.
func (h *Test) Feature(price, lookupKey string) string {
	h.t.Helper()
	ctx := context.Background()
	id, err := h.stripe().Feature(ctx, lookupKey)
	h.check(err)
	pf, err := h.stripe().Grant(ctx, price, id)
	h.check(err)
	return pf
}

// Revoke detaches a product feature from the product of price.
func (h *Test) Revoke(price, productFeature string) {
	h.t.Helper()
	h.check(h.stripe().Revoke(context.Background(), price, productFeature))
}
