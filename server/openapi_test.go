package server_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/server"
	"github.com/billsync/billsync/server/openapitest"
)

// TestOpenAPIServed: GET /api/openapi.json answers the document as JSON,
// with no token and whether or not the APIs are on.
func TestOpenAPIServed(t *testing.T) {
	for _, token := range []string{appToken, ""} {
		e := newAppEnv(t, token)
		resp, err := apiClient.Get(e.url + "/api/openapi.json")
		require.NoError(t, err)
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
		require.Equal(t, "no-store", resp.Header.Get("Cache-Control"))
		require.JSONEq(t, string(server.OpenAPI()), string(b))
		var doc struct {
			OpenAPI string         `json:"openapi"`
			Paths   map[string]any `json:"paths"`
		}
		require.NoError(t, json.Unmarshal(b, &doc))
		require.Equal(t, "3.1.0", doc.OpenAPI)
		require.Contains(t, doc.Paths, "/admin/api/accounts/{id}/resync")
	}
}

// TestOpenAPIEveryOperationIsRouted: each operation the document lists is
// a route of the server (not the mux's own 404 or 405), so the document
// names no route that does not exist. The other direction, a route the
// document lacks, fails whichever test calls it (apiClient).
func TestOpenAPIEveryOperationIsRouted(t *testing.T) {
	e := newAppEnv(t, appToken)
	doc, err := openapitest.Doc()
	require.NoError(t, err)
	n := 0
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			n++
			url := strings.NewReplacer("{id}", "1", "{user_ref}", "u1").Replace(path)
			token := adminToken
			if strings.HasPrefix(path, "/api/users/") {
				token = appToken
			}
			code, body, header := bearerRequest(t, method, e.url+url, token, "")
			require.NotEqual(t, http.StatusMethodNotAllowed, code, "%s %s", method, path)
			require.False(t, code == http.StatusNotFound && strings.HasPrefix(header.Get("Content-Type"), "text/plain"),
				"%s %s is in server/openapi.yaml but no route answers it: %s", method, path, body)
		}
	}
	require.GreaterOrEqual(t, n, 10)
}

// TestUsageSeedsAsDocumented: FuzzParseUsage's seed bodies, sent to the
// app API, are answered as the document says (apiClient checks it): a body
// the document calls invalid gets a 4xx, and each answer is documented.
func TestUsageSeedsAsDocumented(t *testing.T) {
	e := newAppEnv(t, appToken)
	e.account("stripe", "cus_1", "u1", "price_pro")
	for _, body := range server.UsageSeeds {
		a := e.do("POST", "/api/users/u1/usage", appToken, body)
		require.Contains(t, []int{http.StatusOK, http.StatusBadRequest, http.StatusConflict, http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity}, a.code, "%q: %s", body, a.body)
	}
}
