package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/store/pgembed"
	"github.com/billsync/billsync/store/storetest"
)

// TestIntakeDatabaseOutage stops PostgreSQL under a running intake: the
// delivery must get 503 (so Stripe retries) and nothing may claim it was
// stored; once the database is back the same delivery is stored.
func TestIntakeDatabaseOutage(t *testing.T) {
	ctx := context.Background()
	st, cluster, cfg := storetest.PrivateStore(t)
	srv := newIntake(t, st)

	body := eventBody("evt_outage", "customer.subscription.updated", "cus_outage", "2025-08-27.basil")
	require.NoError(t, cluster.Stop(ctx))

	a := deliver(t, srv.URL, body, sign(body, secretA, time.Now()))
	require.Equal(t, http.StatusServiceUnavailable, a.code)
	require.NotContains(t, a.body, "status")
	resp, err := http.Get(srv.URL + "/readyz")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)

	restarted, err := pgembed.Start(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = restarted.Stop(context.Background()) })

	// The same delivery, retried as Stripe would: stored now, and as new.
	a = deliver(t, srv.URL, body, sign(body, secretA, time.Now()))
	require.Equal(t, http.StatusOK, a.code)
	require.Equal(t, "stored", a.body["status"])
	counts := storetest.Counts(t, st)
	require.Equal(t, 1, counts["inbox_events"])
	require.Equal(t, 1, counts["receipts"])
	require.Equal(t, 1, counts["reconcile_queue"])
}

// TestIntakeDatabaseCrash kills PostgreSQL (SIGKILL, no shutdown) while a
// delivery's statement is in flight: the intake's connection ends without a
// word (unexpected EOF). The delivery must get 503, nothing may be stored,
// and once the database is back the same delivery is stored.
func TestIntakeDatabaseCrash(t *testing.T) {
	ctx := context.Background()
	st, cluster, cfg := storetest.PrivateStore(t)
	// The test cluster commits asynchronously: without a checkpoint, a kill
	// could lose the migrations themselves.
	storetest.Checkpoint(t, st)
	srv := newIntake(t, st)

	// Hold the intake's statement in the server: it waits for a lock.
	lock := storetest.LockTable(t, st, "inbox_events")

	body := eventBody("evt_crash", "customer.subscription.updated", "cus_crash", "2025-08-27.basil")
	answered := make(chan answer, 1)
	go func() { answered <- deliverAsync(srv.URL, body, sign(body, secretA, time.Now())) }()
	lock.WaitForWaiter(t)
	pids := storetest.ServerPIDs(t, cluster.DataDir())
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	a := <-answered
	require.Equal(t, http.StatusServiceUnavailable, a.code, a.body)
	require.NotContains(t, a.body, "status")

	waitGone(t, pids)
	restarted, err := pgembed.Start(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = restarted.Stop(context.Background()) })

	// Stripe retries until it gets a 200. Idle connections of the pool died
	// with the server: a retry may meet one (503) before the pool notices.
	for range 5 {
		if a = deliver(t, srv.URL, body, sign(body, secretA, time.Now())); a.code == http.StatusOK {
			break
		}
		require.Equal(t, http.StatusServiceUnavailable, a.code, a.body)
	}
	require.Equal(t, http.StatusOK, a.code)
	require.Equal(t, "stored", a.body["status"], "nothing was committed before the crash")
	counts := storetest.Counts(t, st)
	require.Equal(t, 1, counts["inbox_events"])
	require.Equal(t, 1, counts["receipts"])
	require.Equal(t, 1, counts["reconcile_queue"])
}

// deliverAsync is deliver for a goroutine: failures come back as code 0.
func deliverAsync(url string, body []byte, header string) answer {
	req, err := http.NewRequest(http.MethodPost, url+"/webhooks/stripe", bytes.NewReader(body))
	if err != nil {
		return answer{body: map[string]any{"error": err.Error()}}
	}
	req.Header.Set("Stripe-Signature", header)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return answer{body: map[string]any{"error": err.Error()}}
	}
	defer resp.Body.Close()
	a := answer{code: resp.StatusCode}
	if err := json.NewDecoder(resp.Body).Decode(&a.body); err != nil {
		a.body = map[string]any{"decode": err.Error()}
	}
	return a
}

