package e2e_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v2/jwa"
	"github.com/lestrrat-go/jwx/v2/jws"
	"github.com/stretchr/testify/require"

	kindemock "github.com/billsync/billsync/mocks/kinde"
	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/providers/kinde"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store/storetest"
)

// kindeHarness is the harness on Kinde: the fake Kinde sends signed JWT
// webhooks over HTTP to billsync's real intake (kinde.Verifier on the
// fake's key set); workers fetch through billsync's Kinde client on the
// fake's Management API. It counts the fake's requests by path.
type kindeHarness struct {
	*harness
	mu       sync.Mutex
	requests map[string]int
}

type kindeOptions struct {
	fake     kindemock.Options
	client   kinde.Config
	verifier kinde.VerifierConfig
	network  http.Handler
	// wrap, when set, sees each request to the fake before it does.
	wrap func(w http.ResponseWriter, r *http.Request) (handled bool)
}

func newKindeHarness(t *testing.T, cleanup func(func()), opts kindeOptions) *kindeHarness {
	t.Helper()
	h := &kindeHarness{requests: map[string]int{}}
	h.harness = newHarnessWith(t, cleanup, testenv.Kinde, testenv.Options{
		Network: opts.network,
		Kinde:   testenv.KindeOptions{Fake: opts.fake, Client: opts.client, Verifier: opts.verifier},
		Wrap: func(fake http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				h.mu.Lock()
				h.requests[r.URL.Path]++
				h.mu.Unlock()
				if opts.wrap != nil && opts.wrap(w, r) {
					return
				}
				fake.ServeHTTP(w, r)
			})
		},
	})
	return h
}

func (h *kindeHarness) count(path string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.requests[path]
}

func (h *kindeHarness) worker() *reconcile.Worker {
	h.t.Helper()
	return h.Worker(reconcile.WorkerConfig{Name: "kinde-test", Lease: time.Second})
}

