package stripe_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v82"

	stripemock "github.com/billsync/billsync/mocks/stripe"
	"github.com/billsync/billsync/mocks/testenv"
	billstripe "github.com/billsync/billsync/providers/stripe"
	"github.com/billsync/billsync/reconcile"
)

// in is a Stripe-Account header (with the driver's key) for f.do.
func in(account string) map[string]string {
	return map[string]string{"Authorization": "Bearer " + testenv.DriverAPIKey, "Stripe-Account": account}
}

// registerConnect adds the receiver as a Connect endpoint of the fake.
func (rc *receiver) registerConnect(f *fake) {
	secret := f.AddConnectWebhookEndpoint(rc.srv.URL)
	rc.mu.Lock()
	rc.secret = secret
	rc.mu.Unlock()
}

func addAccount(t *testing.T, f *fake, o stripemock.AccountOptions) stripemock.Account {
	t.Helper()
	a, err := f.AddAccount(o)
	require.NoError(t, err)
	return a
}

// eventsIn lists the events GET /v1/events answers in account ("" for the
// platform), each as (type, account).
func eventsIn(t *testing.T, f *fake, account string) (types []string, accounts []string) {
	t.Helper()
	params := &stripe.EventListParams{}
	if account != "" {
		params.SetStripeAccount(account)
	}
	for e, err := range f.sc.V1Events.List(context.Background(), params) {
		require.NoError(t, err)
		types = append(types, string(e.Type))
		accounts = append(accounts, e.Account)
	}
	return types, accounts
}

// TestConnectHeaderScopesObjects: the Stripe-Account header picks the
// account every route reads and writes; two accounts (and the platform)
// may hold the same customer id, each seeing its own; without the header
// a connected account's customer is the platform's 404 resource_missing,
// and a header naming no account is Stripe's 403 account_invalid. Each
// account's events list only its own, each naming it.
func TestConnectHeaderScopesObjects(t *testing.T) {
	t.Parallel()
	f := newFake(t, stripemock.Options{})
	ctx := context.Background()
	a := addAccount(t, f, stripemock.AccountOptions{ID: "acct_scopeA", PlatformPrices: true})
	b := addAccount(t, f, stripemock.AccountOptions{ID: "acct_scopeB", PlatformPrices: true})
	require.NoError(t, a.AddCustomer("cus_same", "a@example.com", map[string]string{"user_id": "ua"}))
	require.NoError(t, b.AddCustomer("cus_same", "b@example.com", nil))
	require.Error(t, a.AddCustomer("cus_same", "again@example.com", nil), "an id the account holds")

	for account, email := range map[string]string{"acct_scopeA": "a@example.com", "acct_scopeB": "b@example.com"} {
		params := &stripe.CustomerRetrieveParams{}
		params.SetStripeAccount(account)
		cust, err := f.sc.V1Customers.Retrieve(ctx, "cus_same", params)
		require.NoError(t, err)
		require.Equal(t, email, cust.Email, account)
	}
	resp, body := f.do(t, http.MethodGet, "/v1/customers/cus_same", nil, driverKey)
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	require.Equal(t, "resource_missing", path(body, "error", "code"))
	require.Equal(t, "No such customer: 'cus_same'", path(body, "error", "message"))

	resp, body = f.do(t, http.MethodGet, "/v1/customers/cus_same", nil, in("acct_nobody"))
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	require.Equal(t, "account_invalid", path(body, "error", "code"))
	require.Equal(t, "invalid_request_error", path(body, "error", "type"))
	require.Contains(t, path(body, "error", "message"), "does not have access to account 'acct_nobody'")

	// A subscription made in A through stripe-go is A's alone.
	subParams := &stripe.SubscriptionCreateParams{Customer: stripe.String("cus_same"),
		Items: []*stripe.SubscriptionCreateItemParams{{Price: stripe.String("price_pro")}}}
	subParams.SetStripeAccount("acct_scopeA")
	sub, err := f.sc.V1Subscriptions.Create(ctx, subParams)
	require.NoError(t, err)
	resp, _ = f.do(t, http.MethodGet, "/v1/subscriptions/"+sub.ID, nil, in("acct_scopeA"))
	require.Equal(t, http.StatusOK, resp.StatusCode)
	for _, header := range []map[string]string{in("acct_scopeB"), driverKey} {
		resp, body = f.do(t, http.MethodGet, "/v1/subscriptions/"+sub.ID, nil, header)
		require.Equal(t, http.StatusNotFound, resp.StatusCode, header)
		require.Equal(t, "resource_missing", path(body, "error", "code"))
	}
	_, body = f.do(t, http.MethodGet, "/v1/subscriptions", url.Values{"customer": {"cus_same"}}, in("acct_scopeB"))
	require.Empty(t, body["data"], "B's cus_same has no subscription")

	types, accounts := eventsIn(t, f, "acct_scopeA")
	require.Equal(t, []string{"invoice.paid", "customer.subscription.created", "customer.created", stripemock.EventAccountAuthorized}, types)
	require.Equal(t, []string{"acct_scopeA"}, slices.Compact(accounts), "each of A's events names A")
	types, _ = eventsIn(t, f, "acct_scopeB")
	require.Equal(t, []string{"customer.created", stripemock.EventAccountAuthorized}, types)
	_, accounts = eventsIn(t, f, "")
	require.NotContains(t, accounts, "acct_scopeA", "the platform's list holds none of the accounts' events")
	require.NotContains(t, accounts, "acct_scopeB")
}

