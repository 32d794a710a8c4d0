package server_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	kindemock "github.com/billsync/billsync/mocks/kinde"
	"github.com/billsync/billsync/providers/kinde"
	"github.com/billsync/billsync/server"
)

// TestIntakeKindeKeySetOutage: a Kinde token that may be good while the key
// set cannot be fetched is 503 with Retry-After (Kinde retries); the answer
// and the log say Kinde is unavailable, not the database, and nothing is
// logged as billsync's own failure.
func TestIntakeKindeKeySetOutage(t *testing.T) {
	keys, err := kindemock.NewKeys()
	require.NoError(t, err)
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "unavailable", http.StatusServiceUnavailable)
	}))
	t.Cleanup(down.Close)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	v, err := kinde.NewVerifier(ctx, kinde.VerifierConfig{Domain: down.URL})
	require.NoError(t, err)
	logs := &recordingHandler{}
	srv := httptest.NewServer(server.New(server.Config{Logger: slog.New(logs), Verifiers: []server.Verifier{v}}))
	t.Cleanup(srv.Close)

	token, err := keys.Sign(map[string]any{"type": "customer.plan_changed", "event_id": "event_1",
		"timestamp": time.Now().UTC().Format(time.RFC3339), "data": map[string]any{"customer_id": "customer_1"}})
	require.NoError(t, err)
	resp, err := http.Post(srv.URL+"/webhooks/kinde", "application/jwt", bytes.NewReader(token))
	require.NoError(t, err)
	var body bytes.Buffer
	_, err = body.ReadFrom(resp.Body)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, body.String())
	require.Equal(t, "5", resp.Header.Get("Retry-After"))
	require.Contains(t, body.String(), "kinde is unavailable")
	require.NotContains(t, body.String(), "database")

	require.Empty(t, logs.atLeast(slog.LevelError), "an outage of Kinde is not billsync's own failure")
	logs.mu.Lock()
	defer logs.mu.Unlock()
	var logged []string
	for _, r := range logs.records {
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "error" {
				logged = append(logged, r.Level.String()+" "+r.Message+": "+a.Value.String())
			}
			return true
		})
	}
	require.Len(t, logged, 1)
	require.Contains(t, logged[0], "WARN refused delivery: provider unavailable")
	require.Contains(t, logged[0], "kinde key set unavailable")
	require.NotContains(t, logged[0], "store")
}

// TestAppDebitRefusesKeysThatAreNotUTF8: an idempotency_key holding an
// invalid byte or half a surrogate pair is 400, not a key that the JSON
// decoder silently turned into U+FFFD (then "\ud800" and "\udfff" would be
// one key, and the second debit a replay of the first).
func TestAppDebitRefusesKeysThatAreNotUTF8(t *testing.T) {
	e := newAppEnv(t, appToken)
	id := e.account("stripe", "cus_1", "u1", "price_pro")
	for name, key := range map[string]string{
		"LoneHighSurrogate": `"\ud800"`,
		"LoneLowSurrogate":  `"\udfff"`,
		"HighThenLetter":    `"a\ud800b"`,
		"InvalidByte":       "\"k\xff\"",
		"CutSequence":       "\"k\xc3\"",
	} {
		t.Run(name, func(t *testing.T) {
			a := e.do("POST", "/api/users/u1/usage", appToken, `{"idempotency_key": `+key+`, "amount": 1}`)
			require.Equal(t, http.StatusBadRequest, a.code, a.body)
			require.Contains(t, a.json(t)["error"], "not valid UTF-8")
		})
	}
	require.EqualValues(t, 500, e.balance(id), "nothing was debited")

	a := e.do("POST", "/api/users/u1/usage", appToken, `{"idempotency_key": "smile-\ud83d\ude00", "amount": 2}`)
	require.Equal(t, http.StatusOK, a.code, a.body)
	require.Equal(t, "smile-😀", a.json(t)["idempotency_key"], "a whole surrogate pair is a character")
	require.EqualValues(t, 498, e.balance(id))
}

// TestAdminAnswersAreNotCached: the admin API's answers hold customers'
// data and are never stored by a browser or a proxy, errors included.
func TestAdminAnswersAreNotCached(t *testing.T) {
	e := newAdminEnv(t, adminToken)
	for _, tc := range []struct {
		token string
		code  int
	}{{adminToken, http.StatusOK}, {"", http.StatusUnauthorized}} {
		status, body, header := bearerRequest(t, "GET", e.url+"/admin/api/accounts?q=nobody", tc.token, "")
		require.Equal(t, tc.code, status, body)
		require.Equal(t, "no-store", header.Get("Cache-Control"), "token %q", tc.token)
		require.Equal(t, "nosniff", header.Get("X-Content-Type-Options"))
	}
}

