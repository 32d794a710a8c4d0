package stripe

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strings"

	"github.com/billsync/billsync/mocks/fault"
)

// Stripe Connect. The platform (the fake's own account, what a request
// without a Stripe-Account header acts in) has connected accounts, each
// holding its own customers, prices, subscriptions, invoices,
// entitlements and events, apart from the platform's: ids may be the same
// in two accounts. A request with the header `Stripe-Account: acct_…`
// (API v2: Stripe-Context) reads and writes only that account's objects;
// one naming an account that does not exist or no longer authorises the
// platform is Stripe's 403 account_invalid. Webhook endpoints belong to
// the platform: a Connect endpoint (connect=true) is sent the events of
// every authorised connected account, each with top-level "account"
// (a thin event, "context"), and a platform endpoint only the platform's.

// space is one Stripe account's objects: the platform's, or a connected
// account's.
type space struct {
	acct      *account            // nil for the platform
	history   map[string][]change // recent changes per object id, for StaleReads
	customers table[*customer]
	prices    table[*price]
	subs      table[*subscription]
	// subsByCustomer holds each customer's subscriptions in creation
	// order (a subscription never changes customer).
	subsByCustomer map[string][]*subscription
	invoices       table[*invoice]
	events         table[*event]
	// features and productFeatures are Stripe Entitlements; entitled is
	// each customer's active entitlement ids as last announced by
	// entitlements.active_entitlement_summary.updated.
	features        table[*feature]
	productFeatures table[*productFeature]
	products        table[*product] // products whose metadata was set (product.go)
	entitled        map[string][]string
}

func newSpace(acct *account) *space {
	return &space{acct: acct, history: map[string][]change{}, subsByCustomer: map[string][]*subscription{}}
}

// accountID is the connected account the space is, "" for the platform.
func (sp *space) accountID() string {
	if sp.acct == nil {
		return ""
	}
	return sp.acct.ID
}

// reset forgets customers, subscriptions, invoices and events (Reset).
func (sp *space) reset() {
	sp.customers = table[*customer]{}
	sp.subs = table[*subscription]{}
	sp.subsByCustomer = map[string][]*subscription{}
	sp.invoices = table[*invoice]{}
	sp.events = table[*event]{}
	sp.entitled = nil
	sp.history = map[string][]change{}
}

// spaces returns the platform's space, then each connected account's in
// creation order. Called with s.mu held.
func (s *Server) spaces() []*space {
	out := []*space{s.platform}
	for _, a := range s.accounts.rows {
		out = append(out, a.space)
	}
	return out
}

// eachSpace runs fn acting in every account in turn (spaces), then acts
// in the platform again. Called with s.mu held.
func (s *Server) eachSpace(fn func()) {
	defer func() { s.space = s.platform }()
	for _, sp := range s.spaces() {
		s.space = sp
		fn()
	}
}

// account is a connected account.
type account struct {
	record
	ID       string
	Type     string // standard | express | custom
	Email    string
	Country  string
	Created  int64
	Metadata map[string]string
	// Authorized: the account lets the platform in. A deauthorised
	// account keeps its objects and events; requests in it are refused
	// and its events are sent to no endpoint until it is authorised again.
	Authorized bool
	// Livemode is the livemode its events are made with from now on: an
	// account linked in live mode sends a live Connect endpoint its
	// test-mode events too.
	Livemode bool
	space    *space
}

func (a *account) id() string { return a.ID }

func renderAccount(a *account) obj {
	controller := obj{"type": "account"} // a standard account controls itself
	if a.Type != "standard" {
		controller = obj{"type": "application", "is_controller": true}
	}
	return obj{
		"id": a.ID, "object": "account", "type": a.Type, "business_profile": nil, "business_type": nil,
		"capabilities": obj{}, "charges_enabled": true, "payouts_enabled": true, "details_submitted": true,
		"controller": controller, "country": a.Country, "created": a.Created, "default_currency": "usd",
		"email": nullable(a.Email), "metadata": metadataOf(a.Metadata), "settings": nil,
	}
}