// TestConnectAccountsList: POST /v1/accounts connects an account;
// GET /v1/accounts pages them newest first (limit, starting_after,
// has_more) and leaves out one that deauthorised the platform, which
// GET /v1/accounts/{id} then refuses as account_invalid.
func TestConnectAccountsList(t *testing.T) {
	t.Parallel()
	f := newFake(t, stripemock.Options{})
	ctx := context.Background()
	var made []string
	for range 5 {
		acct, err := f.sc.V1Accounts.Create(ctx, &stripe.AccountCreateParams{Type: stripe.String("standard"),
			Metadata: map[string]string{"n": "1"}})
		require.NoError(t, err)
		require.Regexp(t, `^acct_`, acct.ID)
		require.True(t, acct.ChargesEnabled)
		made = append(made, acct.ID)
	}
	slices.Reverse(made) // newest first

	resp, page := f.do(t, http.MethodGet, "/v1/accounts", url.Values{"limit": {"2"}}, driverKey)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, true, page["has_more"])
	require.Equal(t, made[:2], ids(page))
	_, page = f.do(t, http.MethodGet, "/v1/accounts", url.Values{"limit": {"2"}, "starting_after": {made[3]}}, driverKey)
	require.Equal(t, false, page["has_more"])
	require.Equal(t, made[4:], ids(page))

	var listed []string
	for acct, err := range f.sc.V1Accounts.List(ctx, &stripe.AccountListParams{ListParams: stripe.ListParams{Limit: stripe.Int64(2)}}) {
		require.NoError(t, err)
		listed = append(listed, acct.ID)
	}
	require.Equal(t, made, listed, "stripe-go pages through every account")

	require.NoError(t, f.DeauthorizeAccount(made[2]))
	listed = nil
	for acct, err := range f.sc.V1Accounts.List(ctx, nil) {
		require.NoError(t, err)
		listed = append(listed, acct.ID)
	}
	require.Equal(t, slices.Delete(slices.Clone(made), 2, 3), listed, "a deauthorised account is not listed")
	resp, body := f.do(t, http.MethodGet, "/v1/accounts/"+made[2], nil, driverKey)
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	require.Equal(t, "account_invalid", path(body, "error", "code"))
	resp, body = f.do(t, http.MethodGet, "/v1/accounts/"+made[0], nil, driverKey)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "account", body["object"])
	require.Equal(t, []string{made[4], made[3], made[2], made[1], made[0]}, f.AccountIDs(), "oldest first, deauthorised too")
}

func ids(list map[string]any) []string {
	var out []string
	for _, o := range list["data"].([]any) {
		out = append(out, o.(map[string]any)["id"].(string))
	}
	return out
}

