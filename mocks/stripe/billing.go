package stripe

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Dunning is the account's setting for failed subscription payments (in
// Stripe's Dashboard: Billing → Revenue recovery → Retries). A renewal whose
// payment fails leaves the subscription past_due with the new period already
// open; the invoice is retried after each wait in Retries (on the fake
// clock); when the last retry fails the subscription becomes Final.
type Dunning struct {
	// Retries are the waits after each failed attempt. Default 3, 5 and 7
	// days: Stripe's classic custom schedule (Smart Retries chooses its own
	// times within a window; a fixed schedule keeps tests exact).
	Retries []time.Duration
	// Final is what happens after the last failed retry: "canceled"
	// (Stripe's default), "unpaid", or "past_due" (leave it).
	Final string
}

func (d Dunning) withDefaults() Dunning {
	if d.Retries == nil {
		d.Retries = []time.Duration{72 * time.Hour, 120 * time.Hour, 168 * time.Hour}
	}
	if d.Final == "" {
		d.Final = "canceled"
	}
	return d
}

// Validate reports a setting Stripe does not have.
func (d Dunning) Validate() error {
	switch d.Final {
	case "", "canceled", "unpaid", "past_due":
	default:
		return fmt.Errorf("final must be canceled, unpaid or past_due, got %q", d.Final)
	}
	for _, r := range d.Retries {
		if r <= 0 {
			return fmt.Errorf("retries must be positive durations, got %v", r)
		}
	}
	return nil
}

