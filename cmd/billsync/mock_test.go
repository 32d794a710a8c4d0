package main

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	kindemock "github.com/billsync/billsync/mocks/kinde"
)

// TestMockServesBothFakes: `billsync mock` prints the settings of a fake
// Stripe and a fake Kinde, and both answer there until it is stopped.
func TestMockServesBothFakes(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var out, logs syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"mock", "-addr", "127.0.0.1:0", "-kinde-addr", "127.0.0.1:0"}, &out, &logs)
	}()
	setting := func(name string) string {
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

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err, logs.String())
	case <-time.After(10 * time.Second):
		t.Fatal("billsync mock did not stop")
	}
}
