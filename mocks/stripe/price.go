package stripe

import (
	"strconv"
	"time"
)

type price struct {
	record
	ID            string
	Created       int64
	Currency      string
	UnitAmount    int64
	Interval      string // "" for a one-time price
	IntervalCount int64
	LookupKey     string
	Nickname      string
	Product       string
	Active        bool
	Metadata      map[string]string
}

func (p *price) id() string { return p.ID }

func renderPrice(p *price) obj {
	o := obj{
		"id":                  p.ID,
		"object":              "price",
		"active":              p.Active,
		"billing_scheme":      "per_unit",
		"created":             p.Created,
		"currency":            p.Currency,
		"custom_unit_amount":  nil,
		"livemode":            false,
		"lookup_key":          nullable(p.LookupKey),
		"metadata":            metadataOf(p.Metadata),
		"nickname":            nullable(p.Nickname),
		"product":             p.Product,
		"recurring":           nil,
		"tax_behavior":        "unspecified",
		"tiers_mode":          nil,
		"transform_quantity":  nil,
		"type":                "one_time",
		"unit_amount":         p.UnitAmount,
		"unit_amount_decimal": strconv.FormatInt(p.UnitAmount, 10),
	}
	if p.Interval != "" {
		o["type"] = "recurring"
		o["recurring"] = obj{"interval": p.Interval, "interval_count": p.IntervalCount, "meter": nil,
			"trial_period_days": nil, "usage_type": "licensed"}
	}
	return o
}

// renderPlan is the legacy plan object Stripe still puts on subscription items.
func renderPlan(p *price) obj {
	return obj{
		"id": p.ID, "object": "plan", "active": p.Active, "amount": p.UnitAmount,
		"amount_decimal": strconv.FormatInt(p.UnitAmount, 10), "billing_scheme": "per_unit",
		"created": p.Created, "currency": p.Currency, "interval": p.Interval, "interval_count": p.IntervalCount,
		"livemode": false, "metadata": metadataOf(p.Metadata), "meter": nil, "nickname": nullable(p.Nickname),
		"product": p.Product, "tiers_mode": nil, "transform_usage": nil, "trial_period_days": nil, "usage_type": "licensed",
	}
}

// AddPrice preloads a monthly USD price. An existing price with that id is
// overwritten in place; the lookup key moves to it from any other price.
func (s *Server) AddPrice(id, lookupKey string, unitAmount int64) {
	_ = s.Account("").AddPrice(id, lookupKey, unitAmount)
}

func (s *Server) addPrice(id, lookupKey string, unitAmount int64) {
	p, ok := s.prices.get(id)
	if !ok {
		p = &price{ID: id, Created: s.clock.Now().Unix(), Product: "prod_" + id}
	}
	p.Currency, p.UnitAmount, p.Interval, p.IntervalCount, p.Active = "usd", unitAmount, "month", 1, true
	s.claimLookupKey(p, lookupKey)
	s.prices.put(p)
}

// claimLookupKey gives key to p, taking it from any other price (Stripe's
// transfer_lookup_key=true).
func (s *Server) claimLookupKey(p *price, key string) {
	for _, other := range s.prices.rows {
		if other != p && key != "" && other.LookupKey == key {
			other.LookupKey = ""
		}
	}
	p.LookupKey = key
}

func (s *Server) createPrice(c *call) (obj, error) {
	f := c.form
	if err := f.allow("currency", "unit_amount", "recurring", "lookup_key", "transfer_lookup_key", "product",
		"product_data", "nickname", "metadata", "active"); err != nil {
		return nil, err
	}
	currency, err := f.require("currency")
	if err != nil {
		return nil, err
	}
	amount, ok, err := f.integer("unit_amount")
	if err != nil {
		return nil, err
	} else if !ok {
		return nil, missingParam("unit_amount")
	}
	p := &price{ID: newID("price"), Created: c.now.Unix(), Currency: currency, UnitAmount: amount, Active: true,
		Metadata: f.hash("metadata")}
	p.Nickname, _ = f.str("nickname")
	if active, ok, err := f.boolean("active"); err != nil {
		return nil, err
	} else if ok {
		p.Active = active // an archived price (active=false) is left out of active=true lists
	}
	if rec := f.hash("recurring"); len(rec) > 0 {
		if p.Interval, p.IntervalCount, err = parseRecurring(rec); err != nil {
			return nil, err
		}
	}
	switch product, _ := f.str("product"); {
	case product != "":
		p.Product = product
	case f.hash("product_data")["name"] != "":
		p.Product = newID("prod")
	default:
		return nil, missingParam("product")
	}
	key, _ := f.str("lookup_key")
	transfer, _, err := f.boolean("transfer_lookup_key")
	if err != nil {
		return nil, err
	}
	if key != "" && !transfer {
		for _, other := range s.prices.rows {
			if other.LookupKey == key {
				return nil, invalidParam("lookup_key", "A price (`"+other.ID+"`) already uses that lookup key.")
			}
		}
	}
	s.claimLookupKey(p, key)
	s.prices.put(p)
	return renderPrice(p), nil
}

func parseRecurring(rec map[string]string) (string, int64, error) {
	interval := rec["interval"]
	switch interval {
	case "day", "week", "month", "year":
	case "":
		return "", 0, missingParam("recurring[interval]")
	default:
		return "", 0, invalidParam("recurring[interval]", "Invalid recurring[interval]: must be one of day, week, month, or year")
	}
	count := int64(1)
	if v, ok := rec["interval_count"]; ok {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			return "", 0, invalidParam("recurring[interval_count]", "Invalid integer: "+v)
		}
		count = n
	}
	return interval, count, nil
}

func (s *Server) getPrice(c *call) (obj, error) {
	p, ok := s.prices.get(c.r.PathValue("id"))
	if !ok {
		return nil, noSuch("price", c.r.PathValue("id"), "id")
	}
	return renderPrice(p), nil
}

func (s *Server) listPrices(c *call) (obj, error) {
	f := c.form
	if err := f.allow(append(listParams, "lookup_keys", "active", "product", "currency", "type")...); err != nil {
		return nil, err
	}
	keys, err := f.list("lookup_keys")
	if err != nil {
		return nil, err
	}
	active, byActive, err := f.boolean("active")
	if err != nil {
		return nil, err
	}
	product, _ := f.str("product")
	rows := s.prices.newestFirst(func(p *price) bool {
		return (len(keys) == 0 || contains(keys, p.LookupKey) && p.LookupKey != "") &&
			(!byActive || p.Active == active) && (product == "" || p.Product == product)
	})
	return listPage(c, rows, s.prices.get, "price", s.renderPriceExpanded(c))
}

// periodEnd is the end of a subscription period that started n-1 intervals
// after anchor, by the price's interval.
func (p *price) periodEnd(anchor int64, n int) int64 {
	return addInterval(time.Unix(anchor, 0), p.Interval, p.IntervalCount, n).Unix()
}
