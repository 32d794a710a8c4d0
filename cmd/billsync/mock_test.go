//go:build !release

package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v82/webhook"

	kindemock "github.com/billsync/billsync/mocks/kinde"
	stripemock "github.com/billsync/billsync/mocks/stripe"
)

// TestMockServesBothFakes: `billsync mock` prints the settings of a fake
// Stripe and a fake Kinde, and both answer there until it is stopped.
func TestMockServesBothFakes(t *testing.T) {
	setting := startMock(t, "-kinde-addr", "127.0.0.1:0")
	stripeURL, kindeDomain := setting("STRIPE_API_URL"), setting("KINDE_DOMAIN")

	resp, err := http.Get(stripeURL + "/_mock/faults")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	resp, err = http.Get(kindeDomain + "/.well-known/jwks")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	resp, err = http.PostForm(kindeDomain+"/oauth2/token", url.Values{"grant_type": {"client_credentials"},
		"client_id": {setting("KINDE_CLIENT_ID")}, "client_secret": {kindemock.DefaultClientSecret}, "audience": {kindeDomain + "/api"}})
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "the printed M2M credentials get a token")
}

// TestMockEnforcesStripesLimits: by default the fake Stripe limits the
// printed key as Stripe does, and counts its requests; the printed driver
// key is accepted and not limited; -stripe-limits=false limits nothing.
// (How the limits answer is mocks/stripe's limits_test.go.)
func TestMockEnforcesStripesLimits(t *testing.T) {
	setting := startMock(t, "-kinde-addr", "off")
	stripeURL, apiKey, driverKey := setting("STRIPE_API_URL"), setting("STRIPE_API_KEY"), setting("STRIPE_DRIVER_KEY")
	want := stripemock.DocumentedLimits()
	want.TargetKey = apiKey
	require.Equal(t, want, getJSON[stripemock.Limits](t, stripeURL+"/_mock/limits"))

	for _, key := range []string{apiKey, driverKey} {
		req, err := http.NewRequest(http.MethodGet, stripeURL+"/v1/customers", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, key)
	}
	usage := getJSON[stripemock.Usage](t, stripeURL+"/_mock/usage?key="+apiKey)
	require.Equal(t, int64(1), usage.Operations["GET /v1/customers"].Reads)

	off := startMock(t, "-kinde-addr", "off", "-stripe-limits=false")
	require.Equal(t, stripemock.Limits{}, getJSON[stripemock.Limits](t, off("STRIPE_API_URL")+"/_mock/limits"))
}

// startMock runs `billsync mock` on free ports until the test ends, and
// returns a reader of the settings it prints.
func startMock(t *testing.T, args ...string) (setting func(name string) string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var out, logs syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, append([]string{"mock", "-addr", "127.0.0.1:0"}, args...), &out, &logs)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err, logs.String())
		case <-time.After(10 * time.Second):
			t.Fatal("billsync mock did not stop")
		}
	})
	return func(name string) string {
		re := regexp.MustCompile(`(?m)^` + name + `=(\S+)$`)
		var v string
		require.Eventually(t, func() bool {
			m := re.FindStringSubmatch(out.String())
			if m != nil {
				v = m[1]
			}
			return m != nil
		}, 10*time.Second, 10*time.Millisecond, "no %s in:\n%s", name, out.String())
		return v
	}
}

func getJSON[T any](t *testing.T, url string) T {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var v T
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&v))
	return v
}

// TestMockServesConnect: with -webhook, `billsync mock` also registers a
// Connect endpoint at the URL + /connect and prints its secret as
// STRIPE_CONNECT_WEBHOOK_SECRET; an account connected through
// /_mock/accounts announces itself there, signed with that secret alone,
// and the platform endpoint is sent none of it.
func TestMockServesConnect(t *testing.T) {
	got := make(chan *http.Request, 16)
	bodies := make(chan []byte, 16)
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got <- r
		bodies <- body
	}))
	t.Cleanup(receiver.Close)
	setting := startMock(t, "-kinde-addr", "off", "-webhook", receiver.URL+"/webhooks/stripe")
	stripeURL, platformSecret, connectSecret := setting("STRIPE_API_URL"), setting("STRIPE_WEBHOOK_SECRET"), setting("STRIPE_CONNECT_WEBHOOK_SECRET")
	require.NotEqual(t, platformSecret, connectSecret)

	resp, err := http.Post(stripeURL+"/_mock/accounts", "application/json", strings.NewReader(`{"id":"acct_mock"}`))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)

	var r *http.Request
	select {
	case r = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("no delivery came")
	}
	body := <-bodies
	require.Equal(t, "/webhooks/stripe/connect", r.URL.Path)
	ev, err := webhook.ConstructEventWithOptions(body, r.Header.Get("Stripe-Signature"), connectSecret,
		webhook.ConstructEventOptions{IgnoreAPIVersionMismatch: true})
	require.NoError(t, err)
	require.Equal(t, "account.application.authorized", string(ev.Type))
	require.Equal(t, "acct_mock", ev.Account)
	_, err = webhook.ConstructEventWithOptions(body, r.Header.Get("Stripe-Signature"), platformSecret,
		webhook.ConstructEventOptions{IgnoreAPIVersionMismatch: true})
	require.Error(t, err, "signed with the Connect endpoint's secret only")
	select {
	case r := <-got:
		t.Fatalf("a second delivery, to %s", r.URL.Path)
	default:
	}
}
