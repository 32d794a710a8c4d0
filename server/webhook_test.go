package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v82/webhook"

	kindemock "github.com/billsync/billsync/mocks/kinde"
	"github.com/billsync/billsync/providers/kinde"
	"github.com/billsync/billsync/providers/stripe"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/server"
	"github.com/billsync/billsync/store"
	"github.com/billsync/billsync/store/storetest"
)

func TestMain(m *testing.M) { os.Exit(storetest.Main(m)) }

const (
	secretA = "whsec_test_a"
	secretB = "whsec_test_b"
)

// newIntake returns a billsync HTTP server storing into st.
func newIntake(t *testing.T, st *store.Store) *httptest.Server {
	t.Helper()
	srv, _ := startIntake(t, intakeConfig(t, st))
	return srv
}

// intakeConfig is newIntake's configuration, for tests that change it.
func intakeConfig(t *testing.T, st *store.Store) server.Config {
	t.Helper()
	v, err := stripe.NewVerifier([]string{secretA, secretB}, stripe.DefaultTolerance)
	require.NoError(t, err)
	return server.Config{Inbox: st, Verifiers: []server.Verifier{v}, Ready: st.Ping}
}

// startIntake serves cfg on a loopback port until the test ends.
func startIntake(t *testing.T, cfg server.Config) (*httptest.Server, *server.Server) {
	t.Helper()
	s := server.New(cfg)
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return srv, s
}

func eventBody(id, typ, customer, apiVersion string) []byte {
	return fmt.Appendf(nil, `{"id":%q,"object":"event","api_version":%q,"created":%d,"type":%q,`+
		`"data":{"object":{"id":"sub_1","object":"subscription","customer":%q}}}`,
		id, apiVersion, time.Now().Unix(), typ, customer)
}

type answer struct {
	code   int
	header http.Header
	body   map[string]any
}

func deliver(t *testing.T, url string, body []byte, header string) answer {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+"/webhooks/stripe", bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if header != "" {
		req.Header.Set("Stripe-Signature", header)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	a := answer{code: resp.StatusCode, header: resp.Header}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&a.body))
	return a
}

func sign(body []byte, secret string, at time.Time) string {
	return webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: secret, Timestamp: at}).Header
}

func TestIntakeConcurrentCopies(t *testing.T) {
	st := storetest.NewStore(t)
	srv := newIntake(t, st)
	body := eventBody("evt_copy", "customer.subscription.updated", "cus_1", "2025-08-27.basil")

	var wg sync.WaitGroup
	answers := make([]answer, 3)
	start := make(chan struct{})
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			answers[i] = deliver(t, srv.URL, body, sign(body, secretA, time.Now()))
		}()
	}
	close(start)
	wg.Wait()

	statuses := map[string]int{}
	for _, a := range answers {
		require.Equal(t, http.StatusOK, a.code)
		statuses[a.body["status"].(string)]++
	}
	require.Equal(t, map[string]int{"stored": 1, "duplicate": 2}, statuses)

	ev := storetest.EventByKey(t, st, "stripe", "evt_copy")
	require.Equal(t, 3, ev.SeenCount)
	require.Equal(t, reconcile.EventPending, ev.Status)
	counts := storetest.Counts(t, st)
	require.Equal(t, 1, counts["inbox_events"])
	require.Equal(t, 3, counts["receipts"])
	require.Equal(t, 1, counts["reconcile_queue"])
	require.Zero(t, counts["accounts"], "the intake must never apply anything")

	queue := storetest.Queue(t, st)
	require.Len(t, queue, 1)
	require.Equal(t, "cus_1", queue[0].CustomerID)
	require.True(t, queue[0].Due)
}

// TestIntakeKeepsEachPayload: body buffers are recycled once a delivery is
// stored; concurrent deliveries must each keep their own bytes.
func TestIntakeKeepsEachPayload(t *testing.T) {
	st := storetest.NewStore(t)
	srv := newIntake(t, st)
	const n = 64
	bodies := make([][]byte, n)
	var wg sync.WaitGroup
	for i := range bodies {
		bodies[i] = eventBody(fmt.Sprintf("evt_own_%d", i), "invoice.paid", fmt.Sprintf("cus_own_%d", i), "2025-08-27.basil")
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := deliver(t, srv.URL, bodies[i], sign(bodies[i], secretA, time.Now()))
			require.Equal(t, http.StatusOK, a.code)
		}()
	}
	wg.Wait()
	for i, body := range bodies {
		ev := storetest.EventByKey(t, st, "stripe", fmt.Sprintf("evt_own_%d", i))
		require.Equal(t, string(body), string(ev.Payload))
	}
}