// TestConnectWebhooksGoToConnectEndpoints: a connected account's events
// go only to Connect endpoints (AddConnectWebhookEndpoint, or
// POST /v1/webhook_endpoints with connect=true), signed with each one's
// own secret and naming the account; the platform's go only to the
// platform's endpoints. Connecting an account announces it with
// account.application.authorized.
func TestConnectWebhooksGoToConnectEndpoints(t *testing.T) {
	t.Parallel()
	f := newFake(t, stripemock.Options{})
	platform, connect, viaAPI := newReceiver(t), newReceiver(t), newReceiver(t)
	platform.register(f)
	connect.registerConnect(f)
	resp, ep := f.do(t, http.MethodPost, "/v1/webhook_endpoints", url.Values{"url": {viaAPI.srv.URL},
		"connect": {"true"}, "enabled_events[]": {"customer.created", stripemock.EventAccountAuthorized}}, driverKey)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Nil(t, ep["application"])
	viaAPI.mu.Lock()
	viaAPI.secret = ep["secret"].(string)
	viaAPI.mu.Unlock()
	require.NotEqual(t, connect.secret, viaAPI.secret)

	a := addAccount(t, f, stripemock.AccountOptions{ID: "acct_hooks"})
	require.NoError(t, a.AddCustomer("cus_connected", "c@example.com", nil))
	require.NoError(t, f.AddCustomer("cus_platform", "p@example.com", nil))
	f.waitIdle(t)

	for _, rc := range []*receiver{connect, viaAPI} {
		events, rejected := rc.received()
		require.Zero(t, rejected, "every delivery verifies with the endpoint's own secret")
		require.Len(t, events, 2)
		for _, e := range events {
			require.Equal(t, "acct_hooks", e.Account)
			require.False(t, e.Livemode)
		}
		auth := rc.ofType(stripemock.EventAccountAuthorized)
		require.Len(t, auth, 1)
		require.Equal(t, "application", auth[0].Data.Object["object"])
		require.Regexp(t, `^ca_`, auth[0].Data.Object["id"])
		require.Equal(t, "cus_connected", rc.ofType("customer.created")[0].Data.Object["id"])
	}
	events, rejected := platform.received()
	require.Zero(t, rejected)
	require.Len(t, events, 1, "the platform endpoint gets the platform's event alone")
	require.Equal(t, "cus_platform", events[0].Data.Object["id"])
	require.Empty(t, events[0].Account)
	for _, d := range f.Deliveries() {
		require.Equal(t, d.URL != platform.srv.URL, d.Account == "acct_hooks", d)
	}
}

// TestConnectDeauthorizeAndAuthorize: deauthorising sends
// account.application.deauthorized, after which every request in the
// account is refused as Stripe refuses it and its events reach no
// endpoint; authorising again sends account.application.authorized, and
// the account's objects and events are there again.
func TestConnectDeauthorizeAndAuthorize(t *testing.T) {
	t.Parallel()
	f := newFake(t, stripemock.Options{})
	rc := newReceiver(t)
	rc.registerConnect(f)
	a := addAccount(t, f, stripemock.AccountOptions{ID: "acct_gone"})
	require.NoError(t, a.AddCustomer("cus_kept", "k@example.com", nil))

	require.NoError(t, f.DeauthorizeAccount("acct_gone"))
	require.NoError(t, f.DeauthorizeAccount("acct_gone"), "twice is once")
	for _, p := range []string{"/v1/customers/cus_kept", "/v1/events", "/v1/customers"} {
		resp, body := f.do(t, http.MethodGet, p, nil, in("acct_gone"))
		require.Equal(t, http.StatusForbidden, resp.StatusCode, p)
		require.Equal(t, "account_invalid", path(body, "error", "code"), p)
	}
	params := &stripe.CustomerRetrieveParams{}
	params.SetStripeAccount("acct_gone")
	_, err := f.sc.V1Customers.Retrieve(context.Background(), "cus_kept", params)
	var se *stripe.Error
	require.ErrorAs(t, err, &se)
	require.Equal(t, http.StatusForbidden, se.HTTPStatusCode)
	require.Equal(t, stripe.ErrorCodeAccountInvalid, se.Code)
	require.NoError(t, a.AddCustomer("cus_meanwhile", "m@example.com", nil), "the account goes on without the platform")

	require.NoError(t, f.AuthorizeAccount("acct_gone"))
	f.waitIdle(t)
	var types []string
	events, _ := rc.received()
	for _, e := range events {
		types = append(types, string(e.Type))
		require.Equal(t, "acct_gone", e.Account)
	}
	require.ElementsMatch(t, []string{stripemock.EventAccountAuthorized, "customer.created", stripemock.EventAccountDeauthorized,
		stripemock.EventAccountAuthorized}, types, "nothing sent while deauthorised (deliveries may arrive in any order)")
	resp, body := f.do(t, http.MethodGet, "/v1/customers/cus_kept", nil, in("acct_gone"))
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "k@example.com", body["email"])
	listed, _ := eventsIn(t, f, "acct_gone")
	require.Len(t, listed, 5, "its events were kept, the one made meanwhile too")
	require.Error(t, f.DeauthorizeAccount("acct_unknown"))
}

