package stripemock

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

type subItem struct {
	ID       string
	Created  int64
	Price    *price
	Quantity int64
	Metadata map[string]string
}

type subscription struct {
	record
	ID                string
	Customer          string
	Status            string
	Items             []subItem
	Created           int64
	StartDate         int64
	Anchor            int64 // billing_cycle_anchor: periods are counted from here
	Cycle             int   // periods completed since Anchor
	PeriodStart       int64
	PeriodEnd         int64
	CancelAtPeriodEnd bool
	CancelAt          int64
	CanceledAt        int64
	EndedAt           int64
	CancelReason      string
	LatestInvoice     string
	Metadata          map[string]string
}

func (sub *subscription) id() string { return sub.ID }

// clone is a deep copy: events keep the object as it was when they happened.
func (sub *subscription) clone() *subscription {
	c := *sub
	c.Metadata = maps.Clone(sub.Metadata)
	c.Items = slices.Clone(sub.Items)
	for i := range c.Items {
		p := *c.Items[i].Price
		c.Items[i].Price = &p
		c.Items[i].Metadata = maps.Clone(c.Items[i].Metadata)
	}
	return &c
}

var subStatuses = []string{"active", "canceled", "incomplete", "incomplete_expired", "past_due", "paused", "trialing", "unpaid"}

func (s *Server) renderSubscription(sub *subscription, version string, ex expansion) obj {
	basil := isBasil(version)
	items := make([]obj, 0, len(sub.Items))
	currency := "usd"
	for _, it := range sub.Items {
		currency = it.Price.Currency
		item := obj{
			"id": it.ID, "object": "subscription_item", "billing_thresholds": nil, "created": it.Created,
			"discounts": []string{}, "metadata": metadataOf(it.Metadata), "plan": renderPlan(it.Price),
			"price": renderPrice(it.Price), "quantity": it.Quantity, "subscription": sub.ID, "tax_rates": []string{},
		}
		if basil {
			item["current_period_start"] = sub.PeriodStart
			item["current_period_end"] = sub.PeriodEnd
		}
		items = append(items, item)
	}
	reason := any(nil)
	if sub.CancelReason != "" {
		reason = sub.CancelReason
	}
	o := obj{
		"id": sub.ID, "object": "subscription", "application": nil, "application_fee_percent": nil,
		"billing_cycle_anchor": sub.Anchor, "cancel_at": nullable(sub.CancelAt),
		"cancel_at_period_end": sub.CancelAtPeriodEnd, "canceled_at": nullable(sub.CanceledAt),
		"cancellation_details": obj{"comment": nil, "feedback": nil, "reason": reason},
		"collection_method":    "charge_automatically", "created": sub.Created, "currency": currency,
		"customer": sub.Customer, "days_until_due": nil, "default_payment_method": nil, "description": nil,
		"discounts": []string{}, "ended_at": nullable(sub.EndedAt),
		"items": obj{"object": "list", "data": items, "has_more": false, "total_count": len(items),
			"url": "/v1/subscription_items?subscription=" + sub.ID},
		"latest_invoice": nullable(sub.LatestInvoice), "livemode": false, "metadata": metadataOf(sub.Metadata),
		"pause_collection": nil, "pending_update": nil, "schedule": nil, "start_date": sub.StartDate,
		"status": sub.Status, "test_clock": nil, "trial_end": nil, "trial_start": nil,
	}
	if !basil {
		o["current_period_start"] = sub.PeriodStart
		o["current_period_end"] = sub.PeriodEnd
	}
	if cust, ok := s.customers.get(sub.Customer); ok && ex.has("customer") {
		o["customer"] = renderCustomer(cust)
	}
	if inv, ok := s.invoices.get(sub.LatestInvoice); ok && ex.has("latest_invoice") {
		o["latest_invoice"] = renderInvoice(inv, version)
	}
	return o
}

// recurringPrice finds a price a subscription item may use.
func (s *Server) recurringPrice(id, param string) (*price, error) {
	p, ok := s.prices.get(id)
	if !ok {
		return nil, noSuch("price", id, param)
	}
	if p.Interval == "" {
		return nil, invalidParam(param, "The price specified is set to `type=one_time` but this field only accepts prices with `type=recurring`.")
	}
	return p, nil
}

func quantity(entry map[string]string, param string) (int64, bool, error) {
	v, ok := entry["quantity"]
	if !ok {
		return 1, false, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, false, invalidParam(param+"[quantity]", "Invalid integer: "+v)
	}
	return n, true, nil
}

