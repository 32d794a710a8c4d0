package stripe

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// subItem has its own billing period: since flexible billing (GA in
// 2025-07-30.basil) one subscription may mix intervals, a yearly add-on next
// to a monthly plan, each item renewing on its own schedule.
type subItem struct {
	ID          string
	Created     int64
	Price       *price
	Quantity    int64
	Metadata    map[string]string
	Anchor      int64 // the item's periods are counted from here
	Cycle       int   // periods completed since Anchor
	PeriodStart int64
	PeriodEnd   int64
}

// startPeriod gives it a fresh period from at, anchored there.
func (it *subItem) startPeriod(at int64) {
	it.Anchor, it.Cycle, it.PeriodStart = at, 0, at
	it.PeriodEnd = it.Price.periodEnd(at, 1)
}

// roll moves it to its next period, which starts at its old end.
func (it *subItem) roll() {
	it.Cycle++
	it.PeriodStart = it.PeriodEnd
	it.PeriodEnd = it.Price.periodEnd(it.Anchor, it.Cycle+1)
}

type subscription struct {
	record
	ID       string
	Customer string // "" when it bills an Account (CustomerAccount)
	// CustomerAccount is the Account it bills as a customer (Accounts v2,
	// customer_account: a connected account of the platform), in place of
	// a Customer.
	CustomerAccount   string
	Status            string
	Items             []subItem
	Created           int64
	StartDate         int64
	Anchor            int64  // billing_cycle_anchor
	BillingMode       string // classic | flexible
	CancelAtPeriodEnd bool
	CancelAt          int64
	CanceledAt        int64
	EndedAt           int64
	CancelReason      string
	TrialStart        int64
	TrialEnd          int64
	TrialWillEndSent  bool
	PauseBehavior     string // pause_collection[behavior]; "" = collecting
	PauseResumesAt    int64
	LatestInvoice     string
	Open              []string // ids of its open (unpaid) invoices
	Metadata          map[string]string
}

func (sub *subscription) id() string { return sub.ID }

// payer is whom it bills: its customer's id, or the Account's it bills as
// a customer (subsByCustomer's key: no customer id is an acct_ id).
func (sub *subscription) payer() string {
	if sub.CustomerAccount != "" {
		return sub.CustomerAccount
	}
	return sub.Customer
}

// clone is a deep copy: events keep the object as it was when they happened.
func (sub *subscription) clone() *subscription {
	c := *sub
	c.Metadata = maps.Clone(sub.Metadata)
	c.Open = slices.Clone(sub.Open)
	c.Items = slices.Clone(sub.Items)
	for i := range c.Items {
		p := *c.Items[i].Price
		c.Items[i].Price = &p
		c.Items[i].Metadata = maps.Clone(c.Items[i].Metadata)
	}
	return &c
}

