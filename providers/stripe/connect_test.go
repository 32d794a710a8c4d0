package stripe_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	stripeapi "github.com/stripe/stripe-go/v82"

	stripemock "github.com/billsync/billsync/mocks/stripe"

	"github.com/billsync/billsync/providers/stripe"
	"github.com/billsync/billsync/reconcile"
)

func connectEvent(id, account, typ string, livemode bool) []byte {
	return fmt.Appendf(nil, `{"id":%q,"object":"event","account":%q,"api_version":"2025-08-27.basil","created":1764584400,`+
		`"type":%q,"livemode":%t,"data":{"object":{"id":"sub_1","object":"subscription","customer":"cus_1","status":"active"}}}`,
		id, account, typ, livemode)
}

// TestVerifyConnect: a connected account's event verifies with the Connect
// endpoint's secret as with the platform's, is keyed under its account,
// and is stored as ignored with the reason when billsync does not serve
// the account or cannot read it (a test-mode event on a live
// deployment); an authorisation event is recorded, not reconciled.
func TestVerifyConnect(t *testing.T) {
	t.Parallel()
	const platform, connect = "whsec_platform", "whsec_connect"
	verifier := func(c stripe.Connect) *stripe.Verifier {
		v, err := stripe.NewVerifier([]string{platform}, 0)
		require.NoError(t, err)
		v.ServeConnect(c)
		return v
	}
	verify := func(v *stripe.Verifier, body []byte, secret string) reconcile.Event {
		t.Helper()
		d, err := v.Verify(context.Background(), signed(body, secret), body)
		require.NoError(t, err)
		return d.Event
	}
	listed := stripe.Connect{Secrets: []string{connect}, Policy: reconcile.ConnectPolicy{Mode: reconcile.ConnectListed, Listed: []string{"acct_a", "acct_b"}}}

	v := verifier(listed)
	for _, secret := range []string{platform, connect} {
		ev := verify(v, connectEvent("evt_1", "acct_a", "customer.subscription.updated", false), secret)
		require.Empty(t, ev.IgnoreReason)
		require.Equal(t, "acct_a/cus_1", ev.CustomerID)
		require.Equal(t, "acct_a/evt_1", ev.DedupeKey)
	}
	// The same event id and customer id in another account: other keys.
	ev := verify(v, connectEvent("evt_1", "acct_b", "customer.subscription.updated", false), connect)
	require.Equal(t, "acct_b/cus_1", ev.CustomerID)
	require.Equal(t, "acct_b/evt_1", ev.DedupeKey)

	ev = verify(v, connectEvent("evt_2", "acct_c", "customer.subscription.updated", false), connect)
	require.Equal(t, reconcile.ReasonConnectUnlisted, ev.IgnoreReason)

	body := connectEvent("evt_3", "acct_a", "customer.subscription.updated", false)
	_, err := verifier(stripe.Connect{Policy: listed.Policy}).Verify(context.Background(), signed(body, connect), body)
	require.ErrorIs(t, err, reconcile.ErrBadSignature, "the Connect secret verifies only once configured")

	live := listed
	live.Live = true
	v = verifier(live)
	require.Equal(t, stripe.ReasonTestMode, verify(v, connectEvent("evt_4", "acct_a", "customer.subscription.updated", false), connect).IgnoreReason)
	require.Empty(t, verify(v, connectEvent("evt_5", "acct_a", "customer.subscription.updated", true), connect).IgnoreReason)

	for typ, authorized := range map[string]bool{"account.application.authorized": true, "account.application.deauthorized": false} {
		ev := verify(v, connectEvent("evt_"+typ, "acct_z", typ, true), connect)
		require.NotNil(t, ev.Authorization, typ)
		require.Equal(t, reconcile.Authorization{Account: "acct_z", Authorized: authorized, At: time.Unix(1764584400, 0).UTC()}, *ev.Authorization)
		require.NotEmpty(t, ev.IgnoreReason, "recorded, with no customer to reconcile")
		require.Empty(t, ev.CustomerID)
	}
}

// TestFetchOnBehalfOfAConnectedAccount: every request of a connected
// customer's fetch carries the account's Stripe-Account header, and the
// snapshot is keyed under the account; the platform's carries none. An
// account billsync does not serve is never read, and one that no longer
// lets the platform in ends the fetch as permanent, not retried.
func TestFetchOnBehalfOfAConnectedAccount(t *testing.T) {
	t.Parallel()
	seen := make(chan string, 16)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		account := r.Header.Get("Stripe-Account")
		seen <- r.URL.Path + " " + account
		w.Header().Set("Content-Type", "application/json")
		if account == "acct_gone" {
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprint(w, `{"error":{"type":"invalid_request_error","code":"account_invalid",`+
				`"message":"The provided key 'sk_test_***' does not have access to account 'acct_gone' (or that account does not exist). Application access may have been revoked."}}`)
			return
		}
		fmt.Fprint(w, `{"id":"cus_1","object":"customer","metadata":{"user_id":"u1"},`+
			`"subscriptions":{"object":"list","data":[],"has_more":false}}`)
	}))
	t.Cleanup(hs.Close)
	cfg := testConfig(hs.URL)
	_, err := newTestClient(t, cfg).Fetch(context.Background(), "acct_a/cus_1")
	require.True(t, reconcile.IsPermanent(err), "an account not served: %v", err)
	require.Empty(t, seen, "nothing read for an account not served")

	cfg.Connect = reconcile.ConnectPolicy{Mode: reconcile.ConnectAll}
	c := newTestClient(t, cfg)
	snap, err := c.Fetch(context.Background(), "acct_a/cus_1")
	require.NoError(t, err)
	require.Equal(t, "acct_a/cus_1", snap.CustomerID)
	require.Equal(t, "/v1/customers/cus_1 acct_a", <-seen)

	snap, err = c.Fetch(context.Background(), "cus_1")
	require.NoError(t, err)
	require.Equal(t, "cus_1", snap.CustomerID)
	require.Equal(t, "/v1/customers/cus_1 ", <-seen)

	_, err = c.Fetch(context.Background(), "acct_gone/cus_1")
	require.True(t, reconcile.IsPermanent(err), "%v", err)
	require.ErrorContains(t, err, "does not authorise the platform")
}