// SetDunning replaces the failed-payment setting for invoices that fail
// from now on.
func (s *Server) SetDunning(d Dunning) error {
	if err := d.Validate(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dunning = d.withDefaults()
	return nil
}

// incompleteExpiry is how long a subscription whose first payment failed
// stays incomplete before it expires, as on Stripe.
const incompleteExpiry = 23 * 3600

// tick does, in time order, everything on every subscription that fell due
// by now on the fake clock: paused collection resuming, payment retries,
// cancellations, trial reminders, renewals (with their invoices) and
// incomplete expiry, in the platform and in each connected account.
func (s *Server) tick(now time.Time) {
	s.eachSpace(func() {
		for _, sub := range s.subs.rows {
			for {
				at, do := s.nextAction(sub)
				if do == nil || at > now.Unix() {
					break
				}
				do(at)
			}
		}
		s.syncEntitlements(nil, now.Unix())
	})
}

// nextAction is the earliest thing due on sub and when; nil when nothing is
// scheduled. Ties go in the order listed.
func (s *Server) nextAction(sub *subscription) (int64, func(at int64)) {
	if sub.Status == "canceled" || sub.Status == "incomplete_expired" {
		return 0, nil
	}
	var when int64
	var action func(int64)
	consider := func(at int64, fn func(int64)) {
		if at != 0 && (action == nil || at < when) {
			when, action = at, fn
		}
	}
	consider(sub.PauseResumesAt, func(at int64) {
		before := sub.clone()
		sub.PauseBehavior, sub.PauseResumesAt = "", 0
		s.emitIfChanged(nil, at, before, sub)
	})
	for _, id := range sub.Open {
		if inv, ok := s.invoices.get(id); ok && inv.NextAttempt != 0 {
			consider(inv.NextAttempt, func(at int64) { s.attempt(nil, sub, inv, at) })
		}
	}
	if sub.CancelAt != 0 {
		consider(sub.CancelAt, func(at int64) { s.endSubscription(nil, sub, sub.CanceledAt, at, "cancellation_requested") })
	}
	if sub.Status == "trialing" && !sub.TrialWillEndSent {
		// Stripe's reminder three days before a trial ends (at once for a
		// shorter trial).
		consider(max(sub.TrialEnd-3*24*3600, sub.Created), func(at int64) {
			sub.TrialWillEndSent = true
			s.emit(nil, at, "customer.subscription.trial_will_end", sub.clone(), nil)
		})
	}
	switch sub.Status {
	case "active", "trialing", "past_due":
		consider(sub.periodEnd(), func(at int64) { s.renewAt(sub, at) })
	case "incomplete":
		// Expiry emits customer.subscription.updated; which event Stripe
		// sends here was not confirmed from its docs.
		consider(sub.Created+incompleteExpiry, func(at int64) {
			before := sub.clone()
			sub.Status = "incomplete_expired"
			for _, id := range sub.Open {
				if inv, ok := s.invoices.get(id); ok {
					inv.Status, inv.NextAttempt = "void", 0
				}
			}
			sub.Open = nil
			s.emitIfChanged(nil, at, before, sub)
		})
	}
	return when, action
}

// renewAt starts the next period of every item whose period ends at
// boundary (every item when a trial ends there), invoices those items and
// charges the invoice: customer.subscription.updated for the new period,
// then invoice.paid, or invoice.payment_failed and the move to past_due.
func (s *Server) renewAt(sub *subscription, boundary int64) {
	before := sub.clone()
	var rolled []subItem
	prevStart, prevEnd := sub.Items[0].PeriodStart, sub.Items[0].PeriodEnd
	for i := range sub.Items {
		it := &sub.Items[i]
		if it.PeriodEnd > boundary {
			continue
		}
		if rolled == nil {
			prevStart, prevEnd = it.PeriodStart, it.PeriodEnd
		}
		it.roll()
		rolled = append(rolled, *it)
	}
	if sub.Status == "trialing" && boundary >= sub.TrialEnd {
		sub.Status = "active"
	}
	cust, _ := s.customers.get(sub.Customer)
	inv := s.newInvoice(cust, sub, rolled, "subscription_cycle", boundary, prevStart, prevEnd)
	sub.LatestInvoice = inv.ID
	s.emitIfChanged(nil, boundary, before, sub)
	s.collect(nil, sub, inv, boundary)
}

// collect charges a new invoice of sub and reports whether it was paid. A
// $0 invoice is paid without a card. While collection is paused the invoice
// is handled per pause_collection[behavior] and not charged.
func (s *Server) collect(c *call, sub *subscription, inv *invoice, at int64) bool {
	if inv.Total > 0 && sub.PauseBehavior != "" {
		inv.Status = map[string]string{"keep_as_draft": "draft", "mark_uncollectible": "uncollectible", "void": "void"}[sub.PauseBehavior]
		return false
	}
	return s.attempt(c, sub, inv, at)
}

// attempt charges inv once at the given time. Paid: invoice.paid, and a
// subscription waiting on it (past_due, unpaid, incomplete) is active again.
// Declined: invoice.payment_failed, an active subscription goes past_due,
// the next retry is scheduled by the Dunning setting, and after the last one
// the subscription goes to Dunning.Final. A subscription's first invoice is
// not retried by the schedule (it waits for the customer, then expires).
func (s *Server) attempt(c *call, sub *subscription, inv *invoice, at int64) bool {
	inv.AttemptCount++
	inv.NextAttempt = 0
	cust, _ := s.customers.get(sub.Customer)
	if inv.Total == 0 || cust == nil || !cust.CardFails {
		inv.Status, inv.PaidAt = "paid", at
		sub.Open = slices.DeleteFunc(sub.Open, func(id string) bool { return id == inv.ID })
		s.emit(c, at, "invoice.paid", inv.clone(), nil)
		if inv.ID == sub.LatestInvoice && contains([]string{"past_due", "unpaid", "incomplete"}, sub.Status) {
			before := sub.clone()
			sub.Status = "active"
			s.emitIfChanged(c, at, before, sub)
		}
		return true
	}
	inv.Status = "open"
	if !slices.Contains(sub.Open, inv.ID) {
		sub.Open = append(sub.Open, inv.ID)
	}
	retries := s.dunning.Retries
	first := inv.BillingReason == "subscription_create"
	if !first && inv.AttemptCount <= len(retries) {
		inv.NextAttempt = at + int64(retries[inv.AttemptCount-1]/time.Second)
	}
	s.emit(c, at, "invoice.payment_failed", inv.clone(), nil)
	if first || sub.Status == "canceled" {
		return false
	}
	before := sub.clone()
	if sub.Status == "active" || sub.Status == "trialing" {
		sub.Status = "past_due"
	}
	if inv.NextAttempt == 0 && sub.Status == "past_due" {
		switch s.dunning.Final {
		case "canceled":
			s.emitIfChanged(c, at, before, sub)
			s.endSubscription(c, sub, at, at, "payment_failed")
			return false
		case "unpaid":
			sub.Status = "unpaid"
		}
	}
	s.emitIfChanged(c, at, before, sub)
	return false
}

// payInvoice is POST /v1/invoices/{id}/pay: charge an open invoice now. A
// declined card answers 402 card_error, as Stripe does, after recording the
// failed attempt.
func (s *Server) payInvoice(c *call) (obj, error) {
	inv, ok := s.invoices.get(c.r.PathValue("id"))
	if !ok {
		return nil, noSuch("invoice", c.r.PathValue("id"), "id")
	}
	if err := c.form.allow("off_session", "paid_out_of_band", "payment_method", "source", "forgive", "mandate"); err != nil {
		return nil, err
	}
	switch inv.Status {
	case "paid":
		return nil, badRequest("Invoice is already paid")
	case "void", "uncollectible", "draft":
		return nil, badRequest("You can only pay an invoice that is open; this one is " + strings.ReplaceAll(inv.Status, "_", " ") + ".")
	}
	sub, ok := s.subs.get(inv.Subscription)
	if !ok {
		return nil, badRequest("The invoice has no subscription")
	}
	if !s.attempt(c, sub, inv, c.now.Unix()) {
		return nil, &stripeError{status: 402, Type: "card_error", Code: "card_declined",
			Message: "Your card was declined."}
	}
	return renderInvoice(inv, c.version), nil
}