// TestConnectAccountRateLimit: Limits.Accounts gives one connected
// account its own limit, answered 429 with Stripe-Rate-Limited-Reason
// global-rate, while another account and the platform go on; usage is
// counted per account, so a test can tell which account a client read.
func TestConnectAccountRateLimit(t *testing.T) {
	t.Parallel()
	f := newLimitedFake(t, stripemock.Options{})
	addAccount(t, f, stripemock.AccountOptions{ID: "acct_busy"})
	addAccount(t, f, stripemock.AccountOptions{ID: "acct_calm"})
	require.NoError(t, f.SetLimits(stripemock.Limits{Accounts: map[string]float64{"acct_busy": 2}}))

	get := func(header map[string]string) answer {
		resp, _ := f.do(t, http.MethodGet, "/v1/customers", nil, header)
		return answer{resp.StatusCode, resp.Header.Get("Stripe-Rate-Limited-Reason")}
	}
	require.Equal(t, ok200, get(in("acct_busy")))
	require.Equal(t, ok200, get(in("acct_busy")))
	require.Equal(t, limited(stripemock.ReasonGlobalRate), get(in("acct_busy")), "the stopped clock refills nothing")
	for range 5 {
		require.Equal(t, ok200, get(in("acct_calm")))
		require.Equal(t, ok200, get(driverKey))
	}
	busy := f.Account("acct_busy").Usage()
	require.Equal(t, int64(2), busy.Reads)
	require.Equal(t, int64(1), busy.RateLimited)
	require.Equal(t, map[string]int64{stripemock.ReasonGlobalRate: 1}, busy.Operations["GET /v1/customers"].RateLimited)
	require.Equal(t, int64(5), f.Account("acct_calm").Usage().Reads)
	require.Equal(t, int64(5), f.Account("").Usage().Reads, "the platform's own requests")

	f.Clock().Advance(time.Second)
	require.Equal(t, ok200, get(in("acct_busy")), "refilled as the clock moves")

	require.NoError(t, f.SetLimits(stripemock.Limits{PerAccount: 1}))
	require.Equal(t, ok200, get(in("acct_calm")))
	require.Equal(t, limited(stripemock.ReasonGlobalRate), get(in("acct_calm")), "PerAccount limits every account")
	require.Equal(t, ok200, get(driverKey), "but not the platform")
	require.Error(t, f.SetLimits(stripemock.Limits{Accounts: map[string]float64{"cus_x": 1}}))
}

// TestConnectAccountFaults: faults aimed at one account fail its requests
// alone.
func TestConnectAccountFaults(t *testing.T) {
	t.Parallel()
	f := newFake(t, stripemock.Options{})
	a := addAccount(t, f, stripemock.AccountOptions{ID: "acct_faulty"})
	addAccount(t, f, stripemock.AccountOptions{ID: "acct_fine"})
	require.NoError(t, a.SetFaults(stripemock.Faults{Error5xxRate: 1}))
	require.Equal(t, stripemock.Faults{Error5xxRate: 1}, a.Faults())
	resp, _ := f.do(t, http.MethodGet, "/v1/customers", nil, in("acct_faulty"))
	require.Equal(t, http.StatusInternalServerError, resp.StatusCode)
	resp, _ = f.do(t, http.MethodGet, "/v1/customers", nil, in("acct_fine"))
	require.Equal(t, http.StatusOK, resp.StatusCode)
	resp, _ = f.do(t, http.MethodGet, "/v1/customers", nil, driverKey)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.NoError(t, a.SetFaults(stripemock.Faults{}))
	resp, _ = f.do(t, http.MethodGet, "/v1/customers", nil, in("acct_faulty"))
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Error(t, f.Account("acct_unknown").SetFaults(stripemock.Faults{Error5xxRate: 1}))
}

