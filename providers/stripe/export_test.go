package stripe

import (
	"net/http"

	"github.com/billsync/billsync/reconcile"
)

// NewClientOver is NewClient sending each attempt through base instead of
// a network transport (an in-process one, for a testing/synctest bubble).
func NewClientOver(cfg Config, base http.RoundTripper) (*Client, error) {
	return newClient(cfg, base)
}

// EntitlementsPageOf reads a page of active entitlements as Fetch does.
func EntitlementsPageOf(body []byte) ([]reconcile.Entitlement, bool, error) {
	list, more, err := listPageOf[activeEntitlement](body)
	return entitlementsOf(list), more, err
}

// AccountRate is the rate in force for requests on behalf of the
// connected account.
func (c *Client) AccountRate(account string) float64 { return c.budget.ofAccount(account).rate() }
