package kinde

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// User is a user of the fake Kinde business: its id (the app's reference
// to it, as webhooks' data.user_id), email, and the billing customer it
// pays as ("" for none).
type User struct {
	ID         string `json:"id"`
	Email      string `json:"email,omitempty"`
	CustomerID string `json:"customer_id,omitempty"`
	// owner marks a user the fake made for a customer SetAgreements found
	// without one (see SetAgreements).
	owner bool
}

// Organization is an organisation of the fake Kinde business: its code
// (the app's reference, as webhooks' data.org_code), name, and the billing
// customer it pays as ("" for none).
type Organization struct {
	Code       string `json:"code"`
	Name       string `json:"name,omitempty"`
	CustomerID string `json:"customer_id,omitempty"`
}

// OwnerPrefix begins the id of the user the fake makes for a customer
// that SetAgreements finds without a user or organisation: kp_ then the
// customer id.
const OwnerPrefix = "kp_"

// AddUser adds u, or replaces the user of its id. A user the fake made
// for u's customer (SetAgreements) goes: the customer is u's now.
func (s *Server) AddUser(u User) {
	s.mu.Lock()
	defer s.mu.Unlock()
	u.owner = false
	s.disown(u.CustomerID)
	if i := slices.IndexFunc(s.users, func(v User) bool { return v.ID == u.ID }); i >= 0 {
		s.users[i] = u
		return
	}
	s.users = append(s.users, u)
}

// AddOrganization adds o, or replaces the organisation of its code. A
// user the fake made for o's customer (SetAgreements) goes.
func (s *Server) AddOrganization(o Organization) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.disown(o.CustomerID)
	if i := slices.IndexFunc(s.orgs, func(v Organization) bool { return v.Code == o.Code }); i >= 0 {
		s.orgs[i] = o
		return
	}
	s.orgs = append(s.orgs, o)
}

// Users returns the users, in the order Kinde lists them (added first).
func (s *Server) Users() []User {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.users)
}

// Organizations returns the organisations, in the order Kinde lists them.
func (s *Server) Organizations() []Organization {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.orgs)
}

// own gives customer a user of its own (OwnerPrefix + customer) unless a
// user or organisation pays as it: every Kinde billing customer belongs to
// one, so the users list finds it. Called with s.mu held.
func (s *Server) own(customer string) {
	if customer == "" ||
		slices.ContainsFunc(s.users, func(u User) bool { return u.CustomerID == customer }) ||
		slices.ContainsFunc(s.orgs, func(o Organization) bool { return o.CustomerID == customer }) {
		return
	}
	s.users = append(s.users, User{ID: OwnerPrefix + customer, Email: customer + "@example.com", CustomerID: customer, owner: true})
}

// disown removes the user the fake made for customer, if any. Called with
// s.mu held.
func (s *Server) disown(customer string) {
	if customer == "" {
		return
	}
	s.users = slices.DeleteFunc(s.users, func(u User) bool { return u.owner && u.CustomerID == customer })
}

// nextPage cuts n items after the position a next_token names (a page of
// page_size, default 10, at most 500), as Kinde's users and organisations
// lists page: the token is opaque to clients, and absent on the last page.
func nextPage[T any](r *http.Request, items []T) ([]T, string, error) {
	size := 10
	if v := r.URL.Query().Get("page_size"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 500 {
			return nil, "", fmt.Errorf("page_size must be 1-500, got %q", v)
		}
		size = n
	}
	start := 0
	if t := r.URL.Query().Get("next_token"); t != "" {
		b, err := base64.RawURLEncoding.DecodeString(t)
		after, ok := strings.CutPrefix(string(b), "after:")
		n, nerr := strconv.Atoi(after)
		if err != nil || !ok || nerr != nil || n < 0 {
			return nil, "", fmt.Errorf("next_token %q is not one of mine", t)
		}
		start = min(n, len(items))
	}
	end := min(start+size, len(items))
	next := ""
	if end < len(items) {
		next = base64.RawURLEncoding.EncodeToString([]byte("after:" + strconv.Itoa(end)))
	}
	return items[start:end], next, nil
}

// listUsers is GET /api/v1/users: with expand=billing each user carries
// billing.customer_id (a user without a customer carries no billing).
func (s *Server) listUsers(r *http.Request) (any, int) {
	users := s.Users()
	page, next, err := nextPage(r, users)
	if err != nil {
		return apiError("INVALID_PAGING", err.Error()), http.StatusBadRequest
	}
	billing := slices.Contains(strings.Split(r.URL.Query().Get("expand"), ","), "billing")
	out := make([]map[string]any, 0, len(page))
	for _, u := range page {
		m := map[string]any{"id": u.ID, "email": u.Email, "is_suspended": false}
		if billing && u.CustomerID != "" {
			m["billing"] = map[string]any{"customer_id": u.CustomerID}
		}
		out = append(out, m)
	}
	body := map[string]any{"code": "OK", "message": "Success", "users": out}
	if next != "" {
		body["next_token"] = next
	}
	return body, http.StatusOK
}

// listOrganizations is GET /api/v1/organizations: codes and names, no
// billing (Kinde's list carries none).
func (s *Server) listOrganizations(r *http.Request) (any, int) {
	page, next, err := nextPage(r, s.Organizations())
	if err != nil {
		return apiError("INVALID_PAGING", err.Error()), http.StatusBadRequest
	}
	out := make([]map[string]any, 0, len(page))
	for _, o := range page {
		out = append(out, map[string]any{"code": o.Code, "name": o.Name, "is_default": false})
	}
	body := map[string]any{"code": "OK", "message": "Success", "organizations": out}
	if next != "" {
		body["next_token"] = next
	}
	return body, http.StatusOK
}

// getOrganization is GET /api/v1/organization?code=…: with expand=billing
// an organisation with a customer carries billing.billing_customer_id and
// its agreements.
func (s *Server) getOrganization(r *http.Request) (any, int) {
	code := r.URL.Query().Get("code")
	orgs := s.Organizations()
	i := slices.IndexFunc(orgs, func(o Organization) bool { return o.Code == code })
	if i < 0 {
		return apiError("ORGANIZATION_INVALID", "organization not found"), http.StatusNotFound
	}
	o := orgs[i]
	body := map[string]any{"code": o.Code, "name": o.Name, "is_suspended": false}
	if o.CustomerID != "" && slices.Contains(strings.Split(r.URL.Query().Get("expand"), ","), "billing") {
		agreements := []map[string]string{}
		for _, a := range s.read(o.CustomerID) {
			agreements = append(agreements, map[string]string{"plan_code": a.PlanCode, "agreement_id": a.ID})
		}
		body["billing"] = map[string]any{"billing_customer_id": o.CustomerID, "agreements": agreements}
	}
	return body, http.StatusOK
}

func (s *Server) controlAddUser(w http.ResponseWriter, r *http.Request) {
	var u User
	if err := decode(r, &u); err != nil || u.ID == "" {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "want {\"id\", \"email\", \"customer_id\"}"})
		return
	}
	s.AddUser(u)
	writeJSON(w, http.StatusOK, u)
}

func (s *Server) controlAddOrganization(w http.ResponseWriter, r *http.Request) {
	var o Organization
	if err := decode(r, &o); err != nil || o.Code == "" {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "want {\"code\", \"name\", \"customer_id\"}"})
		return
	}
	s.AddOrganization(o)
	writeJSON(w, http.StatusOK, o)
}