// post sends body to the intake as Kinde would (webhook-id optional) and
// returns the status.
func (h *kindeHarness) post(body []byte, webhookID string) int {
	h.t.Helper()
	req, err := http.NewRequest(http.MethodPost, h.IntakeURL+"/webhooks/kinde", bytes.NewReader(body))
	require.NoError(h.t, err)
	req.Header.Set("Content-Type", "application/jwt")
	if webhookID != "" {
		req.Header.Set("webhook-id", webhookID)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(h.t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// tally counts the customer's stored events and their deliveries (copies
// included).
func (h *kindeHarness) tally(customer string) (events, receipts int) {
	h.t.Helper()
	for _, e := range storetest.CustomerEvents(h.t, h.Store, kinde.Provider, customer) {
		events++
		receipts += e.Receipts
	}
	return events, receipts
}

// grantDeltas returns the customer's grants as "plan +delta", oldest first.
func (h *kindeHarness) grantDeltas(customer string) []string {
	h.t.Helper()
	var out []string
	for _, g := range storetest.Grants(h.t, h.Store, kinde.Provider, customer) {
		out = append(out, fmt.Sprintf("%s %+d", g.Plan, g.Delta))
	}
	return out
}

// claimsAt are a Kinde billing webhook's claims about customer, sent at
// sent.
func claimsAt(eventID, customer string, sent time.Time) map[string]any {
	return map[string]any{"type": "customer.plan_changed", "event_id": eventID, "source": "admin",
		"timestamp": sent.UTC().Format(time.RFC3339), "event_timestamp": sent.UTC().Format(time.RFC3339),
		"data": map[string]any{"customer_id": customer}}
}

// TestKindeSeedLikeScenario: a customer on Free moves to Pro at Kinde;
// Kinde's plan change and payment arrive as copies (webhook-id), and the
// free agreement's older cancellation arrives last. billsync ends on Pro
// with balance 500: one Free grant, one Pro top-up, one event each.
func TestKindeSeedLikeScenario(t *testing.T) {
	t.Parallel()
	var held struct {
		sync.Mutex
		bodies [][]byte
		ids    []string
		types  []string
	}
	// The network holds each delivery back; the test replays them in the
	// scenario's order.
	network := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		held.Lock()
		held.bodies, held.ids = append(held.bodies, body), append(held.ids, r.Header.Get("webhook-id"))
		held.Unlock()
		w.WriteHeader(http.StatusOK)
	})
	h := newKindeHarness(t, t.Cleanup, kindeOptions{network: network})
	w := h.worker()
	ctx := context.Background()
	const customer = "customer_seed"
	h.SetPlan(customer, testenv.FreePlan)
	require.NoError(t, h.Store.Enqueue(ctx, kinde.Provider, customer, reconcile.TriggerResync))
	_, err := w.Drain(ctx)
	require.NoError(t, err)
	require.Equal(t, storetest.CustomerState{Plan: "free", Status: "active", Balance: 10, Grants: 1, Events: map[string]int{}}, h.state(customer))

	before := time.Now().Add(-time.Minute)
	h.SetPlan(customer, testenv.ProPlan)
	change := h.Send("customer.plan_changed", customer)
	payment := h.Send("customer.payment_succeeded", customer)
	// The cancellation happened before the change (event_timestamp) and
	// arrives last.
	_, err = h.Kinde.Fake.SendEvent(kindemock.Event{Type: "customer.agreement_cancelled", CustomerID: customer, At: before})
	require.NoError(t, err)
	h.Delivered()
	held.Lock()
	byID := map[string][]byte{}
	for i, id := range held.ids {
		byID[id] = held.bodies[i]
	}
	var cancellation string
	for _, id := range held.ids {
		if id != change.WebhookID && id != payment.WebhookID {
			cancellation = id
		}
	}
	held.Unlock()
	require.Len(t, byID, 3)

	order := []string{change.WebhookID, payment.WebhookID, change.WebhookID, payment.WebhookID, payment.WebhookID,
		change.WebhookID, cancellation, payment.WebhookID, payment.WebhookID}
	for i, id := range order {
		require.Equal(t, http.StatusOK, h.post(byID[id], id), "delivery %d", i+1)
		_, err := w.Drain(ctx)
		require.NoError(t, err)
	}
	got := h.state(customer)
	require.Equal(t, "pro", got.Plan)
	require.EqualValues(t, 500, got.Balance, "Free 10 topped up to Pro 500, once")
	events, receipts := h.tally(customer)
	require.Equal(t, 3, events)
	require.Equal(t, 9, receipts)
	require.Equal(t, []string{"free +10", "pro +490"}, h.grantDeltas(customer))
	require.Zero(t, got.Events[string(reconcile.EventPending)], "every event answered")
}

// TestKindeIntakeRefusesForgeries: nothing billsync cannot verify as
// Kinde's is stored. Each is 401 (413 for a body over the limit), and
// every table is as it was.
func TestKindeIntakeRefusesForgeries(t *testing.T) {
	t.Parallel()
	h := newKindeHarness(t, t.Cleanup, kindeOptions{})
	// A genuine delivery first, so the key set is fetched and the test
	// shows that refusals store nothing next to something stored.
	h.SetPlan("customer_real", testenv.ProPlan)
	h.Send("customer.plan_changed", "customer_real")
	h.Delivered()
	before := storetest.Tables(t, h.Store)

	kid, key := h.Kinde.Fake.Keys().Current()
	now := time.Now()
	good := claimsAt("event_forged", "customer_victim", now)
	signWith := func(alg jwa.SignatureAlgorithm, k any, kid string, c map[string]any) []byte {
		hdr := jws.NewHeaders()
		require.NoError(t, hdr.Set(jws.KeyIDKey, kid))
		payload, err := json.Marshal(c)
		require.NoError(t, err)
		token, err := jws.Sign(payload, jws.WithKey(alg, k, jws.WithProtectedHeaders(hdr)))
		require.NoError(t, err)
		return token
	}
	enc := func(v any) string {
		b, err := json.Marshal(v)
		require.NoError(t, err)
		return base64.RawURLEncoding.EncodeToString(b)
	}
	pubDER, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	require.NoError(t, err)
	pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER})
	other, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	forged := signWith(jwa.RS256, other, kid, good) // right kid, wrong key
	old := claimsAt("event_old", "customer_victim", now.Add(-kinde.DefaultReplayWindow-time.Hour))
	expired, err := h.Kinde.Fake.Keys().Sign(old)
	require.NoError(t, err)
	huge := append([]byte(enc(map[string]any{"alg": "RS256", "kid": kid})+"."), bytes.Repeat([]byte("A"), 2<<20)...)

	for name, tc := range map[string]struct {
		body []byte
		want int
	}{
		"forged signature":                {forged, http.StatusUnauthorized},
		"alg none":                        {[]byte(enc(map[string]any{"alg": "none", "kid": kid}) + "." + enc(good) + "."), http.StatusUnauthorized},
		"HS256 keyed with the public key": {signWith(jwa.HS256, pubPEM, kid, good), http.StatusUnauthorized},
		"RS384 with Kinde's key":          {signWith(jwa.RS384, key, kid, good), http.StatusUnauthorized},
		"unknown kid after refetch":       {signWith(jwa.RS256, other, "kinde_key_nobody", good), http.StatusUnauthorized},
		"expired replay window":           {expired, http.StatusUnauthorized},
		"JSON body":                       {[]byte(`{"type":"customer.plan_changed","data":{"customer_id":"customer_victim"}}`), http.StatusUnauthorized},
		"oversized body":                  {huge, http.StatusRequestEntityTooLarge},
	} {
		t.Run(name, func(t *testing.T) {
			require.Equal(t, tc.want, h.post(tc.body, "msg_forged"))
		})
	}
	require.Equal(t, before, storetest.Tables(t, h.Store), "a refused delivery stores nothing in any table")
}

