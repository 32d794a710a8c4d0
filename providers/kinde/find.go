package kinde

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/billsync/billsync/reconcile"
)

var _ reconcile.Finder = (*Client)(nil)

// The phases of a Finder cursor: phase ":" next_token. "" is the start
// (users, first page); findDone is the end (resuming there finds nothing).
const (
	phaseUsers = "users"
	phaseOrgs  = "orgs"
	findDone   = "done"
)

// FindPage names a page of Kinde's billing customers, with the app's
// reference to each: Kinde lists neither customers nor agreements without
// a customer id, but it lists its users with their billing customer
// (GET /api/v1/users?expand=billing, scope read:users) and its
// organisations, whose billing customer it gives one organisation at a
// time (GET /api/v1/organizations, then GET /api/v1/organization?code=…
// &expand=billing for each, scope read:organizations): that is one
// request per organisation, besides one per page of organisations. Users
// come first, a page of PageSize (default 100) a request; a user's
// reference is its id, an organisation's its code, as the webhooks name
// them (data.user_id, data.org_code). Users and organisations without a
// billing customer are skipped, and so is an organisation deleted between
// the list and its read.
//
// The cursor is the phase and Kinde's next_token ("users:T", "orgs:T"),
// or "done" after the last page. The requests wait for the client's rate
// limit, and for a share of it of their own (half): the worker's fetches,
// webhook-triggered ones first, keep the rest. They are retried as every
// call of the client.
func (c *Client) FindPage(ctx context.Context, cursor string) ([]reconcile.Found, string, bool, error) {
	phase, token, _ := strings.Cut(cursor, ":")
	switch {
	case cursor == "":
		phase = phaseUsers
	case cursor == findDone:
		return nil, findDone, false, nil
	case phase != phaseUsers && phase != phaseOrgs:
		return nil, "", false, reconcile.Permanent("kinde: find cursor %q is not one of mine", cursor)
	}
	q := url.Values{"page_size": {strconv.Itoa(c.pageSize)}}
	if token != "" {
		q.Set("next_token", token)
	}
	if phase == phaseUsers {
		q.Set("expand", "billing")
		var raw json.RawMessage
		if err := c.get(ctx, "/api/v1/users", q, &raw); err != nil {
			return nil, "", false, fmt.Errorf("kinde: find users: %w", err)
		}
		found, next, err := readUsers(raw)
		if err != nil {
			return nil, "", false, err
		}
		if next, err = nextCursor(phaseUsers, token, next); err != nil {
			return nil, "", false, err
		}
		if next == "" {
			return found, phaseOrgs + ":", true, nil // organisations next
		}
		return found, next, true, nil
	}
	var raw json.RawMessage
	if err := c.get(ctx, "/api/v1/organizations", q, &raw); err != nil {
		return nil, "", false, fmt.Errorf("kinde: find organizations: %w", err)
	}
	codes, next, err := readOrgs(raw)
	if err != nil {
		return nil, "", false, err
	}
	if next, err = nextCursor(phaseOrgs, token, next); err != nil {
		return nil, "", false, err
	}
	var found []reconcile.Found
	for _, code := range codes {
		customer, err := c.orgCustomer(ctx, code)
		if err != nil {
			return nil, "", false, err
		}
		if customer != "" {
			found = append(found, reconcile.Found{CustomerID: customer, UserRef: code})
		}
	}
	if next == "" {
		return found, findDone, false, nil
	}
	return found, next, true, nil
}

// nextCursor is the cursor after a page of phase read at token, given the
// next_token Kinde answered: "" when the phase ended (no token, or the one
// just read again, which would list the same page for ever).
func nextCursor(phase, token, next string) (string, error) {
	if next == "" || next == token {
		return "", nil
	}
	if strings.ContainsAny(next, "\n\r") {
		// A run keeps its cursor one part a line.
		return "", reconcile.Permanent("kinde: %s next_token holds a line break", phase)
	}
	return phase + ":" + next, nil
}

