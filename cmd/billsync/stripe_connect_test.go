package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	stripeapi "github.com/stripe/stripe-go/v82"

	stripemock "github.com/billsync/billsync/mocks/stripe"
	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/providers/stripe"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store"
	"github.com/billsync/billsync/store/storetest"
)

// TestStripeSetupConnect: setup --connect also makes the Connect endpoint
// at the URL + /connect, and prints its secret once: the fake then sends
// a connected account's events (its authorisation first) there and only
// there, signed so that billsync's verifier, given that secret as
// STRIPE_CONNECT_WEBHOOK_SECRET, accepts them. Run again, it updates.
func TestStripeSetupConnect(t *testing.T) {
	h := testenv.ForTest(t, testenv.Stripe, testenv.Options{})
	var mu sync.Mutex
	got := map[string][][]byte{} // path → bodies
	headers := map[string][]http.Header{}
	intake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		got[r.URL.Path] = append(got[r.URL.Path], body)
		headers[r.URL.Path] = append(headers[r.URL.Path], r.Header.Clone())
		mu.Unlock()
	}))
	t.Cleanup(intake.Close)
	t.Setenv("STRIPE_API_KEY", stripemock.DefaultAPIKey)
	t.Setenv("STRIPE_API_KEY_FILE", "")
	t.Setenv("STRIPE_API_URL", h.URL)
	billsync := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := run(context.Background(), args, &out, &out)
		return out.String(), err
	}
	url := intake.URL + "/webhooks/stripe"
	out, err := billsync("stripe", "setup", "--url", url, "--connect")
	require.NoError(t, err, out)
	m := regexp.MustCompile(`set STRIPE_CONNECT_WEBHOOK_SECRET=(whsec_\w+) `).FindStringSubmatch(out)
	require.NotNil(t, m, out)
	require.Contains(t, out, "created Connect endpoint")

	_, err = h.Stripe.ConnectedAccount("acct_setup")
	require.NoError(t, err)
	require.NoError(t, h.WaitDelivered(context.Background()))
	mu.Lock()
	connect, platform := got["/webhooks/stripe/connect"], got["/webhooks/stripe"]
	hdrs := headers["/webhooks/stripe/connect"]
	mu.Unlock()
	require.Len(t, connect, 1, "the authorisation reaches the Connect endpoint")
	require.Empty(t, platform, "and not the platform's")
	v, err := stripe.NewVerifier([]string{"whsec_platform_unused"}, 0)
	require.NoError(t, err)
	v.ServeConnect(stripe.Connect{Secrets: []string{m[1]}, Policy: reconcile.ConnectPolicy{Mode: reconcile.ConnectAll}})
	d, err := v.Verify(context.Background(), hdrs[0], connect[0])
	require.NoError(t, err, "the printed secret verifies the Connect endpoint's deliveries")
	require.Equal(t, reconcile.Authorization{Account: "acct_setup", Authorized: true, At: d.Event.Authorization.At}, *d.Event.Authorization)

	out, err = billsync("stripe", "setup", "--url", url, "--connect")
	require.NoError(t, err, out)
	require.Contains(t, out, "updated Connect endpoint")
	require.NotContains(t, out, "STRIPE_CONNECT_WEBHOOK_SECRET")
	require.Len(t, h.Stripe.Fake.WebhookEndpointIDs(), 2, "one platform endpoint and one Connect endpoint, updated")
}

// TestSweepCommandOfOneAccount: billsync sweep -stripe-account sweeps one
// connected account's customers on its behalf: its first run is its
// import, the next heals a change no webhook told of, and neither touches
// the other account's customer with the same id. An account not served
// (-stripe-connect) or not an acct_ id is refused before anything runs.
// billsync resync reads a connected customer on its account's behalf.
func TestSweepCommandOfOneAccount(t *testing.T) {
	h, err := testenv.New(testenv.Stripe, testenv.Options{Stripe: testenv.StripeOptions{
		Connect: reconcile.ConnectPolicy{Mode: reconcile.ConnectAll}}})
	require.NoError(t, err)
	t.Cleanup(h.Close)
	ctx := context.Background()
	subs := map[string]*stripeapi.Subscription{}
	for _, a := range []string{"acct_cli", "acct_other"} {
		_, err := h.Stripe.ConnectedAccount(a)
		require.NoError(t, err)
		require.NoError(t, h.Stripe.ConnectedCustomer(a, "cus_1", "u_1"))
		subs[a], err = h.Stripe.ConnectedSubscribe(ctx, a, "cus_1", "price_team")
		require.NoError(t, err)
	}
	dsn := storetest.URL(t)
	t.Setenv("DATABASE_URL", dsn)
	t.Setenv("STRIPE_API_KEY", stripemock.DefaultAPIKey)
	t.Setenv("STRIPE_API_URL", h.URL)

	var out, logs bytes.Buffer
	err = run(ctx, []string{"sweep", "-stripe-account", "acct_cli"}, &out, &logs)
	require.ErrorContains(t, err, "-stripe-connect", "an account not served is refused")
	t.Setenv("BILLSYNC_STRIPE_CONNECT", "all")
	require.ErrorContains(t, run(ctx, []string{"sweep", "-stripe-account", "cus_1"}, &out, &logs), "acct_ id")

	out.Reset()
	require.NoError(t, run(ctx, []string{"sweep", "-stripe-account", "acct_cli"}, &out, &logs), logs.String())
	require.Contains(t, out.String(), "stripe acct_cli never imported: this sweep ran as its import")
	require.Contains(t, out.String(), "seen 1, imported 1, failed 0")

	require.NoError(t, h.Stripe.ConnectedChangePrice(ctx, "acct_cli", subs["acct_cli"], "price_pro"))
	out.Reset()
	require.NoError(t, run(ctx, []string{"sweep", "-stripe-account", "acct_cli"}, &out, &logs), logs.String())
	require.Contains(t, out.String(), "stripe acct_cli sweep 2 succeeded")
	require.Contains(t, out.String(), "healed acct_cli/cus_1: team (active) → pro (active)")

	st, err := store.Open(ctx, dsn, store.Options{})
	require.NoError(t, err)
	defer st.Close()
	accounts := storetest.Accounts(t, st)
	require.Len(t, accounts, 1, "the other account's customer with the same id was not swept")
	require.Equal(t, "acct_cli/cus_1", accounts[0].CustomerID)
	require.Equal(t, "pro", accounts[0].Plan)

	// A support command reads a connected customer on its account's
	// behalf, as serve does (-stripe-connect is read by every command).
	out.Reset()
	require.NoError(t, run(ctx, []string{"resync", "--customer", "acct_other/cus_1"}, &out, &logs), logs.String())
	require.Equal(t, "team", storetest.Customer(t, st, "stripe", "acct_other/cus_1").Plan, out.String())
}