// periodEnd is the subscription's next renewal: the earliest item period end.
func (sub *subscription) periodEnd() int64 {
	end := sub.Items[0].PeriodEnd
	for _, it := range sub.Items[1:] {
		end = min(end, it.PeriodEnd)
	}
	return end
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
			item["current_period_start"] = it.PeriodStart
			item["current_period_end"] = it.PeriodEnd
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
		"customer": nullable(sub.Customer), "customer_account": nullable(sub.CustomerAccount), "days_until_due": nil, "default_payment_method": nil, "description": nil,
		"discounts": []string{}, "ended_at": nullable(sub.EndedAt),
		"items": obj{"object": "list", "data": items, "has_more": false,
			"url": "/v1/subscription_items?subscription=" + sub.ID},
		"automatic_tax":    obj{"disabled_reason": nil, "enabled": false, "liability": nil},
		"billing_mode":     obj{"type": sub.BillingMode},
		"invoice_settings": obj{"account_tax_ids": nil, "issuer": obj{"type": "self"}},
		"latest_invoice":   nullable(sub.LatestInvoice), "livemode": false, "metadata": metadataOf(sub.Metadata),
		"pause_collection": nil, "pending_update": nil, "schedule": nil, "start_date": sub.StartDate,
		"status": sub.Status, "test_clock": nil, "trial_end": nullable(sub.TrialEnd), "trial_start": nullable(sub.TrialStart),
	}
	if sub.PauseBehavior != "" {
		o["pause_collection"] = obj{"behavior": sub.PauseBehavior, "resumes_at": nullable(sub.PauseResumesAt)}
	}
	if !basil {
		// The old shape has one period: the first item's (mixed intervals
		// need the items, basil's shape).
		o["current_period_start"] = sub.Items[0].PeriodStart
		o["current_period_end"] = sub.Items[0].PeriodEnd
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
	if err := f.allow("customer", "customer_account", "items", "metadata", "payment_behavior", "proration_behavior", "off_session",
		"default_payment_method", "description", "trial_end", "trial_period_days", "cancel_at",
		"cancel_at_period_end", "billing_mode"); err != nil {
		return nil, err
	}
	custID, acctID, cust, err := s.billed(f)
	if err != nil {
		return nil, err
	}
	entries, err := f.objects("items")
	if err != nil {
		return nil, err
	}
	if len(entries) == 0 {
		return nil, missingParam("items")
	}
	now := c.now.Unix()
	trialEnd, err := trialEndParam(f, now)
	if err != nil {
		return nil, err
	}
	sub := &subscription{ID: newID("sub"), Customer: custID, CustomerAccount: acctID, Status: "active", Created: now, StartDate: now,
		Anchor: now, Metadata: f.hash("metadata")}
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
		it := subItem{ID: newID("si"), Created: now, Price: p, Quantity: q, Metadata: map[string]string{}}
		it.startPeriod(now)
		sub.Items = append(sub.Items, it)
	}
	// Mixed intervals need flexible billing on Stripe; the fake picks it
	// when the items mix intervals and no mode was asked for.
	sub.BillingMode = f.hash("billing_mode")["type"]
	switch sub.BillingMode {
	case "":
		sub.BillingMode = "classic"
		for _, it := range sub.Items[1:] {
			if !sameInterval(it.Price, sub.Items[0].Price) {
				sub.BillingMode = "flexible"
			}
		}
	case "classic", "flexible":
	default:
		return nil, invalidParam("billing_mode[type]", "Invalid billing_mode[type]: must be one of classic or flexible")
	}
	if trialEnd > now {
		// A trial is one period up to trial_end; the items' billing starts there.
		sub.Status, sub.TrialStart, sub.TrialEnd, sub.Anchor = "trialing", now, trialEnd, trialEnd
		for i := range sub.Items {
			sub.Items[i].Anchor, sub.Items[i].Cycle, sub.Items[i].PeriodEnd = trialEnd, -1, trialEnd
		}
	}
	if err := s.setCancellation(c, sub); err != nil {
		return nil, err
	}
	inv := s.newInvoice(cust, sub, sub.Items, "subscription_create", now, now, now)
	if sub.Status == "trialing" {
		inv.zero() // the trial's invoice is for $0
	}
	sub.LatestInvoice = inv.ID
	s.changed(sub.ID, nil)
	s.subs.put(sub)
	s.subsByCustomer[sub.payer()] = append(s.subsByCustomer[sub.payer()], sub)
	s.emit(c, now, "customer.subscription.created", sub.clone(), nil)
	// The first invoice is charged at once; if the card declines, the
	// subscription is incomplete (payment_behavior=allow_incomplete, the
	// default) until the invoice is paid, and expires after 23 hours.
	if !s.collect(c, sub, inv, now) && sub.Status == "active" {
		before := sub.clone()
		sub.Status = "incomplete"
		s.emitIfChanged(c, now, before, sub)
	}
	return s.renderSubscription(sub, c.version, c.expand), nil
}