// TestConnectTestModeEvents: an account's events carry the livemode it is
// set to, so a live Connect endpoint can be sent test-mode events, and a
// Connect event destination's thin events name the account in context.
func TestConnectTestModeEvents(t *testing.T) {
	t.Parallel()
	f := newFake(t, stripemock.Options{})
	rc := newReceiver(t)
	rc.registerConnect(f)
	thin := newRawReceiver(t, true)
	thinSecret := f.AddConnectEventDestination(thin.srv.URL, "v1.customer.created")

	a := addAccount(t, f, stripemock.AccountOptions{ID: "acct_live", Livemode: true})
	require.NoError(t, a.AddCustomer("cus_live", "l@example.com", nil))
	require.NoError(t, a.SetLivemode(false))
	require.NoError(t, a.AddCustomer("cus_test", "t@example.com", nil))
	require.Error(t, f.Account("").SetLivemode(true))
	f.waitIdle(t)

	created := rc.ofType("customer.created")
	require.Len(t, created, 2)
	livemode := map[string]bool{}
	for _, e := range created {
		livemode[e.Data.Object["id"].(string)] = e.Livemode
	}
	require.Equal(t, map[string]bool{"cus_live": true, "cus_test": false}, livemode)

	thin.mu.Lock()
	defer thin.mu.Unlock()
	require.Len(t, thin.bodies, 2)
	for i, body := range thin.bodies {
		e, err := stripe.NewClient("sk_test_unused").ParseThinEvent(body, thin.heads[i].Get("Stripe-Signature"), thinSecret)
		require.NoError(t, err)
		require.Equal(t, "v1.customer.created", e.Type)
		require.NotNil(t, e.Context)
		require.Equal(t, "acct_live", *e.Context, "a thin event names its account in context")
	}
}

// TestConnectAccountRenewsAndKeysIdempotency: the fake clock renews a
// connected account's subscriptions in that account (its events, not the
// platform's), and an Idempotency-Key is kept per account, as by Stripe.
func TestConnectAccountRenewsAndKeysIdempotency(t *testing.T) {
	t.Parallel()
	f := stoppedFake(t, stripemock.Options{})
	ctx := context.Background()
	a := addAccount(t, f, stripemock.AccountOptions{ID: "acct_renews", PlatformPrices: true})
	require.NoError(t, a.AddCustomer("cus_renews", "r@example.com", nil))
	params := &stripe.SubscriptionCreateParams{Customer: stripe.String("cus_renews"),
		Items: []*stripe.SubscriptionCreateItemParams{{Price: stripe.String("price_pro")}}}
	params.SetStripeAccount("acct_renews")
	_, err := f.sc.V1Subscriptions.Create(ctx, params)
	require.NoError(t, err)
	platformBefore, _ := eventsIn(t, f, "")

	f.Clock().Advance(32 * 24 * time.Hour)
	types, _ := eventsIn(t, f, "acct_renews")
	require.Equal(t, []string{"invoice.paid", "customer.subscription.updated"}, types[:2], "renewed in the account")
	platformAfter, _ := eventsIn(t, f, "")
	require.Equal(t, platformBefore, platformAfter, "nothing of it in the platform")

	key := map[string]string{"Idempotency-Key": "same-key"}
	var made []string
	for _, account := range []string{"acct_renews", ""} {
		header := in(account)
		if account == "" {
			header = map[string]string{"Authorization": driverKey["Authorization"]}
		}
		header["Idempotency-Key"] = key["Idempotency-Key"]
		for range 2 {
			resp, body := f.do(t, http.MethodPost, "/v1/customers", url.Values{"email": {"i@example.com"}}, header)
			require.Equal(t, http.StatusOK, resp.StatusCode)
			made = append(made, body["id"].(string))
		}
	}
	require.Equal(t, made[0], made[1], "replayed in the account")
	require.Equal(t, made[2], made[3], "replayed in the platform")
	require.NotEqual(t, made[0], made[2], "one key, two accounts: two customers")
}