func TestIntakeRefusesAndStoresNothing(t *testing.T) {
	st := storetest.NewStore(t)
	srv := newIntake(t, st)
	body := eventBody("evt_bad", "customer.subscription.updated", "cus_1", "2025-08-27.basil")
	huge := append(eventBody("evt_huge", "invoice.paid", "cus_1", "2025-08-27.basil"), bytes.Repeat([]byte(" "), server.MaxBodyBytes)...)

	tests := []struct {
		name   string
		body   []byte
		header string
		code   int
	}{
		{"ErrForged", body, strings.Replace(sign(body, secretA, time.Now()), "v1=", "v1=00", 1), http.StatusUnauthorized},
		{"ErrWrongSecret", body, sign(body, "whsec_someone_else", time.Now()), http.StatusUnauthorized},
		{"ErrTooOld", body, sign(body, secretA, time.Now().Add(-301*time.Second)), http.StatusUnauthorized},
		{"ErrMissingHeader", body, "", http.StatusUnauthorized},
		{"ErrTooLarge", huge, sign(huge, secretA, time.Now()), http.StatusRequestEntityTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := deliver(t, srv.URL, tt.body, tt.header)
			require.Equal(t, tt.code, a.code)
			require.NotEmpty(t, a.body["error"])
		})
	}
	for table, n := range storetest.Counts(t, st) {
		require.Zero(t, n, "table %s", table)
	}
}

func TestIntakeAcceptsEitherRotatedSecret(t *testing.T) {
	st := storetest.NewStore(t)
	srv := newIntake(t, st)
	for i, secret := range []string{secretA, secretB} {
		body := eventBody(fmt.Sprintf("evt_rot_%d", i), "invoice.paid", "cus_rot", "2025-08-27.basil")
		a := deliver(t, srv.URL, body, sign(body, secret, time.Now()))
		require.Equal(t, http.StatusOK, a.code, secret)
		require.Equal(t, "stored", a.body["status"])
	}
	require.Equal(t, 2, storetest.Counts(t, st)["inbox_events"])
}

func TestIntakeAcceptsOlderAPIVersion(t *testing.T) {
	st := storetest.NewStore(t)
	srv := newIntake(t, st)
	body := eventBody("evt_old", "customer.subscription.updated", "cus_old", "2024-06-20")
	a := deliver(t, srv.URL, body, sign(body, secretA, time.Now()))
	require.Equal(t, http.StatusOK, a.code)
	require.Equal(t, "stored", a.body["status"])

	ev := storetest.EventByKey(t, st, "stripe", "evt_old")
	require.Equal(t, "2024-06-20", ev.APIVersion)
	require.Equal(t, body, ev.Payload, "the raw body is kept byte for byte")
	require.Equal(t, 1, storetest.Counts(t, st)["reconcile_queue"])
}

func TestIntakeStoresIgnoredEventsWithReason(t *testing.T) {
	st := storetest.NewStore(t)
	srv := newIntake(t, st)
	tests := []struct{ id, typ, customer, reason string }{
		{"evt_nocust", "invoice.paid", "", "event names no customer"},
		{"evt_product", "product.created", "cus_1", `event type "product.created" does not affect billing state`},
	}
	for _, tt := range tests {
		body := eventBody(tt.id, tt.typ, tt.customer, "2025-08-27.basil")
		a := deliver(t, srv.URL, body, sign(body, secretA, time.Now()))
		require.Equal(t, http.StatusOK, a.code)
		require.Equal(t, "ignored", a.body["status"])
		require.Equal(t, tt.reason, a.body["reason"])

		ev := storetest.EventByKey(t, st, "stripe", tt.id)
		require.Equal(t, reconcile.EventIgnored, ev.Status)
		require.Equal(t, tt.reason, ev.Outcome)
	}
	counts := storetest.Counts(t, st)
	require.Equal(t, 2, counts["inbox_events"])
	require.Equal(t, 2, counts["receipts"])
	require.Zero(t, counts["reconcile_queue"], "an ignored event queues nothing")
}

