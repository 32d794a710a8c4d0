package stripe

// product is a product's metadata as the fake keeps it: Stripe's other
// product fields are rendered from the id. A product exists once a price
// names it (AddPrice, POST /v1/prices) or its metadata is set.
type product struct {
	record
	ID       string
	Metadata map[string]string
}

func (p *product) id() string { return p.ID }

func renderProduct(p *product, created int64) obj {
	return obj{
		"id": p.ID, "object": "product", "active": true, "created": created, "updated": created,
		"default_price": nil, "description": nil, "images": []any{}, "livemode": false,
		"marketing_features": []any{}, "metadata": metadataOf(p.Metadata), "name": p.ID,
		"package_dimensions": nil, "shippable": nil, "statement_descriptor": nil, "tax_code": nil,
		"unit_label": nil, "url": nil,
	}
}

// SetProductMetadata sets a product's metadata (a platform marking the
// products it creates: billsync_plan: pro), whether a price names the
// product yet or not.
func (s *Server) SetProductMetadata(id string, metadata map[string]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.products.put(&product{ID: id, Metadata: metadataOf(metadata)})
}

// getProduct answers GET /v1/products/{id}: a product whose metadata was
// set, or one a price names (with no metadata).
func (s *Server) getProduct(c *call) (obj, error) {
	o, ok := s.productObj(c.r.PathValue("id"))
	if !ok {
		return nil, noSuch("product", c.r.PathValue("id"), "id")
	}
	return o, nil
}

// productObj renders the product id, if it exists: created with the
// first price that names it.
func (s *Server) productObj(id string) (obj, bool) {
	var created int64
	for _, p := range s.prices.rows {
		if p.Product == id && (created == 0 || p.Created < created) {
			created = p.Created
		}
	}
	p, ok := s.products.get(id)
	switch {
	case !ok && created == 0:
		return nil, false
	case !ok:
		p = &product{ID: id}
	}
	return renderProduct(p, max(created, 1)), true
}

// renderPriceExpanded is renderPrice with its product expanded when the
// request asks (expand[]=data.product on the price list).
func (s *Server) renderPriceExpanded(c *call) func(*price) obj {
	expand := c.expand.inList()["product"]
	return func(p *price) obj {
		o := renderPrice(p)
		if prod, ok := s.productObj(p.Product); ok && expand {
			o["product"] = prod
		}
		return o
	}
}
