package kinde

import (
	"cmp"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"
)

// Agreement is a customer's billing agreement (a plan subscription) as the
// fake holds it.
type Agreement struct {
	ID             string     `json:"id"`
	PlanCode       string     `json:"plan_code"`
	BillingGroupID string     `json:"billing_group_id,omitempty"`
	CreatedOn      time.Time  `json:"created_on"`
	ExpiresOn      *time.Time `json:"expires_on"` // nil: open-ended
	// PeriodStart and PeriodEnd are the current billing period, when set.
	PeriodStart *time.Time `json:"current_period_start,omitempty"`
	PeriodEnd   *time.Time `json:"current_period_end,omitempty"`
	// Entitlements are the features the agreement's plan grants; none
	// means one "units" feature without a limit (as before they could be
	// set).
	Entitlements []Entitlement `json:"entitlements,omitempty"`
}

// Entitlement is one feature an agreement grants, as Kinde's billing
// entitlements list it.
type Entitlement struct {
	FeatureCode string `json:"feature_code"`
	LimitMax    *int64 `json:"entitlement_limit_max"` // nil: no limit
}

// entitlementsOf returns what the agreement grants.
func entitlementsOf(a Agreement) []Entitlement {
	if len(a.Entitlements) == 0 {
		return []Entitlement{{FeatureCode: "units"}}
	}
	return a.Entitlements
}

// entitlementID is the id Kinde's list gives an agreement's entitlement.
func entitlementID(a Agreement, e Entitlement) string {
	return "entitlement_" + a.ID + "_" + e.FeatureCode
}

// page cuts items (ordered by id) after starting_after, page_size of them
// (default 10, at most 500), as Kinde's list endpoints page.
func page[T any](r *http.Request, items []T, id func(T) string) ([]T, bool, error) {
	size := 10
	if v := r.URL.Query().Get("page_size"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 500 {
			return nil, false, fmt.Errorf("page_size must be 1-500, got %q", v)
		}
		size = n
	}
	start := 0
	if after := r.URL.Query().Get("starting_after"); after != "" {
		i := slices.IndexFunc(items, func(v T) bool { return id(v) == after })
		if i < 0 {
			return nil, false, fmt.Errorf("starting_after %q is not in the list", after)
		}
		start = i + 1
	}
	end := min(start+size, len(items))
	return items[start:end], end < len(items), nil
}

func (s *Server) listAgreements(r *http.Request) (any, int) {
	customer := r.URL.Query().Get("customer_id")
	if customer == "" {
		return apiError("CUSTOMER_ID_REQUIRED", "customer_id is required"), http.StatusBadRequest
	}
	all := s.read(customer)
	items, more, err := page(r, all, func(a Agreement) string { return a.ID })
	if err != nil {
		return apiError("INVALID_PAGING", err.Error()), http.StatusBadRequest
	}
	out := make([]map[string]any, 0, len(items))
	for _, a := range items {
		out = append(out, agreementJSON(a))
	}
	return map[string]any{"code": "OK", "message": "Success", "has_more": more, "agreements": out}, http.StatusOK
}

func agreementJSON(a Agreement) map[string]any {
	m := map[string]any{"id": a.ID, "plan_code": a.PlanCode, "billing_group_id": a.BillingGroupID,
		"created_on": a.CreatedOn.Format(time.RFC3339), "expires_on": nil,
		"entitlements": []map[string]string{}}
	for _, e := range entitlementsOf(a) {
		m["entitlements"] = append(m["entitlements"].([]map[string]string), map[string]string{"feature_code": e.FeatureCode, "entitlement_id": entitlementID(a, e)})
	}
	if a.ExpiresOn != nil {
		m["expires_on"] = a.ExpiresOn.Format(time.RFC3339)
	}
	if a.PeriodStart != nil && a.PeriodEnd != nil {
		m["current_period_start"], m["current_period_end"] = a.PeriodStart.Format(time.RFC3339), a.PeriodEnd.Format(time.RFC3339)
	}
	return m
}

