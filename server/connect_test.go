package server_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/providers/stripe"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/server"
	"github.com/billsync/billsync/store/storetest"
)

// TestIntakeConnectEvents: the intake of a live platform serving listed
// connected accounts, against a real store. An event of a served account,
// delivered to the Connect URL and signed with the Connect endpoint's
// secret, is stored and queued under (account, customer); the same ids in
// another served account are another event and another customer; an
// unlisted account's event, and a test-mode event reaching the live
// endpoint, are answered 200 and stored as ignored with the reason; an
// authorisation event is recorded. Nothing is answered 4xx.
func TestIntakeConnectEvents(t *testing.T) {
	const connectSecret = "whsec_connect"
	st := storetest.NewStore(t)
	v, err := stripe.NewVerifier([]string{secretA}, stripe.DefaultTolerance)
	require.NoError(t, err)
	v.ServeConnect(stripe.Connect{Secrets: []string{connectSecret}, Live: true,
		Policy: reconcile.ConnectPolicy{Mode: reconcile.ConnectListed, Listed: []string{"acct_a", "acct_b"}}})
	srv, _ := startIntake(t, server.Config{Inbox: st, Verifiers: []server.Verifier{v}, Ready: st.Ping, StoreTimeout: 2 * time.Second})
	post := func(path string, body []byte) answer {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, srv.URL+path, bytes.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Stripe-Signature", sign(body, connectSecret, time.Now()))
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		a := answer{code: resp.StatusCode}
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&a.body))
		return a
	}
	event := func(id, account, typ string, livemode bool) []byte {
		return fmt.Appendf(nil, `{"id":%q,"object":"event","account":%q,"created":%d,"type":%q,"livemode":%t,`+
			`"data":{"object":{"id":"sub_1","object":"subscription","customer":"cus_1","status":"active"}}}`,
			id, account, time.Now().Unix(), typ, livemode)
	}

	for _, path := range []string{"/webhooks/stripe/connect", "/webhooks/stripe"} {
		a := post(path, event("evt_1", "acct_a", "customer.subscription.updated", true))
		require.Equal(t, http.StatusOK, a.code, a.body)
	}
	require.Equal(t, "stored", post("/webhooks/stripe/connect", event("evt_1", "acct_b", "customer.subscription.updated", true)).body["status"])
	ev := storetest.EventByKey(t, st, "stripe", "acct_a/evt_1")
	require.Equal(t, "acct_a/cus_1", ev.CustomerID)
	require.Equal(t, 2, ev.SeenCount, "the copy to the other URL is the same event")
	require.Equal(t, "acct_b/cus_1", storetest.EventByKey(t, st, "stripe", "acct_b/evt_1").CustomerID)
	storetest.QueueRowOf(t, st, "stripe", "acct_a/cus_1")
	storetest.QueueRowOf(t, st, "stripe", "acct_b/cus_1")

	for reason, body := range map[string][]byte{
		reconcile.ReasonConnectUnlisted: event("evt_2", "acct_c", "customer.subscription.updated", true),
		stripe.ReasonTestMode:           event("evt_3", "acct_a", "customer.subscription.updated", false),
	} {
		a := post("/webhooks/stripe/connect", body)
		require.Equal(t, http.StatusOK, a.code, a.body)
		require.Equal(t, "ignored", a.body["status"])
		require.Equal(t, reason, a.body["reason"])
	}
	require.Len(t, storetest.Queue(t, st), 2, "nothing queued for what is ignored")

	require.Equal(t, http.StatusOK, post("/webhooks/stripe/connect", event("evt_4", "acct_c", "account.application.deauthorized", true)).code)
	accounts, err := st.ConnectedAccounts(t.Context(), "stripe")
	require.NoError(t, err)
	require.Len(t, accounts, 1)
	require.Equal(t, "acct_c", accounts[0].Account)
	require.False(t, accounts[0].Authorized)

	resp, err := http.Post(srv.URL+"/webhooks/kinde/connect", "application/json", bytes.NewReader([]byte(`{}`)))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
}
