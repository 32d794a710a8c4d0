package stripemock

import (
	"fmt"
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
}

func (c *customer) id() string { return c.ID }

func renderCustomer(c *customer) obj {
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
	id := newID("cus")
	cust := &customer{ID: id, Created: c.now.Unix(), InvoicePrefix: strings.ToUpper(id[4:12]),
		Metadata: c.form.hash("metadata")}
	cust.Email, _ = c.form.str("email")
	cust.Name, _ = c.form.str("name")
	cust.Description, _ = c.form.str("description")
	s.customers.put(cust)
	return renderCustomer(cust), nil
}

func (s *Server) updateCustomer(c *call) (obj, error) {
	cust, ok := s.customers.get(c.r.PathValue("id"))
	if !ok {
		return nil, noSuch("customer", c.r.PathValue("id"), "id")
	}
	if err := c.form.allow(customerParams...); err != nil {
		return nil, err
	}
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

// embeddedSubscriptions is how many subscriptions an expanded
// customer.subscriptions holds; has_more says there are more.
const embeddedSubscriptions = 10

// renderCustomerExpanded renders a customer with the expansions a read
// asked for: subscriptions is the customer's current (not canceled)
// subscriptions, newest first, as an embedded list of at most 10.
func (s *Server) renderCustomerExpanded(cust *customer, version string, ex expansion) obj {
	o := renderCustomer(cust)
	if !ex.has("subscriptions") {
		return o
	}
	subs := s.subs.newestFirst(func(sub *subscription) bool {
		return sub.Customer == cust.ID && statusMatches("", sub.Status)
	})
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
	if err := c.form.allow(append(listParams, "email")...); err != nil {
		return nil, err
	}
	email, byEmail := c.form.str("email")
	rows := s.customers.newestFirst(func(cu *customer) bool { return !byEmail || cu.Email == email })
	ex := c.expand.inList()
	return listPage(c, rows, s.customers.get, "customer", func(cu *customer) obj {
		return s.renderCustomerExpanded(cu, c.version, ex)
	})
}

// nextInvoiceNumber numbers a customer's invoices like Stripe: PREFIX-0001.
func (cust *customer) nextInvoiceNumber() string {
	cust.Invoices++
	return fmt.Sprintf("%s-%04d", cust.InvoicePrefix, cust.Invoices)
}