// waitGone returns once none of pids is alive (a new postmaster refuses to
// start while the old one's pid still exists).
func waitGone(t *testing.T, pids []int) {
	t.Helper()
	for _, pid := range pids {
		storetest.WaitFor(t, fmt.Sprintf("the postmaster's pid %d is gone", pid), func() bool { return syscall.Kill(pid, 0) != nil })
	}
}

// TestIntakeDatabaseHangs: a database that takes the intake's statement and
// never answers (here: another session holds a lock on inbox_events) must
// not hold the delivery open. Past StoreTimeout the answer is 503 with
// Retry-After, and the statement is cancelled in PostgreSQL too: once the
// database moves again, the retried delivery is stored as new, exactly
// once (had the abandoned statement committed behind the 503, the retry
// would be its duplicate).
func TestIntakeDatabaseHangs(t *testing.T) {
	st := storetest.NewStore(t)
	// Two intakes on one store: the hasty one meets the hang; the deliveries
	// that must be stored go through one with serve's StoreTimeout, so a
	// busy machine's slow insert is not mistaken for the hang.
	patient, _ := startIntake(t, intakeConfig(t, st))
	cfg := intakeConfig(t, st)
	cfg.StoreTimeout = 300 * time.Millisecond
	hasty, _ := startIntake(t, cfg)
	// A first delivery prepares the intake's statement on the pool's
	// connection: from then on the whole statement goes in one round trip
	// and would commit as soon as the lock is gone, unless cancelled.
	warm := eventBody("evt_warm", "customer.subscription.updated", "cus_warm", "2025-08-27.basil")
	require.Equal(t, http.StatusOK, deliver(t, patient.URL, warm, sign(warm, secretA, time.Now())).code)

	lock := storetest.LockTable(t, st, "inbox_events")

	body := eventBody("evt_hang", "customer.subscription.updated", "cus_hang", "2025-08-27.basil")
	a := deliver(t, hasty.URL, body, sign(body, secretA, time.Now()))
	require.Equal(t, http.StatusServiceUnavailable, a.code, a.body)
	require.NotEmpty(t, a.header.Get("Retry-After"))
	require.NotContains(t, a.body, "status")

	lock.Release(t)
	lock.WaitIdle(t)
	a = deliver(t, patient.URL, body, sign(body, secretA, time.Now()))
	require.Equal(t, http.StatusOK, a.code, a.body)
	require.Equal(t, "stored", a.body["status"], "the statement answered 503 must not have committed")
	counts := storetest.Counts(t, st)
	require.Equal(t, 2, counts["inbox_events"])
	require.Equal(t, 2, counts["receipts"])
	require.Equal(t, 2, counts["reconcile_queue"])
}

// TestIntakeDatabaseFrozen freezes PostgreSQL (SIGSTOP on the postmaster
// and every backend): nothing it is asked answers, not even a ping. A
// delivery and /readyz get 503 with Retry-After instead of waiting for as
// long as it is frozen; after SIGCONT the delivery is stored once.
func TestIntakeDatabaseFrozen(t *testing.T) {
	st, cluster, _ := storetest.PrivateStore(t)
	patient, _ := startIntake(t, intakeConfig(t, st)) // serve's StoreTimeout, for after the thaw
	cfg := intakeConfig(t, st)
	cfg.StoreTimeout = 300 * time.Millisecond
	srv, _ := startIntake(t, cfg)

	thaw := storetest.Freeze(t, cluster.DataDir()) // thawed at cleanup too, before the cluster stops

	body := eventBody("evt_frozen", "customer.subscription.updated", "cus_frozen", "2025-08-27.basil")
	a := deliver(t, srv.URL, body, sign(body, secretA, time.Now()))
	require.Equal(t, http.StatusServiceUnavailable, a.code, a.body)
	require.NotEmpty(t, a.header.Get("Retry-After"))
	resp, err := http.Get(srv.URL + "/readyz")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	require.NotEmpty(t, resp.Header.Get("Retry-After"))

	thaw()
	for range 5 {
		if a = deliver(t, patient.URL, body, sign(body, secretA, time.Now())); a.code == http.StatusOK {
			break
		}
		require.Equal(t, http.StatusServiceUnavailable, a.code, a.body)
	}
	require.Equal(t, http.StatusOK, a.code)
	require.Contains(t, []any{"stored", "duplicate"}, a.body["status"])
	counts := storetest.Counts(t, st)
	require.Equal(t, 1, counts["inbox_events"])
	require.Equal(t, 1, counts["reconcile_queue"])
}