// subscribeAccount subscribes the connected account to price as the
// platform's customer (Accounts v2: customer_account, no customer)
// through stripe-go, which has no field for it yet.
func (f *fakeStripe) subscribeAccount(t *testing.T, account, price string) *stripeapi.Subscription {
	t.Helper()
	params := &stripeapi.SubscriptionCreateParams{Items: []*stripeapi.SubscriptionCreateItemParams{{Price: stripeapi.String(price)}}}
	params.AddExtra("customer_account", account)
	sub, err := f.h.Stripe.API.V1Subscriptions.Create(context.Background(), params)
	require.NoError(t, err)
	return sub
}

// TestFetchCustomerAccount: a platform that bills a connected account as
// its customer (Accounts v2, shape A: the subscription names
// customer_account, and customer is null) has that account read as its
// customer, keyed by its acct_ id: the account's own metadata and email,
// the subscriptions Stripe lists by customer_account, and the related
// subscription's and invoice's customer; its events queue it too.
func TestFetchCustomerAccount(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFake(t, stripemock.Options{}, nil)
	const billed = "acct_1BilledAsCustomer"
	_, err := f.AddAccount(stripemock.AccountOptions{ID: billed, Email: "team@example.com", Metadata: map[string]string{"user_id": "team-1"}})
	require.NoError(t, err)
	other := f.customer(t, map[string]string{"user_id": "u1"})
	f.subscribe(t, other, "price_team") // the platform's own customer: never listed for the account

	sub := f.subscribeAccount(t, billed, "price_pro")
	require.Nil(t, sub.Customer, "shape A: customer is null")
	var raw struct {
		CustomerAccount string `json:"customer_account"`
	}
	require.NoError(t, json.Unmarshal(sub.LastResponse.RawJSON, &raw))
	require.Equal(t, billed, raw.CustomerAccount)
	f.seen()

	c := newTestClient(t, testConfig(f.URL))
	snap, err := c.Fetch(ctx, billed)
	require.NoError(t, err)
	require.Equal(t, billed, snap.CustomerID)
	require.Equal(t, "team-1", snap.UserRef)
	require.Equal(t, "team@example.com", snap.Email)
	require.Equal(t, []string{sub.ID}, subIDs(snap))
	require.Contains(t, snap.Subscriptions[0].Items[0].PriceRefs, "price_pro")
	reqs := f.seen()
	require.Len(t, reqs, 2)
	require.Equal(t, "/v1/accounts/"+billed, reqs[0].path)
	require.Equal(t, "/v1/subscriptions", reqs[1].path)
	q, err := url.ParseQuery(reqs[1].query)
	require.NoError(t, err)
	require.Equal(t, billed, q.Get("customer_account"))
	require.Empty(t, q.Get("customer"))

	for _, obj := range []reconcile.Related{{Type: "subscription", ID: sub.ID}, {Type: "invoice", ID: sub.LatestInvoice.ID}} {
		customer, err := c.CustomerOf(ctx, obj)
		require.NoError(t, err)
		require.Equal(t, billed, customer, obj.String())
	}

	// The fake's events name the account as Stripe's do: queued under it.
	var created int
	for ev, err := range f.h.Stripe.API.V1Events.List(ctx, &stripeapi.EventListParams{Type: stripeapi.String("customer.subscription.created")}) {
		require.NoError(t, err)
		body := fmt.Appendf(nil, `{"id":%q,"object":"event","type":%q,"created":%d,"data":{"object":%s}}`, ev.ID, ev.Type, ev.Created, ev.Data.Raw)
		parsed := stripe.ParseEvent(body)
		if parsed.Expect != nil && parsed.Expect.SubscriptionID == sub.ID {
			created++
			require.Equal(t, billed, parsed.CustomerID)
			require.Empty(t, parsed.IgnoreReason)
		}
	}
	require.Equal(t, 1, created)

	f.cancel(t, sub.ID)
	snap, err = c.Fetch(ctx, billed)
	require.NoError(t, err)
	require.Empty(t, snap.Subscriptions, "an ended subscription is left out")
	require.Equal(t, "team-1", snap.UserRef)

	_, err = c.Fetch(ctx, "acct_1NeverConnected")
	require.ErrorIs(t, err, reconcile.ErrCustomerUnknown)
	require.NoError(t, f.DeauthorizeAccount(billed))
	_, err = c.Fetch(ctx, billed)
	require.ErrorIs(t, err, reconcile.ErrCustomerUnknown, "an account the platform may no longer read")
}
