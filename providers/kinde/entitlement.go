package kinde

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"strconv"

	"github.com/billsync/billsync/reconcile"
)

// entitlementsPage is one page of GET /api/v1/billing/entitlements as
// billsync reads it: the entitlements that name a feature code, the id to
// page after, and whether more follow.
type entitlementsPage struct {
	Entitlements []reconcile.Entitlement
	Last         string // the id of the page's last entry, "" when it has none
	More         bool
}

// entitlementsPageOf reads a page of Kinde's billing entitlements:
// {has_more, entitlements: [{id, feature_code, entitlement_limit_max, …}],
// plans: […]}. An entry without a feature code is left out (nothing maps
// it); entitlement_limit_max is the limit when it is a whole number in
// range (null or absent: none; anything else makes the page unreadable,
// as a number billsync cannot read must not silently grant "unlimited").
// A page that is not such an object is a permanent error.
func entitlementsPageOf(body []byte) (entitlementsPage, error) {
	var raw struct {
		HasMore      *bool             `json:"has_more"`
		Entitlements []json.RawMessage `json:"entitlements"`
	}
	if err := json.Unmarshal(body, &raw); err != nil {
		return entitlementsPage{}, reconcile.Permanent("kinde entitlements: unreadable page: %v", err)
	}
	page := entitlementsPage{More: raw.HasMore != nil && *raw.HasMore}
	for i, e := range raw.Entitlements {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(e, &m); err != nil {
			return entitlementsPage{}, reconcile.Permanent("kinde entitlements: entry %d is not an object", i)
		}
		if id := text(m, "id"); id != "" {
			page.Last = id
		}
		code := text(m, "feature_code", "feature_key")
		if code == "" {
			continue
		}
		ent := reconcile.Entitlement{Provider: Provider, Key: code}
		if lim, ok := m["entitlement_limit_max"]; ok && string(lim) != "null" {
			n, err := limitOf(lim)
			if err != nil {
				return entitlementsPage{}, reconcile.Permanent("kinde entitlements: feature %q: entitlement_limit_max %s", code, err)
			}
			ent.Limit = &n
		}
		page.Entitlements = append(page.Entitlements, ent)
	}
	return page, nil
}

// limitOf reads a whole number from 0 to MaxInt64 (Kinde sends 100 or
// 100.0).
func limitOf(raw json.RawMessage) (int64, error) {
	var f float64
	if err := json.Unmarshal(raw, &f); err != nil {
		return 0, fmt.Errorf("%.40s is not a number", raw)
	}
	if f < 0 || f != math.Trunc(f) || f >= math.MaxInt64 {
		return 0, fmt.Errorf("%v is not a whole number from 0", f)
	}
	return int64(f), nil
}

// entitlements returns every entitlement of the customer, following
// has_more (starting_after the last id).
func (c *Client) entitlements(ctx context.Context, customerID string) ([]reconcile.Entitlement, error) {
	var all []reconcile.Entitlement
	after := ""
	for {
		q := url.Values{"customer_id": {customerID}, "page_size": {strconv.Itoa(c.pageSize)}}
		if after != "" {
			q.Set("starting_after", after)
		}
		var body json.RawMessage
		if err := c.get(ctx, "/api/v1/billing/entitlements", q, &body); err != nil {
			return nil, err
		}
		page, err := entitlementsPageOf(body)
		if err != nil {
			return nil, fmt.Errorf("kinde customer %s: %w", customerID, err)
		}
		all = append(all, page.Entitlements...)
		if !page.More || page.Last == "" || page.Last == after {
			return all, nil
		}
		after = page.Last
	}
}