// orgCustomer reads an organisation's billing customer: "" when it has
// none, or when it is gone.
func (c *Client) orgCustomer(ctx context.Context, code string) (string, error) {
	var raw json.RawMessage
	err := c.get(ctx, "/api/v1/organization", url.Values{"code": {code}, "expand": {"billing"}}, &raw)
	if errors.Is(err, errNotFound) {
		return "", nil // deleted since the list
	}
	if err != nil {
		return "", fmt.Errorf("kinde: find organization %s: %w", code, err)
	}
	return readOrgBilling(raw)
}

// readUsers reads a page of GET /api/v1/users?expand=billing: each user
// with a billing customer, by its id, and next_token. A user whose billing
// is absent, null or names no customer is skipped; a customer id billsync
// cannot keep as is (a NUL byte, too long) is skipped too: it could not
// be fetched by the id kept.
func readUsers(raw []byte) ([]reconcile.Found, string, error) {
	var page struct {
		Users     []json.RawMessage `json:"users"`
		NextToken json.RawMessage   `json:"next_token"`
	}
	if err := json.Unmarshal(raw, &page); err != nil {
		return nil, "", reconcile.Permanent("kinde users: not a page of users: %v", err)
	}
	var found []reconcile.Found
	for _, u := range page.Users {
		var m map[string]json.RawMessage
		if json.Unmarshal(u, &m) != nil {
			continue // null, or not an object: no billing customer to read
		}
		if f, ok := foundOf(billingCustomer(m["billing"], "customer_id", "billing_customer_id"), text(m, "id")); ok {
			found = append(found, f)
		}
	}
	return found, token(page.NextToken), nil
}

// readOrgs reads a page of GET /api/v1/organizations: the organisations'
// codes and next_token.
func readOrgs(raw []byte) ([]string, string, error) {
	var page struct {
		Organizations []json.RawMessage `json:"organizations"`
		NextToken     json.RawMessage   `json:"next_token"`
	}
	if err := json.Unmarshal(raw, &page); err != nil {
		return nil, "", reconcile.Permanent("kinde organizations: not a page of organizations: %v", err)
	}
	var codes []string
	for _, o := range page.Organizations {
		var m map[string]json.RawMessage
		if json.Unmarshal(o, &m) != nil {
			continue
		}
		if code, problem := reconcile.Storable(text(m, "code")); code != "" && problem == "" {
			codes = append(codes, code)
		}
	}
	return codes, token(page.NextToken), nil
}

// readOrgBilling reads GET /api/v1/organization?expand=billing's billing
// customer: "" when the organisation has none.
func readOrgBilling(raw []byte) (string, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return "", reconcile.Permanent("kinde organization: not an object: %v", err)
	}
	f, _ := foundOf(billingCustomer(m["billing"], "billing_customer_id", "customer_id"), "")
	return f.CustomerID, nil
}

// billingCustomer reads the customer id of a billing object from the
// first of names holding one ("" for absent, null or another shape).
func billingCustomer(raw json.RawMessage, names ...string) string {
	var b map[string]json.RawMessage
	if json.Unmarshal(raw, &b) != nil {
		return ""
	}
	return text(b, names...)
}

// foundOf is a found customer, false when its id is empty or could not be
// kept as is; a reference that could not be kept is left out.
func foundOf(customer, ref string) (reconcile.Found, bool) {
	customer, problem := reconcile.Storable(strings.TrimSpace(customer))
	if customer == "" || problem != "" {
		return reconcile.Found{}, false
	}
	if clean, problem := reconcile.Storable(ref); problem == "" {
		return reconcile.Found{CustomerID: customer, UserRef: clean}, true
	}
	return reconcile.Found{CustomerID: customer}, true
}

// token reads next_token: a string, else none (absent, null, another
// type).
func token(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return ""
	}
	return s
}