// application is the data.object of account.application.authorized and
// .deauthorized: the platform's Connect application.
type application struct{ ID string }

func renderApplication(a *application) obj {
	return obj{"id": a.ID, "object": "application", "name": "stripemock platform"}
}

// The types of the events that announce a connected account's
// authorisation of the platform.
const (
	EventAccountAuthorized   = "account.application.authorized"
	EventAccountDeauthorized = "account.application.deauthorized"
)

// accountInvalid is Stripe's answer to a request in an account the key
// may not act in: it does not exist, or no longer authorises the platform.
func accountInvalid(key, id string) *stripeError {
	return &stripeError{status: http.StatusForbidden, Type: typeInvalidRequest, Code: "account_invalid",
		Message: fmt.Sprintf("The provided key '%s' does not have access to account '%s' (or that account does not exist). Application access may have been revoked.", maskKey(key), id)}
}

// requestAccount is the connected account a request acts in: its
// Stripe-Account header, or on API v2 its Stripe-Context; "" for the
// platform.
func requestAccount(r *http.Request) string {
	if a := r.Header.Get("Stripe-Account"); a != "" {
		return strings.TrimSpace(a)
	}
	if strings.HasPrefix(r.URL.Path, "/v2/") {
		return strings.TrimSpace(r.Header.Get("Stripe-Context"))
	}
	return ""
}

// AccountOptions describes a connected account for AddAccount.
type AccountOptions struct {
	// ID is the account's id (acct_…); "" makes a new one. Choosing it
	// lets a test name accounts, and two fakes hold the same.
	ID string
	// Type is standard (the default), express or custom.
	Type     string
	Email    string
	Metadata map[string]string
	// Livemode makes its events livemode: true (see Account.SetLivemode).
	Livemode bool
	// PlatformPrices starts it with a copy of each of the platform's
	// prices, under the same ids (a real account starts with none).
	PlatformPrices bool
}

// AddAccount connects a new account to the platform, authorised at once
// (account.application.authorized is sent to the Connect endpoints), and
// returns its helpers. It refuses an id already taken or not acct_….
func (s *Server) AddAccount(o AccountOptions) (Account, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, err := s.addAccount(nil, o)
	if err != nil {
		return Account{}, err
	}
	return Account{s: s, id: a.ID}, nil
}

func (s *Server) addAccount(c *call, o AccountOptions) (*account, error) {
	switch {
	case o.ID == "":
		o.ID = newID("acct")
	case !strings.HasPrefix(o.ID, "acct_"):
		return nil, fmt.Errorf("account id %q: want acct_…", o.ID)
	}
	if _, taken := s.accounts.get(o.ID); taken {
		return nil, fmt.Errorf("account %s exists already", o.ID)
	}
	switch o.Type {
	case "":
		o.Type = "standard"
	case "standard", "express", "custom":
	default:
		return nil, invalidParam("type", "Invalid type: must be one of custom, express, or standard")
	}
	a := &account{ID: o.ID, Type: o.Type, Email: o.Email, Country: "US", Created: s.clock.Now().Unix(),
		Metadata: maps.Clone(o.Metadata), Livemode: o.Livemode, Authorized: true}
	a.space = newSpace(a)
	if o.PlatformPrices {
		for _, p := range s.platform.prices.rows {
			cp := *p
			cp.record = record{}
			a.space.prices.put(&cp)
		}
	}
	s.accounts.put(a)
	s.announce(c, a, EventAccountAuthorized)
	return a, nil
}

// announce emits an authorisation event of a in its space: event.account
// is a, data.object the platform's application.
func (s *Server) announce(c *call, a *account, typ string) {
	defer func(prev *space) { s.space = prev }(s.space)
	s.space = a.space
	s.emit(c, s.clock.Now().Unix(), typ, &application{ID: s.application}, nil)
}