// TestKindeCopiesDeduplicate: copies of one token are one event, by its
// signed event_id, with or without a webhook-id.
func TestKindeCopiesDeduplicate(t *testing.T) {
	t.Parallel()
	h := newKindeHarness(t, t.Cleanup, kindeOptions{fake: kindemock.Options{Faults: kindemock.Faults{DuplicateCopies: 2}}})
	ctx := context.Background()
	h.SetPlan("customer_copies", testenv.TeamPlan)
	sent := h.Send("customer.plan_changed", "customer_copies")
	h.Delivered()
	events, receipts := h.tally("customer_copies")
	require.Equal(t, 1, events, "three copies of webhook-id %s are one event", sent.WebhookID)
	require.Equal(t, 3, receipts)
	ev, err := h.Store.EventByKey(ctx, kinde.Provider, reconcile.DedupeKeyOf(sent.EventID))
	require.NoError(t, err, "deduplicated on the signed event_id")
	require.Equal(t, reconcile.EventPending, ev.Status)

	// Without webhook-id (a proxy that drops the header): the signed
	// event_id is the key.
	token, err := h.Kinde.Fake.Keys().Sign(claimsAt("event_no_header", "customer_noheader", time.Now()))
	require.NoError(t, err)
	for range 3 {
		require.Equal(t, http.StatusOK, h.post(token, ""))
	}
	events, receipts = h.tally("customer_noheader")
	require.Equal(t, 1, events)
	require.Equal(t, 3, receipts)
	_, err = h.Store.EventByKey(ctx, kinde.Provider, reconcile.DedupeKeyOf("event_no_header"))
	require.NoError(t, err, "deduplicated on event_id")

	w := h.worker()
	_, err = w.Drain(ctx)
	require.NoError(t, err)
	got := h.state("customer_copies")
	require.Equal(t, "team", got.Plan)
	require.EqualValues(t, 2000, got.Balance)
	require.Equal(t, 1, got.Grants)
	require.Equal(t, map[string]int{string(reconcile.EventApplied): 1}, got.Events)
}

// TestKindeKeyRotation: Kinde starts signing with a new key. The first
// token with the new kid costs one key-set refetch and is accepted; a
// flood of tokens with unknown kids costs no more fetches.
func TestKindeKeyRotation(t *testing.T) {
	t.Parallel()
	h := newKindeHarness(t, t.Cleanup, kindeOptions{})
	h.SetPlan("customer_rot", testenv.ProPlan)
	h.Send("customer.plan_changed", "customer_rot")
	h.Delivered()
	fetches := h.Kinde.Fake.Keys().Fetches()
	require.EqualValues(t, 1, fetches, "the first delivery fetched the key set once")

	newKid, err := h.Kinde.Fake.Keys().Rotate()
	require.NoError(t, err)
	token, err := h.Kinde.Fake.Keys().Sign(claimsAt("event_rotated", "customer_rot", time.Now()))
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, h.post(token, "msg_rotated"), "signed with the new key %s", newKid)
	require.EqualValues(t, fetches+1, h.Kinde.Fake.Keys().Fetches(), "one refetch for the new kid")

	other, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	for i := range 20 {
		hdr := jws.NewHeaders()
		require.NoError(t, hdr.Set(jws.KeyIDKey, "kinde_unknown_"+strings.Repeat("x", i+1)))
		payload, err := json.Marshal(claimsAt("event_flood", "customer_rot", time.Now()))
		require.NoError(t, err)
		tok, err := jws.Sign(payload, jws.WithKey(jwa.RS256, other, jws.WithProtectedHeaders(hdr)))
		require.NoError(t, err)
		require.Equal(t, http.StatusUnauthorized, h.post(tok, "msg_flood"))
	}
	require.EqualValues(t, fetches+1, h.Kinde.Fake.Keys().Fetches(), "unknown kids within the refetch interval fetch nothing")
	events, _ := h.tally("customer_rot")
	require.Equal(t, 2, events, "the first and the rotated events stored; none of the flood")
}