func (s *Server) createSubscription(c *call) (obj, error) {
	f := c.form
	if err := f.allow("customer", "items", "metadata", "payment_behavior", "proration_behavior", "off_session",
		"default_payment_method", "description"); err != nil {
		return nil, err
	}
	custID, err := f.require("customer")
	if err != nil {
		return nil, err
	}
	cust, ok := s.customers.get(custID)
	if !ok {
		return nil, noSuch("customer", custID, "customer")
	}
	entries, err := f.objects("items")
	if err != nil {
		return nil, err
	}
	if len(entries) == 0 {
		return nil, missingParam("items")
	}
	now := c.now.Unix()
	sub := &subscription{ID: newID("sub"), Customer: custID, Status: "active", Created: now, StartDate: now,
		Anchor: now, PeriodStart: now, Metadata: f.hash("metadata")}
	for i, e := range entries {
		param := fmt.Sprintf("items[%d]", i)
		if e["price"] == "" {
			return nil, missingParam(param + "[price]")
		}
		p, err := s.recurringPrice(e["price"], param+"[price]")
		if err != nil {
			return nil, err
		}
		q, _, err := quantity(e, param)
		if err != nil {
			return nil, err
		}
		sub.Items = append(sub.Items, subItem{ID: newID("si"), Created: now, Price: p, Quantity: q, Metadata: map[string]string{}})
	}
	sub.PeriodEnd = sub.Items[0].Price.periodEnd(sub.Anchor, 1)
	// The first invoice is paid at once (the fake has no failing cards).
	inv := s.newInvoice(cust, sub, "subscription_create", now, now, now)
	sub.LatestInvoice = inv.ID
	s.subs.put(sub)
	s.emit(c, now, "customer.subscription.created", sub.clone(), nil)
	s.emit(c, now, "invoice.paid", inv, nil)
	return s.renderSubscription(sub, c.version, c.expand), nil
}

func (s *Server) getSubscription(c *call) (obj, error) {
	sub, ok := s.subs.get(c.r.PathValue("id"))
	if !ok {
		return nil, noSuch("subscription", c.r.PathValue("id"), "id")
	}
	return s.renderSubscription(sub, c.version, c.expand), nil
}

func (s *Server) updateSubscription(c *call) (obj, error) {
	sub, ok := s.subs.get(c.r.PathValue("id"))
	if !ok {
		return nil, noSuch("subscription", c.r.PathValue("id"), "id")
	}
	f := c.form
	if err := f.allow("items", "cancel_at_period_end", "metadata", "proration_behavior", "payment_behavior",
		"cancellation_details"); err != nil {
		return nil, err
	}
	if sub.Status == "canceled" && (f.has("items") || f.has("cancel_at_period_end")) {
		return nil, badRequest("A canceled subscription can only update its cancellation_details and metadata.")
	}
	before := sub.clone()
	if f.has("items") {
		items, err := s.changeItems(sub.Items, c)
		if err != nil {
			return nil, err
		}
		sub.Items = items
	}
	if v, ok, err := f.boolean("cancel_at_period_end"); err != nil {
		return nil, err
	} else if ok && v != sub.CancelAtPeriodEnd {
		sub.CancelAtPeriodEnd = v
		sub.CancelAt, sub.CanceledAt, sub.CancelReason = 0, 0, ""
		if v {
			sub.CancelAt, sub.CanceledAt, sub.CancelReason = sub.PeriodEnd, c.now.Unix(), "cancellation_requested"
		}
	}
	if v, ok := f.str("metadata"); ok && v == "" {
		sub.Metadata = map[string]string{} // metadata="" unsets every key
	}
	sub.Metadata = mergeMetadata(sub.Metadata, f.hash("metadata"))
	s.emitIfChanged(c, c.now.Unix(), before, sub)
	return s.renderSubscription(sub, c.version, c.expand), nil
}

// changeItems applies items[i][…] of an update. An entry with an id changes
// (price, quantity) or deletes (deleted=true) that item. Entries without an id
// are new items that REPLACE every item the request did not name by id — a
// simplification of Stripe, which would add them next to the old ones.
func (s *Server) changeItems(current []subItem, c *call) ([]subItem, error) {
	entries, err := c.form.objects("items")
	if err != nil {
		return nil, err
	}
	items := slices.Clone(current)
	var added []subItem
	named := map[string]bool{}
	for i, e := range entries {
		param := fmt.Sprintf("items[%d]", i)
		var p *price
		if e["price"] != "" {
			if p, err = s.recurringPrice(e["price"], param+"[price]"); err != nil {
				return nil, err
			}
		}
		q, qSet, err := quantity(e, param)
		if err != nil {
			return nil, err
		}
		id := e["id"]
		if id == "" {
			if p == nil {
				return nil, missingParam(param + "[price]")
			}
			added = append(added, subItem{ID: newID("si"), Created: c.now.Unix(), Price: p, Quantity: q, Metadata: map[string]string{}})
			continue
		}
		at := slices.IndexFunc(items, func(it subItem) bool { return it.ID == id })
		if at < 0 {
			return nil, noSuch("subscription item", id, param+"[id]")
		}
		named[id] = true
		switch {
		case e["deleted"] == "true":
			items = slices.Delete(items, at, at+1)
		default:
			if p != nil {
				items[at].Price = p
			}
			if qSet {
				items[at].Quantity = q
			}
		}
	}
	if len(added) > 0 {
		items = slices.DeleteFunc(items, func(it subItem) bool { return !named[it.ID] })
		items = append(items, added...)
	}
	if len(items) == 0 {
		return nil, badRequest("A subscription must have at least one active item.")
	}
	return items, nil
}

