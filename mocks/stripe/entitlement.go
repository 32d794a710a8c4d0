package stripe

import (
	"slices"
)

// feature is an entitlements.feature: what a product grants its buyers.
type feature struct {
	record
	ID        string
	Created   int64
	Name      string
	LookupKey string
	Active    bool
	Metadata  map[string]string
}

func (f *feature) id() string { return f.ID }

func renderFeature(f *feature) obj {
	return obj{"id": f.ID, "object": "entitlements.feature", "active": f.Active, "livemode": false,
		"lookup_key": f.LookupKey, "metadata": metadataOf(f.Metadata), "name": f.Name}
}

// productFeature attaches a feature to a product: every customer with a
// live subscription to a price of that product is entitled to it.
type productFeature struct {
	record
	ID      string
	Product string
	Feature *feature
}

func (p *productFeature) id() string { return p.ID }

func renderProductFeature(p *productFeature) obj {
	return obj{"id": p.ID, "object": "product_feature", "entitlement_feature": renderFeature(p.Feature), "livemode": false}
}

// activeEntitlement is one feature a customer is entitled to now. Its id is
// the feature's (one per feature however many subscriptions grant it), and
// it lists in the feature's creation order, so paging is stable.
type activeEntitlement struct {
	record
	ID      string
	Feature *feature
}

func (a *activeEntitlement) id() string { return a.ID }

func renderActiveEntitlement(a *activeEntitlement) obj {
	return obj{"id": a.ID, "object": "entitlements.active_entitlement", "feature": a.Feature.ID,
		"livemode": false, "lookup_key": a.Feature.LookupKey}
}

// entitlementSummary is the object of entitlements.active_entitlement_summary.updated.
type entitlementSummary struct {
	Customer string
	Active   []*activeEntitlement
}

// renderSummary renders the summary as Stripe does: its embedded list holds
// the first 10 entitlements only (has_more says when there are more), which
// is why a reader must list them instead.
func renderSummary(s *entitlementSummary) obj {
	page := s.Active[:min(len(s.Active), 10)]
	data := make([]obj, 0, len(page))
	for _, a := range page {
		data = append(data, renderActiveEntitlement(a))
	}
	return obj{"object": "entitlements.active_entitlement_summary", "customer": s.Customer, "livemode": false,
		"entitlements": obj{"object": "list", "data": data, "has_more": len(s.Active) > len(page),
			"url": "/v1/customer/" + s.Customer + "/entitlements"}}
}

// entitledStatuses are the subscription statuses whose products' features
// the customer keeps.
var entitledStatuses = []string{"active", "trialing", "past_due"}

// activeEntitlementsOf computes a customer's active entitlements, in the
// features' creation order, newest first (as lists are).
func (s *Server) activeEntitlementsOf(customerID string) []*activeEntitlement {
	products := map[string]bool{}
	for _, sub := range s.subsByCustomer[customerID] {
		if slices.Contains(entitledStatuses, sub.Status) {
			for _, it := range sub.Items {
				products[it.Price.Product] = true
			}
		}
	}
	granted := map[string]*feature{}
	for _, pf := range s.productFeatures.rows {
		if products[pf.Product] && pf.Feature.Active {
			granted[pf.Feature.ID] = pf.Feature
		}
	}
	out := make([]*activeEntitlement, 0, len(granted))
	for _, f := range s.features.rows {
		if granted[f.ID] != nil {
			out = append(out, &activeEntitlement{record: f.record, ID: "ent_test_" + f.ID[len("feat_"):], Feature: f})
		}
	}
	slices.Reverse(out)
	return out
}

func (s *Server) createFeature(c *call) (obj, error) {
	if err := c.form.allow("name", "lookup_key", "metadata"); err != nil {
		return nil, err
	}
	name, err := c.form.require("name")
	if err != nil {
		return nil, err
	}
	key, err := c.form.require("lookup_key")
	if err != nil {
		return nil, err
	}
	for _, f := range s.features.rows {
		if f.LookupKey == key {
			return nil, invalidParam("lookup_key", "A feature with lookup_key "+key+" already exists.")
		}
	}
	f := &feature{ID: newID("feat"), Created: c.now.Unix(), Name: name, LookupKey: key, Active: true, Metadata: c.form.hash("metadata")}
	s.features.put(f)
	return renderFeature(f), nil
}