// TestConnectControlRoutes: /_mock/accounts and its routes drive
// connected accounts from outside: connect one, add a customer with a
// chosen id, aim faults at it, read its usage, deauthorise and authorise.
func TestConnectControlRoutes(t *testing.T) {
	t.Parallel()
	f := newFake(t, stripemock.Options{})
	post := func(p, body string) (int, map[string]any) {
		t.Helper()
		resp, err := http.Post(f.URL+p, "application/json", strings.NewReader(body))
		require.NoError(t, err)
		defer resp.Body.Close()
		var out map[string]any
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
		return resp.StatusCode, out
	}
	status, out := post("/_mock/accounts", `{"id":"acct_ctl","platform_prices":true,"livemode":true}`)
	require.Equal(t, http.StatusOK, status, out)
	require.Equal(t, "acct_ctl", out["id"])
	status, _ = post("/_mock/accounts", `{"id":"acct_ctl"}`)
	require.Equal(t, http.StatusBadRequest, status, "taken")
	status, _ = post("/_mock/accounts", `{"id":"cus_ctl"}`)
	require.Equal(t, http.StatusBadRequest, status, "not an account id")

	status, _ = post("/_mock/accounts/acct_ctl/customers", `{"id":"cus_ctl","email":"ctl@example.com"}`)
	require.Equal(t, http.StatusOK, status)
	resp, body := f.do(t, http.MethodGet, "/v1/customers/cus_ctl", nil, in("acct_ctl"))
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "ctl@example.com", body["email"])
	_, body = f.do(t, http.MethodGet, "/v1/prices/price_pro", nil, in("acct_ctl"))
	require.Equal(t, "price_pro", body["id"], "platform_prices copied the platform's prices")

	status, _ = post("/_mock/accounts/acct_ctl/faults", `{"error_5xx_rate":1}`)
	require.Equal(t, http.StatusOK, status)
	resp, _ = f.do(t, http.MethodGet, "/v1/customers", nil, in("acct_ctl"))
	require.Equal(t, http.StatusInternalServerError, resp.StatusCode)
	status, _ = post("/_mock/accounts/acct_ctl/faults", `{}`)
	require.Equal(t, http.StatusOK, status)
	resp, _ = f.do(t, http.MethodGet, "/v1/customers", nil, in("acct_ctl"))
	require.Equal(t, http.StatusOK, resp.StatusCode)
	usage := getUsage(t, f.URL+"/_mock/usage?account=acct_ctl")
	require.Equal(t, int64(4), usage.Reads, "the account's four reads, the faulted one too")

	status, _ = post("/_mock/accounts/acct_ctl/livemode", `{"livemode":false}`)
	require.Equal(t, http.StatusOK, status)
	status, _ = post("/_mock/accounts/acct_ctl/deauthorize", ``)
	require.Equal(t, http.StatusOK, status)
	resp, _ = f.do(t, http.MethodGet, "/v1/customers", nil, in("acct_ctl"))
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	status, _ = post("/_mock/accounts/acct_ctl/authorize", ``)
	require.Equal(t, http.StatusOK, status)
	resp, _ = f.do(t, http.MethodGet, "/v1/customers", nil, in("acct_ctl"))
	require.Equal(t, http.StatusOK, resp.StatusCode)
	status, _ = post("/_mock/accounts/acct_none/deauthorize", ``)
	require.Equal(t, http.StatusNotFound, status)

	resp2, err := http.Get(f.URL + "/_mock/accounts")
	require.NoError(t, err)
	defer resp2.Body.Close()
	var listed struct {
		Accounts []struct {
			ID         string `json:"id"`
			Authorized bool   `json:"authorized"`
			Livemode   bool   `json:"livemode"`
		} `json:"accounts"`
	}
	require.NoError(t, json.NewDecoder(resp2.Body).Decode(&listed))
	require.Len(t, listed.Accounts, 1)
	require.Equal(t, "acct_ctl", listed.Accounts[0].ID)
	require.True(t, listed.Accounts[0].Authorized)
	require.False(t, listed.Accounts[0].Livemode)
}

func getUsage(t *testing.T, u string) stripemock.Usage {
	t.Helper()
	resp, err := http.Get(u)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var usage stripemock.Usage
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&usage))
	return usage
}

