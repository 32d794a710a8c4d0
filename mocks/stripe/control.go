package stripe

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"time"

	"github.com/billsync/billsync/mocks/fault"
)

// The control endpoints under /_mock/ need no API key and speak JSON:
//
//	GET  /_mock/faults                     current Faults
//	POST /_mock/faults                     replace Faults: {"duplicate_copies":2,"reorder_delay":"2s","drop_rate":0.1,…}
//	GET  /_mock/limits                     current Limits
//	POST /_mock/limits                     replace Limits: {"documented":true,"operations":{"GET /v1/events":5},…}
//	GET  /_mock/usage[?key=sk_…]           requests by operation, every key's or one key's: Usage
//	GET  /_mock/usage?account=acct_…       the requests made in one connected account (platform:
//	                                       the platform's own, without Stripe-Account)
//	POST /_mock/usage/reset                start counting again
//	GET  /_mock/clock                      {"now":…}
//	POST /_mock/clock/advance              {"seconds":N}: advance the clock, renewing subscriptions
//	GET  /_mock/deliveries                 every webhook attempt so far
//	GET  /_mock/deliveries/settled         {"delivered":N,"gave_up":N,"dropped":N}
//	POST /_mock/subscriptions/{id}/status  {"status":"past_due"}: force a status, emitting its event
//	POST /_mock/customers/{id}/card        {"fails":true}: the customer's payments are declined (or not)
//	                                       (both act in the connected account a Stripe-Account header names)
//	POST /_mock/dunning                    {"retries":["72h","120h"],"final":"unpaid"}: failed-payment setting
//	POST /_mock/event_destinations         {"url":…,"types":["v1.customer.subscription.updated"],"connect":false}:
//	                                       a thin-event destination (connect: of the connected
//	                                       accounts' events); answers its secret
//	GET  /_mock/accounts                   the connected accounts: [{"id":…,"authorized":true,"livemode":false}]
//	POST /_mock/accounts                   {"id":"acct_…","type":"standard","email":…,"metadata":{},"livemode":false,
//	                                       "platform_prices":true}: connect an account (every field optional)
//	POST /_mock/accounts/{id}/deauthorize  the account revokes the platform's access
//	POST /_mock/accounts/{id}/authorize    … and grants it again
//	POST /_mock/accounts/{id}/livemode     {"livemode":true}: the livemode of its events from now on
//	POST /_mock/accounts/{id}/customers    {"id":"cus_…","email":…,"metadata":{}}: a customer with that id
//	GET  /_mock/accounts/{id}/faults       the faults aimed at the account
//	POST /_mock/accounts/{id}/faults       replace them (the /_mock/faults shape; {} removes them)
//	POST /_mock/events/list_lag            {"seconds":N}: events appear in GET /v1/events N s after creation
//	POST /_mock/webhook_endpoints/{id}/disable
//	                                       Stripe disables the endpoint (as after days of failures)
//	POST /_mock/reset                      forget customers, subscriptions, invoices, events,
//	                                       deliveries and usage (every account's); prices, connected
//	                                       accounts, webhook endpoints, faults and limits stay
func (s *Server) controlRoutes() {
	m := s.control
	m.HandleFunc("POST /_mock/events/list_lag", func(w http.ResponseWriter, r *http.Request) {
		lag, err := decodeSeconds(r)
		if err != nil {
			controlError(w, err)
			return
		}
		s.SetEventListLag(lag)
		controlJSON(w, http.StatusOK, map[string]float64{"seconds": lag.Seconds()})
	})
	m.HandleFunc("POST /_mock/webhook_endpoints/{id}/disable", func(w http.ResponseWriter, r *http.Request) {
		if !s.DisableWebhookEndpoint(r.PathValue("id")) {
			controlJSON(w, http.StatusNotFound, map[string]string{"error": "no such webhook endpoint"})
			return
		}
		controlJSON(w, http.StatusOK, map[string]any{"id": r.PathValue("id"), "status": "disabled"})
	})
	m.HandleFunc("GET /_mock/faults", func(w http.ResponseWriter, r *http.Request) {
		controlJSON(w, http.StatusOK, s.Faults())
	})
	m.HandleFunc("POST /_mock/faults", func(w http.ResponseWriter, r *http.Request) {
		var f Faults
		if err := decodeBody(r, &f); err != nil {
			controlError(w, err)
			return
		}
		if err := f.Validate(); err != nil {
			controlError(w, err)
			return
		}
		s.SetFaults(f)
		controlJSON(w, http.StatusOK, f)
	})
	m.HandleFunc("GET /_mock/limits", func(w http.ResponseWriter, r *http.Request) {
		controlJSON(w, http.StatusOK, s.Limits())
	})
	m.HandleFunc("POST /_mock/limits", func(w http.ResponseWriter, r *http.Request) {
		var l Limits
		if err := decodeBody(r, &l); err != nil {
			controlError(w, err)
			return
		}
		if err := s.SetLimits(l); err != nil {
			controlError(w, err)
			return
		}
		controlJSON(w, http.StatusOK, s.Limits())
	})
	m.HandleFunc("GET /_mock/usage", func(w http.ResponseWriter, r *http.Request) {
		if account := r.URL.Query().Get("account"); account != "" {
			if account == "platform" {
				account = ""
			}
			controlJSON(w, http.StatusOK, s.Account(account).Usage())
			return
		}
		if key := r.URL.Query().Get("key"); key != "" {
			controlJSON(w, http.StatusOK, s.KeyUsage(key))
			return
		}
		controlJSON(w, http.StatusOK, s.Usage())
	})
	m.HandleFunc("POST /_mock/usage/reset", func(w http.ResponseWriter, r *http.Request) {
		s.ResetUsage()
		controlJSON(w, http.StatusOK, s.Usage())
	})
	m.HandleFunc("GET /_mock/clock", func(w http.ResponseWriter, r *http.Request) {
		controlJSON(w, http.StatusOK, clockJSON(s.clock.Now()))
	})
	m.HandleFunc("POST /_mock/clock/advance", func(w http.ResponseWriter, r *http.Request) {
		d, err := decodeSeconds(r)
		if err != nil {
			controlError(w, err)
			return
		}
		controlJSON(w, http.StatusOK, clockJSON(s.clock.Advance(d)))
	})
	m.HandleFunc("GET /_mock/deliveries", func(w http.ResponseWriter, r *http.Request) {
		controlJSON(w, http.StatusOK, map[string]any{"deliveries": s.Deliveries()})
	})
	m.HandleFunc("POST /_mock/subscriptions/{id}/status", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Status string `json:"status"`
		}
		if err := decodeBody(r, &req); err != nil {
			controlError(w, err)
			return
		}
		if err := s.Account(r.Header.Get("Stripe-Account")).SetSubscriptionStatus(r.PathValue("id"), req.Status); err != nil {
			controlError(w, err)
			return
		}
		controlJSON(w, http.StatusOK, map[string]string{"id": r.PathValue("id"), "status": req.Status})
	})
	m.HandleFunc("GET /_mock/deliveries/settled", func(w http.ResponseWriter, r *http.Request) {
		controlJSON(w, http.StatusOK, s.Settled())
	})
	m.HandleFunc("POST /_mock/customers/{id}/card", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Fails bool `json:"fails"`
		}
		if err := decodeBody(r, &req); err != nil {
			controlError(w, err)
			return
		}
		if err := s.Account(r.Header.Get("Stripe-Account")).SetCardFails(r.PathValue("id"), req.Fails); err != nil {
			controlError(w, err)
			return
		}
		controlJSON(w, http.StatusOK, map[string]any{"id": r.PathValue("id"), "fails": req.Fails})
	})
	m.HandleFunc("POST /_mock/dunning", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Retries []fault.Duration `json:"retries"`
			Final   string           `json:"final"`
		}
		if err := decodeBody(r, &req); err != nil {
			controlError(w, err)
			return
		}
		d := Dunning{Final: req.Final, Retries: []time.Duration{}}
		for _, r := range req.Retries {
			d.Retries = append(d.Retries, time.Duration(r))
		}
		if err := s.SetDunning(d); err != nil {
			controlError(w, err)
			return
		}
		controlJSON(w, http.StatusOK, req)
	})
	m.HandleFunc("POST /_mock/event_destinations", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			URL     string   `json:"url"`
			Types   []string `json:"types"`
			Connect bool     `json:"connect"`
		}
		if err := decodeBody(r, &req); err != nil {
			controlError(w, err)
			return
		}
		if u, err := url.Parse(req.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			controlError(w, errors.New("url must be an http(s) URL"))
			return
		}
		controlJSON(w, http.StatusOK, map[string]string{"url": req.URL, "secret": s.addDestination(req.URL, req.Connect, req.Types)})
	})
	s.accountRoutes()
	m.HandleFunc("POST /_mock/reset", func(w http.ResponseWriter, r *http.Request) {
		s.Reset()
		controlJSON(w, http.StatusOK, map[string]bool{"reset": true})
	})
}

