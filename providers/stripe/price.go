package stripe

import (
	"context"
	"fmt"
	"net/url"

	"github.com/billsync/billsync/reconcile"
)

// Price is one of the account's prices, as `billsync plans check` compares
// them with the plans file: plans map a price by its lookup key or its id.
type Price struct {
	ID        string
	LookupKey string // empty when the price has none
	// ProductPlan is the plan the price's product's metadata names
	// (reconcile.ProductPlanKey), read only when asked for.
	ProductPlan string
}

// ActivePrices lists every active price of the account
// (GET /v1/prices?active=true, 100 a page, so one request per 100 prices).
// With products, each page expands the prices' products
// (expand[]=data.product, no request more) for their ProductPlan.
func (c *Client) ActivePrices(ctx context.Context, products bool) ([]Price, error) {
	q := url.Values{"active": {"true"}}
	if products {
		q.Set("expand[0]", "data.product")
	}
	// A price is read as a ref is: its id, lookup_key and product.
	refs, err := listAll(ctx, c, "/v1/prices", q, func(r ref) (string, bool) { return r.id.s, r.id.ok })
	if err != nil {
		return nil, fail("list active prices", err)
	}
	prices := make([]Price, 0, len(refs))
	for _, r := range refs {
		prices = append(prices, Price{ID: r.id.s, LookupKey: r.lookupKey.s, ProductPlan: r.product.plan.s})
	}
	return prices, nil
}

// Refs returns the refs a plans file may name this price by, most
// specific first (the order the readers give an item's refs).
func (p Price) Refs() []string {
	if p.LookupKey == "" {
		return []string{p.ID}
	}
	return []string{p.LookupKey, p.ID}
}

// Item is the price as a subscription item of the platform's own would
// carry it, for the plans file to map (reconcile.Plans.ForItem).
func (p Price) Item() reconcile.Item {
	return reconcile.Item{PriceRefs: p.Refs(), ProductPlan: p.ProductPlan}
}

// String renders the price as support staff search for it.
func (p Price) String() string {
	if p.LookupKey == "" {
		return p.ID
	}
	return fmt.Sprintf("%s (lookup key %s)", p.ID, p.LookupKey)
}
