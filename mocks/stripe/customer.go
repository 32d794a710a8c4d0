package stripe

import (
	"fmt"
	"maps"
	"strings"
)

type customer struct {
	record
	ID            string
	Created       int64
	Email         string
	Name          string
	Description   string
	InvoicePrefix string
	Invoices      int // invoices numbered so far
	Metadata      map[string]string
	Deleted       bool // DELETE /v1/customers/{id}: retrieve answers the deleted stub
	CardFails     bool // every payment attempt is declined (SetCardFails)
}

func (c *customer) id() string { return c.ID }

func (c *customer) clone() *customer {
	cp := *c
	cp.Metadata = maps.Clone(c.Metadata)
	return &cp
}

func renderCustomer(c *customer) obj {
	if c.Deleted {
		return obj{"id": c.ID, "object": "customer", "deleted": true}
	}
	return obj{
		"id":                c.ID,
		"object":            "customer",
		"address":           nil,
		"balance":           0,
		"created":           c.Created,
		"currency":          nil,
		"default_source":    nil,
		"delinquent":        false,
		"description":       nullable(c.Description),
		"discount":          nil,
		"email":             nullable(c.Email),
		"invoice_prefix":    c.InvoicePrefix,
		"invoice_settings":  obj{"custom_fields": nil, "default_payment_method": nil, "footer": nil, "rendering_options": nil},
		"livemode":          false,
		"metadata":          metadataOf(c.Metadata),
		"name":              nullable(c.Name),
		"phone":             nil,
		"preferred_locales": []string{},
		"shipping":          nil,
		"tax_exempt":        "none",
		"test_clock":        nil,
	}
}

var customerParams = []string{"email", "name", "description", "metadata", "phone"}

func (s *Server) createCustomer(c *call) (obj, error) {
	if err := c.form.allow(customerParams...); err != nil {
		return nil, err
	}
	cust := &customer{ID: newID("cus"), Metadata: c.form.hash("metadata")}
	cust.Email, _ = c.form.str("email")
	cust.Name, _ = c.form.str("name")
	cust.Description, _ = c.form.str("description")
	s.putCustomer(c, cust)
	return renderCustomer(cust), nil
}

// putCustomer stores a new customer, created now, and emits
// customer.created (c is nil for a helper's).
func (s *Server) putCustomer(c *call, cust *customer) {
	now := s.clock.Now()
	if c != nil {
		now = c.now
	}
	cust.Created = now.Unix()
	cust.InvoicePrefix = strings.ToUpper(strings.TrimPrefix(cust.ID, "cus_"))
	cust.InvoicePrefix = cust.InvoicePrefix[:min(len(cust.InvoicePrefix), 8)]
	s.changed(cust.ID, nil)
	s.customers.put(cust)
	s.emit(c, cust.Created, "customer.created", cust.clone(), nil)
}

// liveCustomer finds a customer that was not deleted: writes to a deleted
// one answer like an unknown id.
func (s *Server) liveCustomer(id, param string) (*customer, error) {
	cust, ok := s.customers.get(id)
	if !ok || cust.Deleted {
		return nil, noSuch("customer", id, param)
	}
	return cust, nil
}

func (s *Server) updateCustomer(c *call) (obj, error) {
	cust, err := s.liveCustomer(c.r.PathValue("id"), "id")
	if err != nil {
		return nil, err
	}
	if err := c.form.allow(customerParams...); err != nil {
		return nil, err
	}
	before := cust.clone()
	s.changed(cust.ID, before)
	defer func() {
		if prev := diffTop(renderCustomer(before), renderCustomer(cust)); len(prev) > 0 {
			s.emit(c, c.now.Unix(), "customer.updated", cust.clone(), before)
		}
	}()
	if v, ok := c.form.str("email"); ok {
		cust.Email = v
	}
	if v, ok := c.form.str("name"); ok {
		cust.Name = v
	}
	if v, ok := c.form.str("description"); ok {
		cust.Description = v
	}
	cust.Metadata = mergeMetadata(cust.Metadata, c.form.hash("metadata"))
	return renderCustomer(cust), nil
}

func (s *Server) getCustomer(c *call) (obj, error) {
	cust, ok := s.customers.get(c.r.PathValue("id"))
	if !ok {
		return nil, noSuch("customer", c.r.PathValue("id"), "id")
	}
	return s.renderCustomerExpanded(cust, c.version, c.expand), nil
}