// DeauthorizeAccount makes the account revoke the platform's access, as
// when its owner disconnects the platform: account.application.deauthorized
// is sent to the Connect endpoints; from then on requests in the account
// are refused (403 account_invalid), it is left out of GET /v1/accounts,
// and its events reach no endpoint. Its objects are kept.
func (s *Server) DeauthorizeAccount(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.accounts.get(id)
	if !ok {
		return fmt.Errorf("no such account: %s", id)
	}
	if a.Authorized {
		s.announce(nil, a, EventAccountDeauthorized)
		a.Authorized = false
	}
	return nil
}

// AuthorizeAccount authorises the platform again (after
// DeauthorizeAccount): account.application.authorized is sent, and the
// account's objects and events, kept meanwhile, are reachable again.
func (s *Server) AuthorizeAccount(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.accounts.get(id)
	if !ok {
		return fmt.Errorf("no such account: %s", id)
	}
	if !a.Authorized {
		a.Authorized = true
		s.announce(nil, a, EventAccountAuthorized)
	}
	return nil
}

// AccountIDs returns the connected accounts' ids, oldest first, whether
// they authorise the platform or not.
func (s *Server) AccountIDs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]string, 0, len(s.accounts.rows))
	for _, a := range s.accounts.rows {
		ids = append(ids, a.ID)
	}
	return ids
}

// createAccount is POST /v1/accounts: the account is connected and
// authorised at once. type defaults to standard (Stripe asks for type or
// controller; the fake is lenient).
func (s *Server) createAccount(c *call) (obj, error) {
	f := c.form
	if err := f.allow("type", "email", "country", "default_currency", "metadata", "business_type",
		"business_profile", "capabilities", "controller", "settings", "tos_acceptance"); err != nil {
		return nil, err
	}
	o := AccountOptions{Metadata: f.hash("metadata")}
	o.Type, _ = f.str("type")
	o.Email, _ = f.str("email")
	a, err := s.addAccount(c, o)
	if err != nil {
		return nil, err
	}
	return renderAccount(a), nil
}

// listAccounts is GET /v1/accounts: the accounts that authorise the
// platform, newest first.
func (s *Server) listAccounts(c *call) (obj, error) {
	if err := c.form.allow(append(listParams, "created")...); err != nil {
		return nil, err
	}
	inRange, err := createdFilter(c.form)
	if err != nil {
		return nil, err
	}
	return listTable(c, &s.accounts, func(a *account) bool { return a.Authorized && inRange(a.Created) }, "account", renderAccount)
}

// getAccount is GET /v1/accounts/{id}; an account that does not
// authorise the platform is refused as a request in it is.
func (s *Server) getAccount(c *call) (obj, error) {
	if err := c.form.allow(); err != nil {
		return nil, err
	}
	id := c.r.PathValue("id")
	a, ok := s.accounts.get(id)
	if !ok || !a.Authorized {
		return nil, accountInvalid(c.key, id)
	}
	return renderAccount(a), nil
}

// Account is the Go helpers of one account's objects: a connected
// account's (Server.Account) or, for the id "", the platform's.
type Account struct {
	s  *Server
	id string
}

// Account returns the helpers of the connected account id ("" for the
// platform). The account need not exist yet; its helpers fail until it
// does.
func (s *Server) Account(id string) Account { return Account{s: s, id: id} }

// ID is the account's id ("" for the platform).
func (a Account) ID() string { return a.id }

// in runs fn with s.mu held, acting in the account ("" for the
// platform), authorised or not.
func (s *Server) in(accountID string, fn func() error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if accountID == "" {
		return fn()
	}
	a, ok := s.accounts.get(accountID)
	if !ok {
		return fmt.Errorf("no such account: %s", accountID)
	}
	s.space = a.space
	defer func() { s.space = s.platform }()
	return fn()
}