func (s *Server) listEntitlements(r *http.Request) (any, int) {
	customer := r.URL.Query().Get("customer_id")
	if customer == "" {
		return apiError("CUSTOMER_ID_REQUIRED", "customer_id is required"), http.StatusBadRequest
	}
	now := s.opts.Now()
	agreements := s.read(customer)
	plans := []map[string]string{}
	all := []map[string]any{}
	for _, a := range agreements {
		if a.ExpiresOn != nil && !a.ExpiresOn.After(now) {
			continue
		}
		plans = append(plans, map[string]string{"code": a.PlanCode, "subscribed_on": a.CreatedOn.Format(time.RFC3339)})
		for _, e := range entitlementsOf(a) {
			all = append(all, map[string]any{"id": entitlementID(a, e), "feature_code": e.FeatureCode, "feature_name": e.FeatureCode,
				"price_name": a.PlanCode, "unit_amount": nil, "fixed_charge": nil,
				"entitlement_limit_max": e.LimitMax, "entitlement_limit_min": nil})
		}
	}
	items, more, err := page(r, all, func(e map[string]any) string { return e["id"].(string) })
	if err != nil {
		return apiError("INVALID_PAGING", err.Error()), http.StatusBadRequest
	}
	return map[string]any{"code": "OK", "message": "Success", "has_more": more, "entitlements": items, "plans": plans}, http.StatusOK
}

func apiError(code, msg string) map[string]any {
	return map[string]any{"errors": []map[string]string{{"code": code, "message": msg}}}
}

// SetAgreements replaces a customer's agreements; missing ids and creation
// times are filled in. It returns them as stored. A customer no user or
// organisation pays as gets a user of its own (OwnerPrefix + customer,
// see Users), as every Kinde billing customer belongs to one, so that the
// users list finds it; AddUser or AddOrganization for the customer
// replaces that user. The fake's webhooks still name no user unless the
// Event's Data does.
func (s *Server) SetAgreements(customer string, agreements []Agreement) []Agreement {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.opts.Now().UTC().Truncate(time.Second)
	stored := make([]Agreement, len(agreements))
	for i, a := range agreements {
		if a.ID == "" {
			s.nextID++
			a.ID = fmt.Sprintf("agreement_%06d", s.nextID)
		}
		if a.CreatedOn.IsZero() {
			a.CreatedOn = now
		}
		stored[i] = a
	}
	slices.SortFunc(stored, func(a, b Agreement) int { return cmp.Compare(a.ID, b.ID) })
	s.changed(customer)
	s.agreements[customer] = stored
	s.own(customer)
	return slices.Clone(stored)
}

// Agreements returns a customer's agreements.
func (s *Server) Agreements(customer string) []Agreement {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.agreements[customer])
}

// agreementsChange is one write to a customer's agreements: when it
// happened (wall clock) and what they were before (held: whether there
// were any).
type agreementsChange struct {
	at     time.Time
	before []Agreement
	held   bool
}

// staleWindow is how long changes are remembered for Faults.StaleReads.
const staleWindow = 10 * time.Minute

// changed records that customer's agreements are about to change. Called
// with s.mu held. Only while Faults.StaleReads is on, as the fake Stripe:
// changes made before it was turned on are not seen stale.
func (s *Server) changed(customer string) {
	if s.faults.Get().StaleReads <= 0 {
		return
	}
	now := time.Now()
	before, held := s.agreements[customer]
	h := slices.DeleteFunc(s.history[customer], func(c agreementsChange) bool { return now.Sub(c.at) > staleWindow })
	s.history[customer] = append(h, agreementsChange{at: now, before: before, held: held})
}

// read returns customer's agreements as the API reads them: with
// Faults.StaleReads, as they were that long ago (by the wall clock), as a
// lagging read replica would; a customer whose agreements were first set
// within the window has none yet.
func (s *Server) read(customer string) []Agreement {
	s.mu.Lock()
	defer s.mu.Unlock()
	if stale := s.faults.Get().StaleReads; stale > 0 {
		cutoff := time.Now().Add(-stale)
		for _, c := range s.history[customer] { // the state at cutoff is what the first later change found
			if c.at.After(cutoff) {
				if !c.held {
					return nil
				}
				return slices.Clone(c.before)
			}
		}
	}
	return slices.Clone(s.agreements[customer])
}
