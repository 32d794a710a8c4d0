package stripe

import (
	"context"
	"errors"
	"fmt"
	"net/url"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/billsync/billsync/reconcile"
)

// fetchBySubscriptions reads the snapshot fetchCustomer gives (without
// entitlements: fetch adds those around either), through the other of
// Stripe's named operations: the customer's subscription list, every
// status, each with its customer expanded
// (GET /v1/subscriptions?customer=…&status=all&expand[0]=data.customer,
// 100 a page). Stripe limits each operation on its own (25 requests/s by
// default), so a deep queue that alternates the two reads twice as many
// customers a second.
//
// The customer (user reference, email, deleted) is read from the expanded
// customer of the listed subscriptions, and the snapshot is made by
// resolve, the rule fetchCustomer and ListPage use, with the listed
// subscriptions as the customer's whole list: ended ones (canceled,
// incomplete_expired) are left out there, on every path (see ended), and
// items cut short (items.has_more) are listed as resolve lists them. A
// deleted customer whose subscriptions are listed is read as deleted from
// its expanded stub, as fetchCustomer reads it. status=all is why a
// customer whose subscriptions have all ended still costs one request: the
// list holds them, with the customer.
//
// An empty list says nothing of the customer: one that never subscribed, a
// deleted one whose subscriptions are not listed, or an id Stripe does not
// know. Nor does resource_missing (Stripe's answer for a customer= it does
// not know; it could also be its answer for a deleted customer, which
// fetchCustomer reads as deleted, not unknown). Both fall back to
// fetchCustomer, which tells them apart: that costs one request of the
// other operation (two requests in all, or more when fetchCustomer lists).
// A listed subscription of another customer, or without its customer
// expanded, is a *reconcile.PermanentError: the answer is not the one
// asked for. Other errors are classified as fetchCustomer's are.
func (c *Client) fetchBySubscriptions(ctx context.Context, customerID string) (reconcile.Snapshot, error) {
	op := "list subscriptions of customer " + customerID
	q := url.Values{"customer": {customerID}, "status": {"all"}, "expand[0]": {"data.customer"}}
	listed, err := listAll(ctx, c, "/v1/subscriptions", q, func(s listedSubscription) (string, bool) { return s.ID.s, s.ID.ok })
	var ae *apiError
	switch {
	case errors.As(err, &ae) && ae.Code == codeResourceMissing:
		return c.fetchCustomer(ctx, customerID)
	case err != nil:
		return reconcile.Snapshot{}, fail(op, err)
	case len(listed) == 0:
		return c.fetchCustomer(ctx, customerID)
	}
	cust, err := listed[0].Customer.read(c.userRefKey)
	if err != nil {
		return reconcile.Snapshot{}, fmt.Errorf("stripe %s: the customer of subscription %s: %w", op, listed[0].ID.s, err)
	}
	cust.subs, cust.complete = make([]object, 0, len(listed)), true
	for _, s := range listed {
		if !s.Customer.ID.ok || s.Customer.ID.s != customerID {
			return reconcile.Snapshot{}, reconcile.Permanent("stripe %s: subscription %s is listed with customer %q (is it expanded?)",
				op, s.ID.s, s.Customer.ID.s)
		}
		cust.subs = append(cust.subs, object(s.objectFields))
	}
	return c.resolve(ctx, cust)
}

// listedSubscription is a subscription of a list that expanded
// data.customer: what billsync reads of a subscription (object's fields,
// inlined), and its customer. A customer left as an id reads as a
// customer without one.
type listedSubscription struct {
	objectFields
	Customer customerObject `json:"customer"`
}

// objectFields are object's fields without its decoding method, so that
// listedSubscription can inline them.
type objectFields object

func (s *listedSubscription) UnmarshalJSONFrom(dec *jsontext.Decoder) error {
	type fields listedSubscription // the fields, without this method
	return decodeObject(dec, (*fields)(s))
}
