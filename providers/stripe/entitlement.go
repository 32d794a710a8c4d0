package stripe

import (
	"context"
	"fmt"
	"net/url"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/billsync/billsync/reconcile"
)

// activeEntitlement is what billsync reads of an entitlements.active_entitlement:
// its id (to page after it) and its feature's lookup_key, which the plans
// file maps to an app feature. Stripe puts lookup_key on the active
// entitlement itself; an expanded feature carries it too.
type activeEntitlement struct {
	ID        text `json:"id"`
	LookupKey text `json:"lookup_key"`
	Feature   ref  `json:"feature"`
}

func (o *activeEntitlement) UnmarshalJSONFrom(dec *jsontext.Decoder) error {
	type fields activeEntitlement // the fields, without this method
	return decodeObject(dec, (*fields)(o))
}

func idOfEntitlement(e activeEntitlement) (string, bool) { return e.ID.s, e.ID.ok }

// entitlementsOf turns active entitlements into reconcile's: one per
// lookup key (a feature with none cannot be mapped, and is left out).
func entitlementsOf(list []activeEntitlement) []reconcile.Entitlement {
	var out []reconcile.Entitlement
	seen := map[string]bool{}
	for _, e := range list {
		key := e.LookupKey.s
		if key == "" {
			key = e.Feature.lookupKey.s
		}
		if key == "" || seen[key] {
			continue
		}
		seen[key] = true
		out = append(out, reconcile.Entitlement{Provider: Provider, Key: key})
	}
	return out
}

// activeEntitlements reads every active entitlement of the customer
// (GET /v1/entitlements/active_entitlements?customer=…, 100 a page,
// following has_more: the summary event's embedded list stops at 10, so
// it is never read instead).
func (c *Client) activeEntitlements(ctx context.Context, customerID string) ([]reconcile.Entitlement, error) {
	list, err := listAll(ctx, c, "/v1/entitlements/active_entitlements", url.Values{"customer": {customerID}}, idOfEntitlement)
	if err != nil {
		return nil, failMissing("list active entitlements of customer "+customerID, err, reconcile.ErrCustomerUnknown)
	}
	return entitlementsOf(list), nil
}

// pendingEntitlements is a list of active entitlements under way (or none
// asked, with entitlements off).
type pendingEntitlements struct {
	asked bool
	done  chan struct{}
	ents  []reconcile.Entitlement
	err   error
}

// startEntitlements starts listing the customer's active entitlements when
// the client reads them (Config.Entitlements); ctx ends the list.
func (c *Client) startEntitlements(ctx context.Context, customerID string) *pendingEntitlements {
	p := &pendingEntitlements{asked: c.entitlements, done: make(chan struct{})}
	if !p.asked {
		close(p.done)
		return p
	}
	go func() {
		defer close(p.done)
		p.ents, p.err = c.activeEntitlements(ctx, customerID)
	}()
	return p
}

func (p *pendingEntitlements) wait() { <-p.done }

// complete waits for the list and puts it in snap: with entitlements off,
// the snapshot says the customer has none from Stripe; a deleted customer
// has none (whatever the list answered).
func (p *pendingEntitlements) complete(snap reconcile.Snapshot) (reconcile.Snapshot, error) {
	p.wait()
	snap.KeepEntitlements = false // read now (or off: none)
	if !p.asked || snap.Deleted {
		return snap, nil
	}
	if p.err != nil {
		return reconcile.Snapshot{}, fmt.Errorf("stripe customer %s: %w", snap.CustomerID, p.err)
	}
	snap.Entitlements = p.ents
	return snap, nil
}