// Reset forgets customers, subscriptions, invoices, events, idempotency keys,
// delivery records and usage, the platform's and every connected
// account's. Prices, connected accounts, webhook endpoints, faults and
// limits stay.
func (s *Server) Reset() {
	s.ResetUsage()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sp := range s.spaces() {
		sp.reset()
	}
	s.idempotent = map[string]savedResponse{}
	s.deliveries = nil
	s.outcomes = map[deliveryKey]string{}
}

func clockJSON(now time.Time) map[string]any {
	return map[string]any{"now": now.Unix(), "time": now.UTC().Format(time.RFC3339)}
}

func decodeBody(r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, 1<<20))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

func controlJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.MarshalIndent(v, "", "  ")
	writeJSON(w, status, b)
}

func controlError(w http.ResponseWriter, err error) {
	var se *stripeError
	if errors.As(err, &se) {
		se.write(w)
		return
	}
	controlJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]string{"message": err.Error()}})
}

// decodeSeconds reads a control body {"seconds":N}: a duration, not
// negative.
func decodeSeconds(r *http.Request) (time.Duration, error) {
	var req struct {
		Seconds float64 `json:"seconds"`
	}
	if err := decodeBody(r, &req); err != nil {
		return 0, err
	}
	if req.Seconds < 0 {
		return 0, errors.New("seconds must not be negative")
	}
	return time.Duration(req.Seconds * float64(time.Second)), nil
}