// TestIntakeStoresHostileContentAsIgnored: validly signed events whose
// content PostgreSQL cannot hold as is (NUL in text, absurd times, ids over
// the index row limit) used to get a 500 and be retried for days. Each is
// stored once, as ignored with the reason, its payload byte for byte, and a
// copy finds it again.
func TestIntakeStoresHostileContentAsIgnored(t *testing.T) {
	st := storetest.NewStore(t)
	srv := newIntake(t, st)
	now := strconv.FormatInt(time.Now().Unix(), 10)
	hostile := func(id, typ, apiVersion, created, customer string) []byte {
		return []byte(`{"id":` + id + `,"object":"event","type":` + typ + `,"api_version":` + apiVersion + `,"created":` + created +
			`,"data":{"object":{"id":"sub_1","object":"subscription","customer":` + customer + `}}}`)
	}
	tests := []struct {
		name   string
		body   []byte
		reason string
	}{
		{"NULInID", hostile(`"evt_\u0000id"`, `"invoice.paid"`, `"v1"`, now, `"cus_1"`), "event id contains a NUL byte"},
		{"NULInType", hostile(`"evt_nul_type"`, `"invoice.\u0000paid"`, `"v1"`, now, `"cus_1"`), "event type contains a NUL byte"},
		{"NULInAPIVersion", hostile(`"evt_nul_ver"`, `"invoice.paid"`, `"2025-\u0000"`, now, `"cus_1"`), "api_version contains a NUL byte"},
		{"NULInCustomer", hostile(`"evt_nul_cus"`, `"invoice.paid"`, `"v1"`, now, `"cus_\u0000"`), "customer id contains a NUL byte"},
		{"CreatedMaxInt64", hostile(`"evt_max"`, `"invoice.paid"`, `"v1"`, "9223372036854775807", `"cus_1"`),
			"event time (created 9223372036854775807) is outside the years 2000-2200"},
		{"CreatedNegative", hostile(`"evt_neg"`, `"invoice.paid"`, `"v1"`, "-1000000000000000", `"cus_1"`),
			"event time (created -1000000000000000) is outside the years 2000-2200"},
		{"LongID", hostile(`"evt_`+strings.Repeat("x", 4096)+`"`, `"invoice.paid"`, `"v1"`, now, `"cus_1"`), "event id longer than 255 bytes"},
		{"LongCustomer", hostile(`"evt_long_cus"`, `"invoice.paid"`, `"v1"`, now, `"cus_`+strings.Repeat("c", 4096)+`"`),
			"customer id longer than 255 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := deliver(t, srv.URL, tt.body, sign(tt.body, secretA, time.Now()))
			require.Equal(t, http.StatusOK, a.code, a.body)
			require.Equal(t, "ignored", a.body["status"])
			require.Equal(t, tt.reason, a.body["reason"])
			key := a.body["event"].(string)

			a = deliver(t, srv.URL, tt.body, sign(tt.body, secretA, time.Now()))
			require.Equal(t, http.StatusOK, a.code, a.body)
			require.Equal(t, "duplicate", a.body["status"], "a copy must find the stored event")

			ev := storetest.EventByKey(t, st, "stripe", key)
			require.Equal(t, reconcile.EventIgnored, ev.Status)
			require.Equal(t, tt.reason, ev.Outcome)
			require.Equal(t, 2, ev.SeenCount)
			require.Equal(t, 2, ev.Receipts)
			require.Equal(t, tt.body, ev.Payload, "the raw body is kept byte for byte")
			if strings.HasPrefix(tt.name, "Created") {
				require.Nil(t, ev.EventTime, "an absurd time is stored as unknown")
			}
		})
	}
	counts := storetest.Counts(t, st)
	require.Equal(t, len(tests), counts["inbox_events"])
	require.Equal(t, 2*len(tests), counts["receipts"])
	require.Zero(t, counts["reconcile_queue"], "an ignored event queues nothing")
}

// failingInbox stands for a store that fails in a way nobody planned for.
type failingInbox struct{ err error }

func (f failingInbox) StoreReceipt(context.Context, reconcile.Receipt) (reconcile.Stored, error) {
	return reconcile.Stored{}, f.err
}

func TestIntakeNeverAnswers200ForUnstoredWork(t *testing.T) {
	v, err := stripe.NewVerifier([]string{secretA}, 0)
	require.NoError(t, err)
	tests := map[string]struct {
		err  error
		code int
	}{
		"Unexpected":  {errors.New("disk on fire"), http.StatusInternalServerError},
		"Unavailable": {fmt.Errorf("commit: %w", reconcile.ErrStoreUnavailable), http.StatusServiceUnavailable},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			srv := httptest.NewServer(server.New(server.Config{Inbox: failingInbox{tt.err}, Verifiers: []server.Verifier{v}}))
			defer srv.Close()
			body := eventBody("evt_x", "invoice.paid", "cus_1", "2025-08-27.basil")
			a := deliver(t, srv.URL, body, sign(body, secretA, time.Now()))
			require.Equal(t, tt.code, a.code)
			require.NotContains(t, a.body, "status")
		})
	}
}

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
	require.Contains(t, logged[0], "WARN provider unavailable")
	require.Contains(t, logged[0], "kinde key set unavailable")
	require.NotContains(t, logged[0], "store")
}
