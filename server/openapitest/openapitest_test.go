package openapitest_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/server/openapitest"
)

// TestDocumentIsOpenAPI31: the embedded document loads and validates as
// OpenAPI 3.1.
func TestDocumentIsOpenAPI31(t *testing.T) {
	doc, err := openapitest.Doc()
	require.NoError(t, err)
	require.True(t, doc.IsOpenAPI31OrLater())
	require.NotNil(t, doc.Paths.Find("/api/users/{user_ref}"))
}

// TestTransportCatchesDrift: the checks fail on each kind of drift between
// a handler and the document, and pass a documented exchange. The handler
// here plays a server that drifted.
func TestTransportCatchesDrift(t *testing.T) {
	const user = `{"account_id":1,"provider":"stripe","customer_id":"cus_1","user_ref":"u1","plan":"pro","status":"active","period_start":null,"period_end":null,"balance":5}`
	// A named-meters change (the optional meters and ledger.meter), of a
	// new account (before null).
	const state = `{"id":1,"provider":"stripe","customer_id":"cus_1","user_ref":"u1","email":"","plan":"pro","status":"active","subscription_id":"sub_1","period_start":"2026-11-03T00:00:00Z","period_end":"2026-12-03T00:00:00Z","cancel_at_period_end":false,"observed_at":"2026-11-03T00:00:00Z","balance":5,"meters":{"ai_credits":7}}`
	const changes = `{"changes":[{"id":1,"type":"account.updated","version":1,"time":"2026-11-03T00:00:00Z","seq":1,"account_id":1,"provider":"stripe","user_ref":"u1","created":true,"changed":[],"before":null,"after":` + state +
		`,"ledger":{"kind":"usage","key":"k","delta":-1,"plan":"pro","period_start":"2026-11-03T00:00:00Z","meter":"ai_credits"},"why":{"trigger":"usage","actor":"app","event_ids":[],"events":0}}],"next":"5-1"}`
	for _, tc := range []struct {
		name, method, path, body string
		status                   int
		answer                   string
		wantErr                  string // "" when the exchange is as documented
	}{
		{"OK", "GET", "/api/users/u1", "", 200, user, ""},
		{"OKNotFound", "GET", "/api/users/u1", "", 404, `{"error":"no account"}`, ""},
		{"OKDebit", "POST", "/api/users/u1/usage", `{"idempotency_key":"k","amount":1}`, 409, `{"error":"short","balance":0,"amount":1}`, ""},
		{"OKUnknownRoute404", "GET", "/admin/api/nope", "", 404, "404 page not found", ""},
		{"OKBadBody400", "POST", "/api/users/u1/usage", `{"amount":0}`, 400, `{"error":"bad"}`, ""},
		{"OKChangeWithMeters", "GET", "/api/changes?after=5-0", "", 200, changes, ""},
		{"ErrChangeMeterNotANumber", "GET", "/api/changes", "", 200, strings.Replace(changes, `"ai_credits":7`, `"ai_credits":"7"`, 1), "answer not as documented"},
		{"ErrChangeUndocumentedField", "GET", "/api/changes", "", 200, strings.Replace(changes, `"balance":5`, `"balance":5,"secret":1`, 1), "answer not as documented"},
		{"ErrUndocumentedField", "GET", "/api/users/u1", "", 200, strings.TrimSuffix(user, "}") + `,"secret":1}`, "answer not as documented"},
		{"ErrMissingField", "GET", "/api/users/u1", "", 200, `{"account_id":1}`, "answer not as documented"},
		{"ErrWrongType", "GET", "/api/users/u1", "", 200, strings.Replace(user, `"balance":5`, `"balance":"5"`, 1), "answer not as documented"},
		{"ErrUndocumentedStatus", "GET", "/api/users/u1", "", 418, `{"error":"teapot"}`, "answer not as documented"},
		{"ErrUndocumentedRoute", "GET", "/api/nope", "", 200, `{}`, "no route"},
		{"ErrUndocumentedMethod", "DELETE", "/api/users/u1", "", 200, `{}`, "no route"},
		{"ErrInvalidRequestAccepted", "POST", "/api/users/u1/usage", `{"amount":0}`, 200, `{}`, "not a 4xx"},
		{"ErrNoTokenAccepted", "GET", "/api/users/u1", "", 200, user, "not a 4xx"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				ct := "application/json"
				if !json.Valid([]byte(tc.answer)) {
					ct = "text/plain; charset=utf-8"
				}
				w.Header().Set("Content-Type", ct)
				w.WriteHeader(tc.status)
				_, _ = io.WriteString(w, tc.answer)
			}))
			defer srv.Close()
			req, err := http.NewRequest(tc.method, srv.URL+tc.path, strings.NewReader(tc.body))
			require.NoError(t, err)
			if tc.name != "ErrNoTokenAccepted" {
				req.Header.Set("Authorization", "Bearer t")
			}
			if tc.body != "" {
				req.Header.Set("Content-Type", "application/json")
			}
			resp, err := openapitest.Client().Do(req)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.NoError(t, err)
			require.Equal(t, tc.answer, string(b), "the caller still reads the whole answer")
		})
	}
}

// TestTransportLeavesOtherPathsAlone: webhooks, health and the console are
// not in the document and pass unchecked.
func TestTransportLeavesOtherPathsAlone(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusTeapot)
	}))
	defer srv.Close()
	for _, p := range []string{"/healthz", "/webhooks/stripe", "/admin/", "/admin/accounts/1"} {
		resp, err := openapitest.Client().Get(srv.URL + p)
		require.NoError(t, err, p)
		resp.Body.Close()
		require.Equal(t, http.StatusTeapot, resp.StatusCode)
	}
}