// accountRoutes are the control endpoints of connected accounts (see
// controlRoutes).
func (s *Server) accountRoutes() {
	m := s.control
	m.HandleFunc("GET /_mock/accounts", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		states := make([]map[string]any, 0, len(s.accounts.rows))
		for _, a := range s.accounts.rows {
			states = append(states, map[string]any{"id": a.ID, "authorized": a.Authorized, "livemode": a.Livemode})
		}
		s.mu.Unlock()
		controlJSON(w, http.StatusOK, map[string]any{"accounts": states})
	})
	m.HandleFunc("POST /_mock/accounts", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			ID             string            `json:"id"`
			Type           string            `json:"type"`
			Email          string            `json:"email"`
			Metadata       map[string]string `json:"metadata"`
			Livemode       bool              `json:"livemode"`
			PlatformPrices bool              `json:"platform_prices"`
		}
		if err := decodeBody(r, &req); err != nil {
			controlError(w, err)
			return
		}
		a, err := s.AddAccount(AccountOptions{ID: req.ID, Type: req.Type, Email: req.Email, Metadata: req.Metadata,
			Livemode: req.Livemode, PlatformPrices: req.PlatformPrices})
		if err != nil {
			controlError(w, err)
			return
		}
		controlJSON(w, http.StatusOK, map[string]any{"id": a.ID(), "authorized": true, "livemode": req.Livemode})
	})
	for verb, do := range map[string]func(string) error{"deauthorize": s.DeauthorizeAccount, "authorize": s.AuthorizeAccount} {
		m.HandleFunc("POST /_mock/accounts/{id}/"+verb, func(w http.ResponseWriter, r *http.Request) {
			if err := do(r.PathValue("id")); err != nil {
				controlJSON(w, http.StatusNotFound, map[string]any{"error": map[string]string{"message": err.Error()}})
				return
			}
			controlJSON(w, http.StatusOK, map[string]any{"id": r.PathValue("id"), "authorized": verb == "authorize"})
		})
	}
	m.HandleFunc("POST /_mock/accounts/{id}/livemode", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Livemode bool `json:"livemode"`
		}
		if err := decodeBody(r, &req); err != nil {
			controlError(w, err)
			return
		}
		if err := s.Account(r.PathValue("id")).SetLivemode(req.Livemode); err != nil {
			controlError(w, err)
			return
		}
		controlJSON(w, http.StatusOK, map[string]any{"id": r.PathValue("id"), "livemode": req.Livemode})
	})
	m.HandleFunc("POST /_mock/accounts/{id}/customers", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			ID       string            `json:"id"`
			Email    string            `json:"email"`
			Metadata map[string]string `json:"metadata"`
		}
		if err := decodeBody(r, &req); err != nil {
			controlError(w, err)
			return
		}
		if err := s.Account(r.PathValue("id")).AddCustomer(req.ID, req.Email, req.Metadata); err != nil {
			controlError(w, err)
			return
		}
		controlJSON(w, http.StatusOK, map[string]string{"account": r.PathValue("id"), "id": req.ID})
	})
	m.HandleFunc("GET /_mock/accounts/{id}/faults", func(w http.ResponseWriter, r *http.Request) {
		controlJSON(w, http.StatusOK, s.Account(r.PathValue("id")).Faults())
	})
	m.HandleFunc("POST /_mock/accounts/{id}/faults", func(w http.ResponseWriter, r *http.Request) {
		var f Faults
		if err := decodeBody(r, &f); err != nil {
			controlError(w, err)
			return
		}
		a := s.Account(r.PathValue("id"))
		if err := a.SetFaults(f); err != nil {
			controlError(w, err)
			return
		}
		controlJSON(w, http.StatusOK, a.Faults())
	})
}