func (s *Server) getFeature(c *call) (obj, error) {
	f, ok := s.features.get(c.r.PathValue("id"))
	if !ok {
		return nil, noSuch("entitlements.feature", c.r.PathValue("id"), "id")
	}
	return renderFeature(f), nil
}

func (s *Server) listFeatures(c *call) (obj, error) {
	if err := c.form.allow(append(listParams, "lookup_key", "archived", "expand")...); err != nil {
		return nil, err
	}
	key, _ := c.form.str("lookup_key")
	return listTable(c, &s.features, func(f *feature) bool { return key == "" || f.LookupKey == key }, "entitlements.feature", renderFeature)
}

func (s *Server) attachFeature(c *call) (obj, error) {
	if err := c.form.allow("entitlement_feature", "expand"); err != nil {
		return nil, err
	}
	id, err := c.form.require("entitlement_feature")
	if err != nil {
		return nil, err
	}
	f, ok := s.features.get(id)
	if !ok {
		return nil, noSuch("entitlements.feature", id, "entitlement_feature")
	}
	pf := &productFeature{ID: newID("prodft"), Product: c.r.PathValue("product"), Feature: f}
	s.productFeatures.put(pf)
	return renderProductFeature(pf), nil
}

func (s *Server) listProductFeatures(c *call) (obj, error) {
	if err := c.form.allow(append(listParams, "expand")...); err != nil {
		return nil, err
	}
	product := c.r.PathValue("product")
	return listTable(c, &s.productFeatures, func(p *productFeature) bool { return p.Product == product }, "product_feature", renderProductFeature)
}

func (s *Server) detachFeature(c *call) (obj, error) {
	pf, ok := s.productFeatures.get(c.r.PathValue("id"))
	if !ok || pf.Product != c.r.PathValue("product") {
		return nil, noSuch("product_feature", c.r.PathValue("id"), "id")
	}
	s.productFeatures.remove(pf.ID)
	return obj{"id": pf.ID, "object": "product_feature", "deleted": true}, nil
}

func (s *Server) listActiveEntitlements(c *call) (obj, error) {
	if err := c.form.allow(append(listParams, "customer", "expand")...); err != nil {
		return nil, err
	}
	id, err := c.form.require("customer")
	if err != nil {
		return nil, err
	}
	if _, ok := s.customers.get(id); !ok {
		return nil, noSuch("customer", id, "customer")
	}
	rows := s.activeEntitlementsOf(id)
	lookup := func(id string) (*activeEntitlement, bool) {
		i := slices.IndexFunc(rows, func(a *activeEntitlement) bool { return a.ID == id })
		if i < 0 {
			return nil, false
		}
		return rows[i], true
	}
	return listPage(c, rows, lookup, "entitlements.active_entitlement", renderActiveEntitlement)
}

// syncEntitlements emits entitlements.active_entitlement_summary.updated
// for every customer whose active entitlements changed since it last
// looked (after each write and each clock tick). It costs nothing while no
// feature exists.
func (s *Server) syncEntitlements(c *call, at int64) {
	if len(s.features.rows) == 0 {
		return
	}
	if s.entitled == nil {
		s.entitled = map[string][]string{}
	}
	for _, cust := range s.customers.rows {
		active := s.activeEntitlementsOf(cust.ID)
		keys := make([]string, len(active))
		for i, a := range active {
			keys[i] = a.ID
		}
		if slices.Equal(keys, s.entitled[cust.ID]) {
			continue
		}
		s.entitled[cust.ID] = keys
		s.emit(c, at, "entitlements.active_entitlement_summary.updated", &entitlementSummary{Customer: cust.ID, Active: active}, nil)
	}
}

// Entitled returns the lookup keys of a customer's active entitlements
// (tests).
func (s *Server) Entitled(customerID string) []string {
	return s.Account("").Entitled(customerID)
}

func (s *Server) entitledKeys(customerID string) []string {
	var keys []string
	for _, a := range s.activeEntitlementsOf(customerID) {
		keys = append(keys, a.Feature.LookupKey)
	}
	return slices.Sorted(slices.Values(keys))
}