// billed reads whom a new subscription bills: customer (a live customer)
// or, as Accounts v2 allows, customer_account (an account connected to
// the platform, billed as its customer; only the platform bills one).
// One of the two, not both. cust is nil for an account.
func (s *Server) billed(f form) (custID, acctID string, cust *customer, err error) {
	custID, _ = f.str("customer")
	acctID, _ = f.str("customer_account")
	switch {
	case custID != "" && acctID != "":
		return "", "", nil, badRequest("You may only specify one of these parameters: customer, customer_account.")
	case acctID != "":
		if _, ok := s.accounts.get(acctID); !ok || s.acct != nil {
			return "", "", nil, noSuch("account", acctID, "customer_account")
		}
		return "", acctID, nil, nil
	}
	if custID, err = f.require("customer"); err != nil {
		return "", "", nil, err
	}
	cust, err = s.liveCustomer(custID, "customer")
	return custID, "", cust, err
}

// trialEndParam reads trial_end (a timestamp or "now") or trial_period_days.
func trialEndParam(f form, now int64) (int64, error) {
	if v, ok := f.str("trial_end"); ok {
		if v == "now" {
			return 0, nil
		}
		t, err := strconv.ParseInt(v, 10, 64)
		if err != nil || t <= now {
			return 0, invalidParam("trial_end", "Invalid timestamp: must be an integer Unix timestamp in the future.")
		}
		return t, nil
	}
	days, ok, err := f.integer("trial_period_days")
	if err != nil || !ok {
		return 0, err
	}
	if days < 0 || days > 730 {
		return 0, invalidParam("trial_period_days", "trial_period_days must be between 0 and 730.")
	}
	if days == 0 {
		return 0, nil
	}
	return now + days*24*3600, nil
}

// setCancellation applies cancel_at_period_end and cancel_at (a timestamp,
// min_period_end, max_period_end, or "" to clear). Stripe keeps the two
// exclusive: setting one clears the other.
func (s *Server) setCancellation(c *call, sub *subscription) error {
	f := c.form
	atPeriodEnd, setEnd, err := f.boolean("cancel_at_period_end")
	if err != nil {
		return err
	}
	raw, setAt := f.str("cancel_at")
	if setEnd && setAt && atPeriodEnd && raw != "" {
		return badRequest("You may only specify one of these parameters: cancel_at, cancel_at_period_end.")
	}
	request := func(at int64, periodEnd bool) {
		sub.CancelAt, sub.CancelAtPeriodEnd = at, periodEnd
		sub.CanceledAt, sub.CancelReason = 0, ""
		if at != 0 {
			sub.CanceledAt, sub.CancelReason = c.now.Unix(), "cancellation_requested"
		}
	}
	if setEnd && atPeriodEnd != sub.CancelAtPeriodEnd {
		end := int64(0)
		if atPeriodEnd {
			end = sub.periodEnd()
		}
		request(end, atPeriodEnd)
	}
	if !setAt {
		return nil
	}
	var at int64
	switch raw {
	case "":
	case "min_period_end":
		at = sub.periodEnd()
	case "max_period_end":
		for _, it := range sub.Items {
			at = max(at, it.PeriodEnd)
		}
	default:
		if at, err = strconv.ParseInt(raw, 10, 64); err != nil || at <= c.now.Unix() {
			return invalidParam("cancel_at", "cancel_at must be a Unix timestamp in the future, min_period_end or max_period_end.")
		}
	}
	request(at, false)
	return nil
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
	if err := f.allow("items", "cancel_at_period_end", "cancel_at", "metadata", "proration_behavior",
		"payment_behavior", "cancellation_details", "pause_collection"); err != nil {
		return nil, err
	}
	if sub.Status == "canceled" && (f.has("items") || f.has("cancel_at_period_end") || f.has("cancel_at") || f.has("pause_collection")) {
		return nil, badRequest("A canceled subscription can only update its cancellation_details and metadata.")
	}
	before := sub.clone()
	var restarted []subItem
	if f.has("items") {
		items, fresh, err := s.changeItems(sub.Items, c)
		if err != nil {
			return nil, err
		}
		sub.Items, restarted = items, fresh
	}
	if err := s.setCancellation(c, sub); err != nil {
		*sub = *before
		return nil, err
	}
	if err := setPause(f, sub); err != nil {
		*sub = *before
		return nil, err
	}
	if v, ok := f.str("metadata"); ok && v == "" {
		sub.Metadata = map[string]string{} // metadata="" unsets every key
	}
	sub.Metadata = mergeMetadata(sub.Metadata, f.hash("metadata"))
	var inv *invoice
	if len(restarted) > 0 {
		// An item moved to another interval starts a new period now and is
		// invoiced at once, as when Stripe resets the billing cycle.
		cust, _ := s.customers.get(sub.Customer)
		inv = s.newInvoice(cust, sub, restarted, "subscription_update", c.now.Unix(), c.now.Unix(), c.now.Unix())
		sub.LatestInvoice = inv.ID
	}
	s.emitIfChanged(c, c.now.Unix(), before, sub)
	if inv != nil {
		s.collect(c, sub, inv, c.now.Unix())
	}
	return s.renderSubscription(sub, c.version, c.expand), nil
}