// TestAdminRefusesNonCanonicalIDs: an id is billsync's number in its one
// spelling; "+5" or "05" is not account 5, on the admin API or the console.
func TestAdminRefusesNonCanonicalIDs(t *testing.T) {
	e := newAdminEnv(t, adminToken)
	id := e.customer("u1", "u1@example.com", "price_pro")
	status, body := e.do("GET", fmt.Sprintf("/admin/api/accounts/%d", id), adminToken)
	require.Equal(t, http.StatusOK, status, body)
	b := e.browser()
	b.signIn(adminToken)
	code, _ := b.get(fmt.Sprintf("/admin/accounts/%d", id))
	require.Equal(t, http.StatusOK, code)
	n := strconv.FormatInt(id, 10)
	for _, path := range []string{"+" + n, "%2B" + n, "0" + n, "00" + n, "+0" + n} {
		status, body := e.do("GET", "/admin/api/accounts/"+path, adminToken)
		require.Equal(t, http.StatusBadRequest, status, "id %s: %s", path, body)
		status, body = e.do("POST", "/admin/api/accounts/"+path+"/resync?dry_run=1", adminToken)
		require.Equal(t, http.StatusBadRequest, status, "id %s: %s", path, body)
		code, _ := b.get("/admin/accounts/" + path)
		require.Equal(t, http.StatusBadRequest, code, "console, id %s", path)
	}
}

// TestAdminUnknownPathsHaveTheConsoleHeaders: a path or method under
// /admin that no route has is answered by the mux itself, with the same
// headers as the console's pages.
func TestAdminUnknownPathsHaveTheConsoleHeaders(t *testing.T) {
	e := newAdminEnv(t, adminToken)
	for _, tc := range []struct {
		method, path string
		code         int
	}{
		{"GET", "/admin/nope", http.StatusNotFound},
		{"GET", "/admin/api/nope", http.StatusNotFound},
		{"GET", "/admin/accounts/1/nope", http.StatusNotFound},
		{"DELETE", "/admin/accounts/1", http.StatusMethodNotAllowed},
	} {
		status, body, header := bearerRequest(t, tc.method, e.url+tc.path, "", "")
		require.Equal(t, tc.code, status, "%s %s: %s", tc.method, tc.path, body)
		require.Contains(t, header.Get("Content-Security-Policy"), "default-src 'none'", tc.path)
		require.Equal(t, "DENY", header.Get("X-Frame-Options"), tc.path)
		require.Equal(t, "nosniff", header.Get("X-Content-Type-Options"), tc.path)
		require.Equal(t, "no-store", header.Get("Cache-Control"), tc.path)
	}
}

// TestConsoleNextHoldsNoControlCharacters: http.Redirect escapes only
// non-ASCII bytes, so a next= with a TAB or another control character
// (or a space) would reach the Location header raw: such a next goes to
// the console's front page instead.
func TestConsoleNextHoldsNoControlCharacters(t *testing.T) {
	e := newAdminEnv(t, adminToken)
	for _, next := range []string{"/admin/\tsweeps", "/admin/sweeps\x00", "/admin/\x7fx", "/admin/\u0085x",
		"/admin/\x1bx", "/admin/\rx", "/admin/ sweeps"} {
		resp, _ := e.browser().do("POST", "/admin/signin", url.Values{"token": {adminToken}, "next": {next}})
		require.Equal(t, http.StatusSeeOther, resp.StatusCode)
		require.Equal(t, "/admin/", resp.Header.Get("Location"), "next %q", next)

		// Signed in already, the sign-in page sends to next at once.
		b := e.browser()
		b.signIn(adminToken)
		resp, _ = b.do("GET", "/admin/signin?next="+url.QueryEscape(next), nil)
		require.Equal(t, http.StatusSeeOther, resp.StatusCode)
		require.Equal(t, "/admin/", resp.Header.Get("Location"), "next %q", next)
		require.False(t, strings.ContainsFunc(resp.Header.Get("Location"), func(r rune) bool { return r < 0x20 || r == 0x7f }))
	}
	resp, _ := e.browser().do("POST", "/admin/signin", url.Values{"token": {adminToken}, "next": {"/admin/events?status=dead"}})
	require.Equal(t, "/admin/events?status=dead", resp.Header.Get("Location"), "a plain console path is kept")
}
