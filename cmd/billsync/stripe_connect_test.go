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

	stripemock "github.com/billsync/billsync/mocks/stripe"
	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/providers/stripe"
	"github.com/billsync/billsync/reconcile"
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
