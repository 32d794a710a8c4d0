package stripe

import (
	"maps"
	"slices"
	"strconv"
)

// invoice is a subscription invoice. Its lines never change; its payment
// state does (see attempt in billing.go).
type invoice struct {
	record
	ID              string
	Number          string
	Customer        string // "" when it bills an Account (CustomerAccount)
	CustomerAccount string
	CustomerEmail   string
	Subscription    string
	SubMetadata     map[string]string
	BillingReason   string // subscription_create | subscription_cycle
	Currency        string
	Created         int64
	PeriodStart     int64
	PeriodEnd       int64
	Total           int64
	Lines           []invoiceLine
	Status          string // paid | open | draft | void | uncollectible
	AttemptCount    int
	NextAttempt     int64 // next automatic payment retry; 0 = none
	PaidAt          int64
}

func (inv *invoice) clone() *invoice {
	c := *inv
	c.Lines = slices.Clone(inv.Lines)
	c.SubMetadata = maps.Clone(inv.SubMetadata)
	return &c
}

// zero makes it a $0 invoice (a trial's).
func (inv *invoice) zero() {
	inv.Total = 0
	for i := range inv.Lines {
		inv.Lines[i].Amount = 0
	}
}

type invoiceLine struct {
	ID          string
	Amount      int64
	Price       price // a copy: the invoice shows the price as it was
	Quantity    int64
	SubItem     string
	PeriodStart int64
	PeriodEnd   int64
}

func (inv *invoice) id() string { return inv.ID }

// newInvoice makes the invoice of items' new periods, not yet charged. Like
// Stripe, invoice.period_start/end cover the period BEFORE the invoice (both
// equal the creation time for the first invoice) while each line carries the
// period being paid for: billing periods must be read from the subscription.
func (s *Server) newInvoice(cust *customer, sub *subscription, items []subItem, reason string, created, periodStart, periodEnd int64) *invoice {
	inv := &invoice{ID: newID("in"), Customer: sub.Customer, CustomerAccount: sub.CustomerAccount, Subscription: sub.ID, SubMetadata: maps.Clone(sub.Metadata),
		BillingReason: reason, Currency: "usd", Created: created, PeriodStart: periodStart, PeriodEnd: periodEnd,
		Status: "open"}
	if cust != nil {
		inv.Number = cust.nextInvoiceNumber()
		inv.CustomerEmail = cust.Email
	}
	for _, it := range items {
		amount := it.Price.UnitAmount * it.Quantity
		inv.Total += amount
		inv.Currency = it.Price.Currency
		inv.Lines = append(inv.Lines, invoiceLine{ID: newID("il"), Amount: amount, Price: *it.Price,
			Quantity: it.Quantity, SubItem: it.ID, PeriodStart: it.PeriodStart, PeriodEnd: it.PeriodEnd})
	}
	s.invoices.put(inv)
	return inv
}

func renderInvoice(inv *invoice, version string) obj {
	basil := isBasil(version)
	lines := make([]obj, 0, len(inv.Lines))
	for _, l := range inv.Lines {
		line := obj{
			"id": l.ID, "object": "line_item", "amount": l.Amount, "currency": l.Price.Currency,
			"description": strconv.FormatInt(l.Quantity, 10) + " × " + l.Price.Product, "discountable": true,
			"invoice": inv.ID, "livemode": false, "metadata": obj{},
			"period": obj{"start": l.PeriodStart, "end": l.PeriodEnd}, "quantity": l.Quantity,
			"discounts": []string{}, "discount_amounts": []obj{},
		}
		if basil {
			line["parent"] = obj{"type": "subscription_item_details", "invoice_item_details": nil,
				"subscription_item_details": obj{"invoice_item": nil, "proration": false, "proration_details": nil,
					"subscription": inv.Subscription, "subscription_item": l.SubItem}}
			line["pricing"] = obj{"type": "price_details", "unit_amount_decimal": strconv.FormatInt(l.Price.UnitAmount, 10),
				"price_details": obj{"price": l.Price.ID, "product": l.Price.Product}}
		} else {
			line["type"] = "subscription"
			line["price"] = renderPrice(&l.Price)
			line["plan"] = renderPlan(&l.Price)
			line["proration"] = false
			line["subscription"] = inv.Subscription
			line["subscription_item"] = l.SubItem
		}
		lines = append(lines, line)
	}
	paid := inv.Status == "paid"
	amountPaid := int64(0)
	if paid {
		amountPaid = inv.Total
	}
	o := obj{
		"id": inv.ID, "object": "invoice", "account_country": "US", "amount_due": inv.Total,
		"amount_paid": amountPaid, "amount_remaining": inv.Total - amountPaid, "attempt_count": inv.AttemptCount,
		"attempted": inv.AttemptCount > 0, "next_payment_attempt": nullable(inv.NextAttempt),
		"auto_advance": false, "billing_reason": inv.BillingReason, "collection_method": "charge_automatically",
		"created": inv.Created, "currency": inv.Currency, "customer": nullable(inv.Customer), "customer_account": nullable(inv.CustomerAccount),
		"customer_email": nullable(inv.CustomerEmail), "description": nil,
		"lines": obj{"object": "list", "data": lines, "has_more": false,
			"url": "/v1/invoices/" + inv.ID + "/lines"},
		"amount_overpaid": 0, "amount_shipping": 0, "starting_balance": 0, "ending_balance": 0,
		"post_payment_credit_notes_amount": 0, "pre_payment_credit_notes_amount": 0,
		"automatic_tax":     obj{"disabled_reason": nil, "enabled": false, "liability": nil, "provider": nil, "status": nil},
		"default_tax_rates": []string{}, "discounts": []string{}, "issuer": obj{"type": "self"},
		"payment_settings": obj{"default_mandate": nil, "payment_method_options": nil, "payment_method_types": nil},
		"livemode":         false, "metadata": obj{}, "number": nullable(inv.Number),
		"period_end": inv.PeriodEnd, "period_start": inv.PeriodStart, "status": inv.Status,
		"status_transitions": obj{"finalized_at": inv.Created, "marked_uncollectible_at": nil,
			"paid_at": nullable(inv.PaidAt), "voided_at": nil},
		"subtotal": inv.Total, "total": inv.Total,
	}
	// basil moved the subscription reference under parent and dropped "paid".
	if basil {
		o["parent"] = obj{"type": "subscription_details", "quote_details": nil,
			"subscription_details": obj{"metadata": metadataOf(inv.SubMetadata), "subscription": inv.Subscription}}
	} else {
		o["subscription"] = inv.Subscription
		o["paid"] = paid
	}
	return o
}

func (s *Server) getInvoice(c *call) (obj, error) {
	inv, ok := s.invoices.get(c.r.PathValue("id"))
	if !ok {
		return nil, noSuch("invoice", c.r.PathValue("id"), "id")
	}
	return renderInvoice(inv, c.version), nil
}

func (s *Server) listInvoices(c *call) (obj, error) {
	if err := c.form.allow(append(listParams, "customer", "subscription", "status")...); err != nil {
		return nil, err
	}
	cust, _ := c.form.str("customer")
	sub, _ := c.form.str("subscription")
	status, _ := c.form.str("status")
	rows := s.invoices.newestFirst(func(inv *invoice) bool {
		return (cust == "" || inv.Customer == cust) && (sub == "" || inv.Subscription == sub) &&
			(status == "" || status == inv.Status)
	})
	return listPage(c, rows, s.invoices.get, "invoice", func(inv *invoice) obj { return renderInvoice(inv, c.version) })
}
