package stripe

import (
	"context"
	"fmt"
	"net/url"
)

// Price is one of the account's prices, as `billsync plans check` compares
// them with the plans file: plans map a price by its lookup key or its id.
type Price struct {
	ID        string
	LookupKey string // empty when the price has none
}

// ActivePrices lists every active price of the account
// (GET /v1/prices?active=true, 100 a page, so one request per 100 prices).
func (c *Client) ActivePrices(ctx context.Context) ([]Price, error) {
	// A price is read as a ref is: its id and lookup_key.
	refs, err := listAll(ctx, c, "/v1/prices", url.Values{"active": {"true"}}, func(r ref) (string, bool) { return r.id.s, r.id.ok })
	if err != nil {
		return nil, fail("list active prices", err)
	}
	prices := make([]Price, 0, len(refs))
	for _, r := range refs {
		prices = append(prices, Price{ID: r.id.s, LookupKey: r.lookupKey.s})
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

// String renders the price as support staff search for it.
func (p Price) String() string {
	if p.LookupKey == "" {
		return p.ID
	}
	return fmt.Sprintf("%s (lookup key %s)", p.ID, p.LookupKey)
}
