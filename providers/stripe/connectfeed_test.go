package stripe_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/providers/stripe"
	"github.com/billsync/billsync/reconcile"
)

// connectServer answers GET /v1/accounts (two pages) and GET /v1/events on
// behalf of a connected account (Stripe-Account), one event naming its
// account and one that does not; an account in hot answers 429
// global-rate. It records each request's Stripe-Account.
type connectServer struct {
	mu       sync.Mutex
	accounts []string // Stripe-Account of each events request
	hot      map[string]bool
}

func (s *connectServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	account := r.Header.Get("Stripe-Account")
	w.Header().Set("Content-Type", "application/json")
	switch r.URL.Path {
	case "/v1/accounts":
		if r.URL.Query().Get("starting_after") == "" {
			fmt.Fprint(w, `{"object":"list","has_more":true,"data":[{"id":"acct_1","object":"account"},{"id":"acct_2","object":"account"}]}`)
			return
		}
		fmt.Fprint(w, `{"object":"list","has_more":false,"data":[{"id":"acct_3","object":"account"}]}`)
	case "/v1/events":
		s.mu.Lock()
		s.accounts = append(s.accounts, account)
		hot := s.hot[account]
		s.mu.Unlock()
		if hot {
			w.Header().Set("Stripe-Rate-Limited-Reason", "global-rate")
			w.WriteHeader(http.StatusTooManyRequests)
			fmt.Fprint(w, `{"error":{"type":"invalid_request_error","code":"rate_limit","message":"Too many requests"}}`)
			return
		}
		ev := func(id, accountField string) string {
			return fmt.Sprintf(`{"id":%q,"object":"event",%s"api_version":"2025-08-27.basil","created":1764584400,"type":"customer.subscription.updated","livemode":false,"pending_webhooks":0,`+
				`"data":{"object":{"id":"sub_1","object":"subscription","customer":"cus_1","status":"active"}}}`, id, accountField)
		}
		fmt.Fprintf(w, `{"object":"list","has_more":false,"data":[%s,%s]}`, ev("evt_2", fmt.Sprintf(`"account":%q,`, account)), ev("evt_1", ""))
	default:
		http.NotFound(w, r)
	}
}

func connectClient(t *testing.T, srv *httptest.Server, policy reconcile.ConnectPolicy) *stripe.Client {
	t.Helper()
	c, err := stripe.NewClient(stripe.Config{APIKey: "sk_test_x", BaseURL: srv.URL, Connect: policy, RetryMax: -1})
	require.NoError(t, err)
	return c
}

// TestListConnectedEvents: a connected account's events are listed on its
// behalf (Stripe-Account) and keyed under it, an entry that names no
// account too; an account billsync does not serve is never read; the
// accounts list pages to its end.
func TestListConnectedEvents(t *testing.T) {
	ctx := context.Background()
	s := &connectServer{}
	srv := httptest.NewServer(s)
	defer srv.Close()
	c := connectClient(t, srv, reconcile.ConnectPolicy{Mode: reconcile.ConnectListed, Listed: []string{"acct_1"}})

	page, err := c.ListConnectedEvents(ctx, "acct_1", time.Now().Add(-time.Hour), "")
	require.NoError(t, err)
	require.Len(t, page.Events, 2)
	for _, e := range page.Events {
		require.Empty(t, e.Event.IgnoreReason)
		require.Equal(t, "acct_1/"+e.Event.EventID, e.Event.DedupeKey)
		require.Equal(t, "acct_1/cus_1", e.Event.CustomerID)
	}
	_, err = c.ListConnectedEvents(ctx, "acct_2", time.Now().Add(-time.Hour), "")
	var perm *reconcile.PermanentError
	require.ErrorAs(t, err, &perm)
	require.Equal(t, []string{"acct_1"}, s.accounts, "an account not served was read")

	var all []string
	for after := ""; ; {
		accounts, next, err := c.ListAccounts(ctx, after)
		require.NoError(t, err)
		all = append(all, accounts...)
		if after = next; after == "" {
			break
		}
	}
	require.Equal(t, []string{"acct_1", "acct_2", "acct_3"}, all)
}

// TestConnectedAccount429SlowsItAlone: a 429 answered on behalf of one
// connected account slows that account's requests alone: the platform's
// global rate, the operation's and the other accounts' stay whole.
func TestConnectedAccount429SlowsItAlone(t *testing.T) {
	ctx := context.Background()
	s := &connectServer{hot: map[string]bool{"acct_hot": true}}
	srv := httptest.NewServer(s)
	defer srv.Close()
	c := connectClient(t, srv, reconcile.ConnectPolicy{Mode: reconcile.ConnectAll})
	global, ops := c.Rates()

	_, err := c.ListConnectedEvents(ctx, "acct_hot", time.Now(), "")
	require.Error(t, err)
	_, err = c.ListConnectedEvents(ctx, "acct_cold", time.Now(), "")
	require.NoError(t, err)

	require.Less(t, c.AccountRate("acct_hot"), float64(stripe.OperationRate), "the account that answered 429 was not slowed")
	require.InDelta(t, float64(stripe.OperationRate), c.AccountRate("acct_cold"), 1e-9)
	globalAfter, opsAfter := c.Rates()
	require.InDelta(t, global, globalAfter, 1e-9, "one account's 429 slowed the platform's global rate")
	require.InDelta(t, ops["GET /v1/events"], opsAfter["GET /v1/events"], 1e-9)
}