// AddCustomer creates a customer with a chosen id in the account, as
// POST /v1/customers would (customer.created is emitted), so two accounts
// can hold the same customer id. It refuses an id the account holds.
func (a Account) AddCustomer(id, email string, metadata map[string]string) error {
	if !strings.HasPrefix(id, "cus_") {
		return fmt.Errorf("customer id %q: want cus_…", id)
	}
	return a.s.in(a.id, func() error {
		if _, taken := a.s.customers.get(id); taken {
			return fmt.Errorf("customer %s exists already", id)
		}
		a.s.putCustomer(nil, &customer{ID: id, Email: email, Metadata: maps.Clone(metadata)})
		return nil
	})
}

// AddCustomer is Account.AddCustomer in the platform.
func (s *Server) AddCustomer(id, email string, metadata map[string]string) error {
	return s.Account("").AddCustomer(id, email, metadata)
}

// AddPrice is Server.AddPrice in the account.
func (a Account) AddPrice(id, lookupKey string, unitAmount int64) error {
	return a.s.in(a.id, func() error {
		a.s.addPrice(id, lookupKey, unitAmount)
		return nil
	})
}

// SetCardFails is Server.SetCardFails in the account.
func (a Account) SetCardFails(customerID string, fails bool) error {
	return a.s.in(a.id, func() error { return a.s.setCardFails(customerID, fails) })
}

// SetSubscriptionStatus is Server.SetSubscriptionStatus in the account.
func (a Account) SetSubscriptionStatus(id, status string) error {
	return a.s.in(a.id, func() error { return a.s.setSubscriptionStatus(id, status) })
}

// Entitled is Server.Entitled in the account (nil for an unknown account).
func (a Account) Entitled(customerID string) []string {
	var keys []string
	_ = a.s.in(a.id, func() error {
		keys = a.s.entitledKeys(customerID)
		return nil
	})
	return keys
}

// SetLivemode sets the livemode of the events the account makes from now
// on: a test can send a live deployment the test-mode events of an
// account linked in live mode, as a production Connect endpoint receives
// them. Only the event's livemode changes, not its object's.
func (a Account) SetLivemode(live bool) error {
	if a.id == "" {
		return errors.New("the platform's events are test mode")
	}
	return a.s.in(a.id, func() error {
		a.s.acct.Livemode = live // the account acted in
		return nil
	})
}

// Usage is the API requests made in the account (with its Stripe-Account
// header; for the platform, without one), every key's.
func (a Account) Usage() Usage { return a.s.gate.accountUsage(a.id) }

// SetFaults aims faults at the account alone, beside the server's
// (SetFaults): its requests also fail, wait or read stale by these knobs
// (TargetKey applies), and its events' deliveries are copied, reordered or
// dropped by these instead of the server's. The zero Faults removes them.
func (a Account) SetFaults(f Faults) error {
	if a.id == "" {
		return errors.New("the platform's faults are the server's: SetFaults")
	}
	if err := f.Validate(); err != nil {
		return err
	}
	if err := a.s.in(a.id, func() error { return nil }); err != nil {
		return err
	}
	a.s.faultsMu.Lock()
	defer a.s.faultsMu.Unlock()
	if f == (Faults{}) {
		delete(a.s.accountFaults, a.id)
		return nil
	}
	st := a.s.accountFaults[a.id]
	if st == nil {
		st = &fault.State{}
		a.s.accountFaults[a.id] = st
	}
	st.Set(f)
	return nil
}

// Faults returns the faults aimed at the account (zero: none).
func (a Account) Faults() Faults {
	if st := a.s.faultsOf(a.id); st != nil {
		return st.Get()
	}
	return Faults{}
}

// faultsOf is the fault state aimed at a connected account, nil if none.
func (s *Server) faultsOf(accountID string) *fault.State {
	if accountID == "" {
		return nil
	}
	s.faultsMu.Lock()
	defer s.faultsMu.Unlock()
	return s.accountFaults[accountID]
}