// setPause applies pause_collection[behavior] (keep_as_draft,
// mark_uncollectible, void) and pause_collection[resumes_at];
// pause_collection="" resumes collection. The status does not change.
func setPause(f form, sub *subscription) error {
	if v, ok := f.str("pause_collection"); ok && v == "" {
		sub.PauseBehavior, sub.PauseResumesAt = "", 0
		return nil
	}
	if !f.has("pause_collection") {
		return nil
	}
	p := f.hash("pause_collection")
	switch p["behavior"] {
	case "keep_as_draft", "mark_uncollectible", "void":
	case "":
		return missingParam("pause_collection[behavior]")
	default:
		return invalidParam("pause_collection[behavior]", "Invalid pause_collection[behavior]: must be one of keep_as_draft, mark_uncollectible, or void")
	}
	sub.PauseBehavior, sub.PauseResumesAt = p["behavior"], 0
	if v := p["resumes_at"]; v != "" {
		at, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return invalidParam("pause_collection[resumes_at]", "Invalid integer: "+v)
		}
		sub.PauseResumesAt = at
	}
	return nil
}

// changeItems applies items[i][…] of an update. An entry with an id changes
// (price, quantity) or deletes (deleted=true) that item; an entry without an
// id adds an item, as on Stripe. A new item shares the period of an item on
// the same interval, else starts its own; an item whose price moves to
// another interval starts a new period. Those are returned to be invoiced.
func (s *Server) changeItems(current []subItem, c *call) (items, restarted []subItem, err error) {
	entries, err := c.form.objects("items")
	if err != nil {
		return nil, nil, err
	}
	now := c.now.Unix()
	items = slices.Clone(current)
	for i, e := range entries {
		param := fmt.Sprintf("items[%d]", i)
		var p *price
		if e["price"] != "" {
			if p, err = s.recurringPrice(e["price"], param+"[price]"); err != nil {
				return nil, nil, err
			}
		}
		q, qSet, err := quantity(e, param)
		if err != nil {
			return nil, nil, err
		}
		id := e["id"]
		if id == "" {
			if p == nil {
				return nil, nil, missingParam(param + "[price]")
			}
			it := subItem{ID: newID("si"), Created: now, Price: p, Quantity: q, Metadata: map[string]string{}}
			if at := slices.IndexFunc(items, func(o subItem) bool { return sameInterval(o.Price, p) }); at >= 0 {
				it.Anchor, it.Cycle, it.PeriodStart, it.PeriodEnd = items[at].Anchor, items[at].Cycle, items[at].PeriodStart, items[at].PeriodEnd
			} else {
				it.startPeriod(now)
				restarted = append(restarted, it)
			}
			items = append(items, it)
			continue
		}
		at := slices.IndexFunc(items, func(it subItem) bool { return it.ID == id })
		if at < 0 {
			return nil, nil, noSuch("subscription item", id, param+"[id]")
		}
		if e["deleted"] == "true" {
			items = slices.Delete(items, at, at+1)
			continue
		}
		if p != nil {
			moved := !sameInterval(items[at].Price, p)
			items[at].Price = p
			if moved {
				items[at].startPeriod(now)
				restarted = append(restarted, items[at])
			}
		}
		if qSet {
			items[at].Quantity = q
		}
	}
	if len(items) == 0 {
		return nil, nil, badRequest("A subscription must have at least one active item.")
	}
	return items, restarted, nil
}

