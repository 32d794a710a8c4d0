package main

import (
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/server/openapitest"
	"github.com/billsync/billsync/store/storetest"
)

// TestServeAppAPI: BILLSYNC_APP_TOKEN reaches serve's app API, and the
// token appears in none of its logs.
func TestServeAppAPI(t *testing.T) {
	addr := freeAddr(t)
	const token = "serve_app_token_0123456789"
	p := startBillsync(t, "", addr, "DATABASE_URL="+storetest.URL(t), "BILLSYNC_APP_TOKEN="+token,
		"BILLSYNC_TEST_ARGS=serve -workers 0 -addr "+addr)
	get := func(auth string) (int, string) {
		req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/api/users/nobody", nil)
		require.NoError(t, err)
		if auth != "" {
			req.Header.Set("Authorization", "Bearer "+auth)
		}
		resp, err := openapitest.Client().Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	code, body := get(token)
	require.Equal(t, http.StatusNotFound, code, body)
	require.Contains(t, body, `no account has user reference \"nobody\"`)
	code, body = get("wrong-token-0123456789")
	require.Equal(t, http.StatusUnauthorized, code, body)
	stopBillsync(t, p)
	require.NotContains(t, p.logs.String(), token)
}