func (s *Server) cancelSubscription(c *call) (obj, error) {
	sub, ok := s.subs.get(c.r.PathValue("id"))
	if !ok {
		return nil, noSuch("subscription", c.r.PathValue("id"), "id")
	}
	if err := c.form.allow("invoice_now", "prorate", "cancellation_details"); err != nil {
		return nil, err
	}
	if sub.Status == "canceled" {
		return nil, badRequest("This subscription has already been canceled.")
	}
	s.endSubscription(c, sub, c.now.Unix(), c.now.Unix())
	return s.renderSubscription(sub, c.version, c.expand), nil
}

// endSubscription cancels sub at endedAt and emits customer.subscription.deleted.
func (s *Server) endSubscription(c *call, sub *subscription, canceledAt, endedAt int64) {
	sub.Status = "canceled"
	sub.EndedAt = endedAt
	if sub.CanceledAt == 0 {
		sub.CanceledAt = canceledAt
	}
	if sub.CancelReason == "" {
		sub.CancelReason = "cancellation_requested"
	}
	s.emit(c, endedAt, "customer.subscription.deleted", sub.clone(), nil)
}

func (s *Server) listSubscriptions(c *call) (obj, error) {
	f := c.form
	if err := f.allow(append(listParams, "customer", "status", "price")...); err != nil {
		return nil, err
	}
	status, _ := f.str("status")
	if status != "" && status != "all" && status != "ended" && !contains(subStatuses, status) {
		return nil, invalidParam("status", "Invalid status: must be one of all, ended, "+strings.Join(subStatuses, ", "))
	}
	customerID, _ := f.str("customer")
	priceID, _ := f.str("price")
	rows := s.subs.newestFirst(func(sub *subscription) bool {
		return statusMatches(status, sub.Status) && (customerID == "" || sub.Customer == customerID) &&
			(priceID == "" || slices.ContainsFunc(sub.Items, func(it subItem) bool { return it.Price.ID == priceID }))
	})
	ex := c.expand.inList()
	return listPage(c, rows, s.subs.get, "subscription", func(sub *subscription) obj {
		return s.renderSubscription(sub, c.version, ex)
	})
}

// statusMatches is the status filter of GET /v1/subscriptions: without one,
// canceled subscriptions are left out.
func statusMatches(filter, status string) bool {
	ended := status == "canceled" || status == "incomplete_expired"
	switch filter {
	case "":
		return !ended
	case "all":
		return true
	case "ended":
		return ended
	}
	return status == filter
}

// renew starts the next period of every active subscription whose period
// ended by now, as many times as needed, emitting for each renewal
// customer.subscription.updated and invoice.paid (a subscription_cycle
// invoice). A subscription set to cancel at period end is canceled instead.
func (s *Server) renew(now time.Time) {
	for _, sub := range s.subs.rows {
		for sub.Status == "active" && sub.PeriodEnd <= now.Unix() {
			boundary := sub.PeriodEnd
			if sub.CancelAtPeriodEnd {
				s.endSubscription(nil, sub, sub.CanceledAt, boundary)
				break
			}
			before := sub.clone()
			sub.Cycle++
			sub.PeriodStart = boundary
			sub.PeriodEnd = sub.Items[0].Price.periodEnd(sub.Anchor, sub.Cycle+1)
			cust, _ := s.customers.get(sub.Customer)
			inv := s.newInvoice(cust, sub, "subscription_cycle", boundary, before.PeriodStart, before.PeriodEnd)
			sub.LatestInvoice = inv.ID
			s.emitIfChanged(nil, boundary, before, sub)
			s.emit(nil, boundary, "invoice.paid", inv, nil)
		}
	}
}

// SetSubscriptionStatus forces a subscription's status (say past_due or
// unpaid, which the fake never reaches by itself) and emits the event Stripe
// would: customer.subscription.deleted for canceled, else .updated.
func (s *Server) SetSubscriptionStatus(id, status string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	sub, ok := s.subs.get(id)
	if !ok {
		return noSuch("subscription", id, "id")
	}
	if !contains(subStatuses, status) {
		return invalidParam("status", "Invalid status: must be one of "+strings.Join(subStatuses, ", "))
	}
	now := s.clock.Now().Unix()
	if status == "canceled" {
		if sub.Status != "canceled" {
			s.endSubscription(nil, sub, now, now)
		}
		return nil
	}
	before := sub.clone()
	sub.Status = status
	s.emitIfChanged(nil, now, before, sub)
	return nil
}