// TestKindeTokenExpiryAndRateLimit: the M2M token expires between two
// reconciles and is renewed; a 429 with RateLimit-Reset is waited out and
// the fetch then succeeds.
func TestKindeTokenExpiryAndRateLimit(t *testing.T) {
	t.Parallel()
	var offset atomic.Int64 // the shared clock's lead over real time
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	var throttle atomic.Int32 // agreements requests still to answer 429
	h := newKindeHarness(t, t.Cleanup, kindeOptions{
		fake:     kindemock.Options{TokenTTL: 10 * time.Minute, Now: now},
		client:   kinde.Config{Now: now},
		verifier: kinde.VerifierConfig{Now: now},
		wrap: func(w http.ResponseWriter, r *http.Request) bool {
			if r.URL.Path == "/api/v1/billing/agreements" && throttle.Add(-1) >= 0 {
				w.Header().Set("RateLimit-Reset", "1")
				w.WriteHeader(http.StatusTooManyRequests)
				return true
			}
			return false
		},
	})
	w := h.worker()
	ctx := context.Background()
	const customer = "customer_token"
	h.SetPlan(customer, testenv.FreePlan)
	h.Send("customer.plan_created", customer)
	h.Delivered()
	_, err := w.Drain(ctx)
	require.NoError(t, err)
	require.Equal(t, "free", h.state(customer).Plan)
	require.Equal(t, 1, h.count("/oauth2/token"))

	offset.Add(int64(11 * time.Minute)) // the token has expired at the fake and the client
	h.SetPlan(customer, testenv.ProPlan)
	h.Send("customer.plan_changed", customer)
	h.Delivered()
	_, err = w.Drain(ctx)
	require.NoError(t, err)
	require.Equal(t, "pro", h.state(customer).Plan)
	require.Equal(t, 2, h.count("/oauth2/token"), "renewed once")

	throttle.Store(1)
	h.SetPlan(customer, testenv.TeamPlan)
	h.Send("customer.plan_changed", customer)
	h.Delivered()
	agreementsBefore := h.count("/api/v1/billing/agreements")
	start := time.Now()
	_, err = w.Drain(ctx)
	require.NoError(t, err)
	require.GreaterOrEqual(t, time.Since(start), 900*time.Millisecond, "RateLimit-Reset: 1 was waited")
	require.Equal(t, agreementsBefore+2, h.count("/api/v1/billing/agreements"), "one 429, then the fetch")
	got := h.state(customer)
	require.Equal(t, "team", got.Plan)
	require.EqualValues(t, 2000, got.Balance)
}

// TestKindeAccountTakesTheUserRefFromEvents: Kinde's agreements do not name
// the app's user, its webhooks do (data.user_id): the account takes it from
// the newest event and keeps it through reconciles that have no event (a
// resync), so support staff and the app can find it by that id.
func TestKindeAccountTakesTheUserRefFromEvents(t *testing.T) {
	t.Parallel()
	h := newKindeHarness(t, t.Cleanup, kindeOptions{})
	w := h.worker()
	ctx := context.Background()
	const customer = "customer_ref"
	h.SetPlan(customer, testenv.ProPlan)
	_, err := h.Kinde.Fake.SendEvent(kindemock.Event{Type: "customer.plan_changed", CustomerID: customer,
		Data: map[string]any{"user_id": "kp_ada"}})
	require.NoError(t, err)
	h.Delivered()
	_, err = w.Drain(ctx)
	require.NoError(t, err)
	a, err := h.Store.Account(ctx, kinde.Provider, customer)
	require.NoError(t, err)
	require.Equal(t, "pro", a.Plan)
	require.Equal(t, "kp_ada", a.UserRef)

	require.NoError(t, h.Store.Enqueue(ctx, kinde.Provider, customer, reconcile.TriggerResync))
	_, err = w.Drain(ctx)
	require.NoError(t, err)
	a, err = h.Store.Account(ctx, kinde.Provider, customer)
	require.NoError(t, err)
	require.Equal(t, "kp_ada", a.UserRef, "a reconcile without an event keeps the reference")
}
