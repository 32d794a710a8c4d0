package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v82/webhook"

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

// newIntake returns a billsync HTTP server storing into a fresh database.
func newIntake(t *testing.T, st *store.Store) *httptest.Server {
	t.Helper()
	v, err := stripe.NewVerifier([]string{secretA, secretB}, stripe.DefaultTolerance)
	require.NoError(t, err)
	srv := httptest.NewServer(server.New(server.Config{Inbox: st, Verifiers: []server.Verifier{v}, Ready: st.Ping}))
	t.Cleanup(srv.Close)
	return srv
}

func eventBody(id, typ, customer, apiVersion string) []byte {
	return fmt.Appendf(nil, `{"id":%q,"object":"event","api_version":%q,"created":%d,"type":%q,`+
		`"data":{"object":{"id":"sub_1","object":"subscription","customer":%q}}}`,
		id, apiVersion, time.Now().Unix(), typ, customer)
}

type answer struct {
	code int
	body map[string]any
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
	var a answer
	a.code = resp.StatusCode
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&a.body))
	return a
}

func sign(body []byte, secret string, at time.Time) string {
	return webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: secret, Timestamp: at}).Header
}

// rowCounts counts the rows of every table the intake may write.
func rowCounts(t *testing.T, pool *pgxpool.Pool) map[string]int {
	t.Helper()
	counts := map[string]int{}
	for _, table := range []string{"inbox_events", "receipts", "reconcile_queue", "accounts", "ledger", "reconcile_log", "sweep_runs"} {
		var n int
		require.NoError(t, pool.QueryRow(context.Background(), "SELECT count(*) FROM "+table).Scan(&n))
		counts[table] = n
	}
	return counts
}

func TestIntakeConcurrentCopies(t *testing.T) {
	st := storetest.NewStore(t)
	pool := st.Pool()
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

	var seen int
	var status string
	require.NoError(t, pool.QueryRow(context.Background(),
		`SELECT seen_count, status FROM inbox_events WHERE provider = 'stripe' AND dedupe_key = 'evt_copy'`).Scan(&seen, &status))
	require.Equal(t, 3, seen)
	require.Equal(t, "pending", status)
	counts := rowCounts(t, pool)
	require.Equal(t, 1, counts["inbox_events"])
	require.Equal(t, 3, counts["receipts"])
	require.Equal(t, 1, counts["reconcile_queue"])
	require.Zero(t, counts["accounts"], "the intake must never apply anything")

	var customer string
	var due bool
	require.NoError(t, pool.QueryRow(context.Background(),
		`SELECT customer_id, due_at <= now() FROM reconcile_queue`).Scan(&customer, &due))
	require.Equal(t, "cus_1", customer)
	require.True(t, due)
}

func TestIntakeRefusesAndStoresNothing(t *testing.T) {
	st := storetest.NewStore(t)
	pool := st.Pool()
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
	for table, n := range rowCounts(t, pool) {
		require.Zero(t, n, "table %s", table)
	}
}

func TestIntakeAcceptsEitherRotatedSecret(t *testing.T) {
	st := storetest.NewStore(t)
	pool := st.Pool()
	srv := newIntake(t, st)
	for i, secret := range []string{secretA, secretB} {
		body := eventBody(fmt.Sprintf("evt_rot_%d", i), "invoice.paid", "cus_rot", "2025-08-27.basil")
		a := deliver(t, srv.URL, body, sign(body, secret, time.Now()))
		require.Equal(t, http.StatusOK, a.code, secret)
		require.Equal(t, "stored", a.body["status"])
	}
	require.Equal(t, 2, rowCounts(t, pool)["inbox_events"])
}

func TestIntakeAcceptsOlderAPIVersion(t *testing.T) {
	st := storetest.NewStore(t)
	pool := st.Pool()
	srv := newIntake(t, st)
	body := eventBody("evt_old", "customer.subscription.updated", "cus_old", "2024-06-20")
	a := deliver(t, srv.URL, body, sign(body, secretA, time.Now()))
	require.Equal(t, http.StatusOK, a.code)
	require.Equal(t, "stored", a.body["status"])

	var version string
	var payload []byte
	require.NoError(t, pool.QueryRow(context.Background(),
		`SELECT api_version, payload FROM inbox_events WHERE dedupe_key = 'evt_old'`).Scan(&version, &payload))
	require.Equal(t, "2024-06-20", version)
	require.Equal(t, body, payload, "the raw body is kept byte for byte")
	require.Equal(t, 1, rowCounts(t, pool)["reconcile_queue"])
}

func TestIntakeStoresIgnoredEventsWithReason(t *testing.T) {
	st := storetest.NewStore(t)
	pool := st.Pool()
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

		var status, outcome string
		require.NoError(t, pool.QueryRow(context.Background(),
			`SELECT status, outcome FROM inbox_events WHERE dedupe_key = $1`, tt.id).Scan(&status, &outcome))
		require.Equal(t, "ignored", status)
		require.Equal(t, tt.reason, outcome)
	}
	counts := rowCounts(t, pool)
	require.Equal(t, 2, counts["inbox_events"])
	require.Equal(t, 2, counts["receipts"])
	require.Zero(t, counts["reconcile_queue"], "an ignored event queues nothing")
}

// failingInbox stands for a store that fails in a way nobody planned for.
type failingInbox struct{ err error }

func (f failingInbox) StoreDelivery(context.Context, reconcile.Delivery) (reconcile.Stored, error) {
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
		"Unavailable": {fmt.Errorf("commit: %w", reconcile.ErrUnavailable), http.StatusServiceUnavailable},
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

// httpHandlerFunc defers to the handler get returns at request time.
type httpHandlerFunc func() *server.Server

func (f httpHandlerFunc) ServeHTTP(w http.ResponseWriter, r *http.Request) { f().ServeHTTP(w, r) }