// TestConnectHealthEventNamesTheAccount: a lost event of a connected
// account is announced, when resolved, to the Connect event destinations
// with the account in context, and is read with its Stripe-Context.
func TestConnectHealthEventNamesTheAccount(t *testing.T) {
	t.Parallel()
	f := newFake(t, stripemock.Options{})
	platform, connect := newRawReceiver(t, true), newRawReceiver(t, true)
	f.AddEventDestination(platform.srv.URL, stripemock.HealthEventResolved)
	secret := f.AddConnectEventDestination(connect.srv.URL, stripemock.HealthEventResolved)
	a := addAccount(t, f, stripemock.AccountOptions{ID: "acct_lost"})

	f.FailEventGeneration(true)
	require.NoError(t, a.AddCustomer("cus_lost", "l@example.com", nil))
	ids := f.ResolveEventGenerationFailure()
	require.Len(t, ids, 1)
	f.waitIdle(t)

	platform.mu.Lock()
	require.Empty(t, platform.bodies, "not the platform's")
	platform.mu.Unlock()
	connect.mu.Lock()
	require.Len(t, connect.bodies, 1)
	e, err := stripe.NewClient("sk_test_unused").ParseThinEvent(connect.bodies[0], connect.heads[0].Get("Stripe-Signature"), secret)
	connect.mu.Unlock()
	require.NoError(t, err)
	require.Equal(t, ids[0], e.ID)
	require.NotNil(t, e.Context)
	require.Equal(t, "acct_lost", *e.Context)

	resp, body := f.do(t, http.MethodGet, "/v2/core/events/"+ids[0], nil,
		map[string]string{"Authorization": driverKey["Authorization"], "Stripe-Context": "acct_lost"})
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "cus_lost", path(body, "data", "impact", "related_object", "id"))
	resp, _ = f.do(t, http.MethodGet, "/v2/core/events/"+ids[0], nil, driverKey)
	require.Equal(t, http.StatusNotFound, resp.StatusCode, "not the platform's event")
}

// TestConnectBillsyncReadsOnBehalf: billsync's own Stripe client reads a
// connected account's customer on its behalf from the fake, each account
// its own cus_same, and takes the fake's refusal after deauthorisation as
// the account lost (permanent), as it takes Stripe's.
func TestConnectBillsyncReadsOnBehalf(t *testing.T) {
	t.Parallel()
	f := newFake(t, stripemock.Options{})
	a := addAccount(t, f, stripemock.AccountOptions{ID: "acct_readA", PlatformPrices: true})
	b := addAccount(t, f, stripemock.AccountOptions{ID: "acct_readB"})
	require.NoError(t, a.AddCustomer("cus_same", "a@example.com", map[string]string{"user_id": "ua"}))
	require.NoError(t, b.AddCustomer("cus_same", "b@example.com", map[string]string{"user_id": "ub"}))
	params := &stripe.SubscriptionCreateParams{Customer: stripe.String("cus_same"),
		Items: []*stripe.SubscriptionCreateItemParams{{Price: stripe.String("price_pro")}}}
	params.SetStripeAccount("acct_readA")
	_, err := f.sc.V1Subscriptions.Create(context.Background(), params)
	require.NoError(t, err)

	client, err := billstripe.NewClient(billstripe.Config{APIKey: stripemock.DefaultAPIKey, BaseURL: f.URL,
		Connect: reconcile.ConnectPolicy{Mode: reconcile.ConnectAll}})
	require.NoError(t, err)
	ctx := context.Background()
	snap, err := client.Fetch(ctx, "acct_readA/cus_same")
	require.NoError(t, err)
	require.Equal(t, "ua", snap.UserRef)
	require.Len(t, snap.Subscriptions, 1)
	snap, err = client.Fetch(ctx, "acct_readB/cus_same")
	require.NoError(t, err)
	require.Equal(t, "ub", snap.UserRef)
	require.Empty(t, snap.Subscriptions)
	_, err = client.Fetch(ctx, "cus_same")
	require.ErrorIs(t, err, reconcile.ErrCustomerUnknown, "the platform has no cus_same")

	require.NoError(t, f.DeauthorizeAccount("acct_readA"))
	_, err = client.Fetch(ctx, "acct_readA/cus_same")
	require.True(t, reconcile.IsPermanent(err), "%v", err)
	require.ErrorContains(t, err, "does not authorise the platform")
	require.Positive(t, f.Account("acct_readB").Usage().Reads, "B was read in B")
}
