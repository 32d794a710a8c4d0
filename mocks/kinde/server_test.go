package kinde_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/mocks/inproc"
	kindemock "github.com/billsync/billsync/mocks/kinde"
	"github.com/billsync/billsync/providers/kinde"
)

// receiver records webhook bodies and answers with the statuses given, in
// turn (200 once they run out).
type receiver struct {
	mu       sync.Mutex
	bodies   [][]byte
	ids      []string
	statuses []int
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.bodies = append(rc.bodies, body)
	rc.ids = append(rc.ids, r.Header.Get("webhook-id"))
	status := http.StatusOK
	if len(rc.statuses) > 0 {
		status, rc.statuses = rc.statuses[0], rc.statuses[1:]
	}
	w.WriteHeader(status)
}

func start(t *testing.T, opts kindemock.Options) (*kindemock.Server, *httptest.Server) {
	t.Helper()
	fake, err := kindemock.New(opts)
	require.NoError(t, err)
	srv := httptest.NewServer(fake)
	t.Cleanup(func() { srv.Close(); fake.Close() })
	return fake, srv
}

// TestSentWebhooksVerify: what the fake sends is a token billsync's
// verifier accepts, with webhook-id, the customer and the type; copies
// share the webhook-id.
func TestSentWebhooksVerify(t *testing.T) {
	fake, srv := start(t, kindemock.Options{Faults: kindemock.Faults{DuplicateCopies: 2, Seed: 1}})
	rc := &receiver{}
	hook := httptest.NewServer(rc)
	t.Cleanup(hook.Close)
	fake.AddWebhookEndpoint(hook.URL)
	sent, err := fake.SendEvent(kindemock.Event{Type: "customer.plan_changed", CustomerID: "customer_1"})
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, fake.WaitIdle(ctx))

	v, err := kinde.NewVerifier(ctx, kinde.VerifierConfig{Domain: srv.URL})
	require.NoError(t, err)
	require.Len(t, rc.bodies, 3, "the event and two copies")
	for i, body := range rc.bodies {
		require.Equal(t, sent.WebhookID, rc.ids[i])
		d, err := v.Verify(context.Background(), http.Header{"Webhook-Id": {rc.ids[i]}}, body)
		require.NoError(t, err)
		require.Equal(t, sent.EventID, d.Event.DedupeKey, "the signed event_id")
		require.Equal(t, sent.EventID, d.Event.EventID)
		require.Equal(t, "customer_1", d.Event.CustomerID)
		require.Equal(t, "customer.plan_changed", d.Event.Type)
	}
}

// TestWebhooksRetryOnKindesSchedule: a delivery not answered 200 is sent
// again on the (compressed) schedule until it is.
func TestWebhooksRetryOnKindesSchedule(t *testing.T) {
	fake, _ := start(t, kindemock.Options{TimeFactor: 0.001}) // 5 s → 5 ms, 30 s → 30 ms
	rc := &receiver{statuses: []int{500, 503}}
	hook := httptest.NewServer(rc)
	t.Cleanup(hook.Close)
	fake.AddWebhookEndpoint(hook.URL)
	_, err := fake.SendEvent(kindemock.Event{Type: "customer.payment_succeeded", CustomerID: "customer_1"})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, fake.WaitIdle(ctx))
	var statuses []int
	for _, d := range fake.Deliveries() {
		statuses = append(statuses, d.Status)
	}
	require.Equal(t, []int{500, 503, 200}, statuses)
}

func TestDroppedWebhooksAreNeverSent(t *testing.T) {
	fake, _ := start(t, kindemock.Options{Faults: kindemock.Faults{DropRate: 1}})
	rc := &receiver{}
	hook := httptest.NewServer(rc)
	t.Cleanup(hook.Close)
	fake.AddWebhookEndpoint(hook.URL)
	_, err := fake.SendEvent(kindemock.Event{Type: "customer.plan_changed", CustomerID: "customer_1"})
	require.NoError(t, err)
	require.NoError(t, fake.WaitIdle(context.Background()))
	require.Empty(t, rc.bodies)
}

// TestKeyRotation: after a rotation the fake signs with the new key and
// publishes both.
func TestKeyRotation(t *testing.T) {
	fake, srv := start(t, kindemock.Options{})
	before, _ := fake.Keys().Current()
	resp, err := http.Post(srv.URL+"/_mock/keys/rotate", "application/json", nil)
	require.NoError(t, err)
	resp.Body.Close()
	after, _ := fake.Keys().Current()
	require.NotEqual(t, before, after)
	resp, err = http.Get(srv.URL + "/.well-known/jwks.json")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Contains(t, string(body), before)
	require.Contains(t, string(body), after)
}

// TestStaleReads: with Faults.StaleReads the billing API reads a
// customer's agreements as they were that long ago, as the fake Stripe
// reads its objects: first set within the window, none yet; changed
// within it, the previous ones.
func TestStaleReads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake, err := kindemock.New(kindemock.Options{Faults: kindemock.Faults{StaleReads: time.Minute}})
		require.NoError(t, err)
		defer fake.Close()
		api := &http.Client{Transport: inproc.Transport{Handler: fake}}
		resp, err := api.PostForm("http://kinde.test/oauth2/token", url.Values{"grant_type": {"client_credentials"},
			"client_id": {kindemock.DefaultClientID}, "client_secret": {kindemock.DefaultClientSecret}, "audience": {"http://kinde.test/api"}})
		require.NoError(t, err)
		var token struct {
			AccessToken string `json:"access_token"`
		}
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&token))
		resp.Body.Close()
		plans := func() []string {
			req, err := http.NewRequest(http.MethodGet, "http://kinde.test/api/v1/billing/agreements?customer_id=customer_1", nil)
			require.NoError(t, err)
			req.Header.Set("Authorization", "Bearer "+token.AccessToken)
			resp, err := api.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			require.Equal(t, http.StatusOK, resp.StatusCode)
			var body struct{ Agreements []kindemock.Agreement }
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
			var codes []string
			for _, a := range body.Agreements {
				codes = append(codes, a.PlanCode)
			}
			return codes
		}

		fake.SetAgreements("customer_1", []kindemock.Agreement{{PlanCode: "pro"}})
		require.Empty(t, plans(), "set within the window: not found yet")
		time.Sleep(time.Minute + time.Second)
		require.Equal(t, []string{"pro"}, plans())
		fake.SetAgreements("customer_1", []kindemock.Agreement{{PlanCode: "team"}})
		require.Equal(t, []string{"pro"}, plans(), "changed within the window: the previous plan")
		time.Sleep(time.Minute + time.Second)
		require.Equal(t, []string{"team"}, plans())
	})
}