// currentSubscriptions returns a customer's current (not canceled)
// subscriptions, newest first. It reads the customer's own subscriptions
// (subsByCustomer), so a page of expanded customers costs what the page
// holds, not a pass over every subscription of the account: that pass made
// each list call grow with the account, and a sweep quadratic. Each is read
// through the table, which shows the past version under a stale view.
func (s *Server) currentSubscriptions(customerID string) []*subscription {
	all := s.subsByCustomer[customerID]
	var current []*subscription
	for i := len(all) - 1; i >= 0; i-- {
		if sub, ok := s.subs.get(all[i].id()); ok && statusMatches("", sub.Status) {
			current = append(current, sub)
		}
	}
	return current
}

// embeddedSubscriptions is how many subscriptions an expanded
// customer.subscriptions holds; has_more says there are more.
const embeddedSubscriptions = 10

// renderCustomerExpanded renders a customer with the expansions a read
// asked for: subscriptions is the customer's current (not canceled)
// subscriptions, newest first, as an embedded list of at most 10.
func (s *Server) renderCustomerExpanded(cust *customer, version string, ex expansion) obj {
	o := renderCustomer(cust)
	if cust.Deleted || !ex.has("subscriptions") {
		return o
	}
	subs := s.currentSubscriptions(cust.ID)
	page := subs[:min(len(subs), embeddedSubscriptions)]
	data := make([]obj, 0, len(page))
	for _, sub := range page {
		data = append(data, s.renderSubscription(sub, version, expansion{}))
	}
	o["subscriptions"] = obj{"object": "list", "data": data, "has_more": len(subs) > len(page),
		"url": "/v1/customers/" + cust.ID + "/subscriptions"}
	return o
}

func (s *Server) listCustomers(c *call) (obj, error) {
	if err := c.form.allow(append(listParams, "email", "created")...); err != nil {
		return nil, err
	}
	inRange, err := createdFilter(c.form)
	if err != nil {
		return nil, err
	}
	email, byEmail := c.form.str("email")
	keep := func(cu *customer) bool {
		return !cu.Deleted && (!byEmail || cu.Email == email) && inRange(cu.Created)
	}
	ex := c.expand.inList()
	return listTable(c, &s.customers, keep, "customer", func(cu *customer) obj {
		return s.renderCustomerExpanded(cu, c.version, ex)
	})
}

// nextInvoiceNumber numbers a customer's invoices like Stripe: PREFIX-0001.
func (cust *customer) nextInvoiceNumber() string {
	cust.Invoices++
	return fmt.Sprintf("%s-%04d", cust.InvoicePrefix, cust.Invoices)
}

// deleteCustomer is DELETE /v1/customers/{id}. Like Stripe it cancels the
// customer's subscriptions at once (customer.subscription.deleted each),
// then emits customer.deleted; retrieve keeps answering 200 with the deleted
// stub, while an id that never existed stays 404.
func (s *Server) deleteCustomer(c *call) (obj, error) {
	cust, err := s.liveCustomer(c.r.PathValue("id"), "id")
	if err != nil {
		return nil, err
	}
	if err := c.form.allow(); err != nil {
		return nil, err
	}
	now := c.now.Unix()
	for _, sub := range s.subs.rows {
		if sub.Customer == cust.ID && sub.Status != "canceled" && sub.Status != "incomplete_expired" {
			s.endSubscription(c, sub, now, now, "cancellation_requested")
		}
	}
	s.changed(cust.ID, cust.clone())
	s.emit(c, now, "customer.deleted", cust.clone(), nil)
	cust.Deleted = true
	return renderCustomer(cust), nil
}

// SetCardFails makes every payment of the customer's invoices fail (true) or
// succeed again (false), like swapping the default card for a declining test
// card. Renewals then go past_due; see Dunning.
func (s *Server) SetCardFails(customerID string, fails bool) error {
	return s.Account("").SetCardFails(customerID, fails)
}

func (s *Server) setCardFails(customerID string, fails bool) error {
	cust, err := s.liveCustomer(customerID, "id")
	if err != nil {
		return err
	}
	cust.CardFails = fails
	return nil
}