func sameInterval(a, b *price) bool {
	return a.Interval == b.Interval && a.IntervalCount == b.IntervalCount
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
	s.endSubscription(c, sub, c.now.Unix(), c.now.Unix(), "cancellation_requested")
	return s.renderSubscription(sub, c.version, c.expand), nil
}

// endSubscription cancels sub at endedAt and emits
// customer.subscription.deleted. Its open invoices are no longer retried.
func (s *Server) endSubscription(c *call, sub *subscription, canceledAt, endedAt int64, reason string) {
	s.changed(sub.ID, sub.clone())
	sub.Status = "canceled"
	sub.EndedAt = endedAt
	if sub.CanceledAt == 0 {
		sub.CanceledAt = canceledAt
	}
	if sub.CancelReason == "" {
		sub.CancelReason = reason
	}
	for _, id := range sub.Open {
		if inv, ok := s.invoices.get(id); ok {
			inv.NextAttempt = 0
		}
	}
	s.emit(c, endedAt, "customer.subscription.deleted", sub.clone(), nil)
}

func (s *Server) listSubscriptions(c *call) (obj, error) {
	f := c.form
	if err := f.allow(append(listParams, "customer", "customer_account", "status", "price")...); err != nil {
		return nil, err
	}
	status, _ := f.str("status")
	if status != "" && status != "all" && status != "ended" && !contains(subStatuses, status) {
		return nil, invalidParam("status", "Invalid status: must be one of all, ended, "+strings.Join(subStatuses, ", "))
	}
	customerID, _ := f.str("customer")
	if _, ok := s.customers.get(customerID); customerID != "" && !ok {
		// Like Stripe: a customer it never knew is refused, not an empty
		// list; a deleted one still lists its (ended) subscriptions.
		return nil, noSuch("customer", customerID, "customer")
	}
	accountID, _ := f.str("customer_account")
	if _, ok := s.accounts.get(accountID); accountID != "" && (!ok || s.acct != nil) {
		return nil, noSuch("account", accountID, "customer_account")
	}
	priceID, _ := f.str("price")
	rows := s.subs.newestFirst(func(sub *subscription) bool {
		return statusMatches(status, sub.Status) && (customerID == "" || sub.Customer == customerID) &&
			(accountID == "" || sub.CustomerAccount == accountID) &&
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

// SetSubscriptionStatus forces a subscription's status (say past_due or
// unpaid, which the fake never reaches by itself) and emits the event Stripe
// would: customer.subscription.deleted for canceled, else .updated.
func (s *Server) SetSubscriptionStatus(id, status string) error {
	return s.Account("").SetSubscriptionStatus(id, status)
}

func (s *Server) setSubscriptionStatus(id, status string) error {
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
			s.endSubscription(nil, sub, now, now, "cancellation_requested")
		}
		return nil
	}
	before := sub.clone()
	sub.Status = status
	s.emitIfChanged(nil, now, before, sub)
	return nil
}
