package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store"
	"github.com/billsync/billsync/store/storetest"
)

const testAppSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// appReceiver is the app's endpoint: it verifies each delivery with the
// Standard Webhooks library, fails the test if one change is being
// delivered twice at once, holds the first request until released, and
// records the ids it answered 2xx, in order.
type appReceiver struct {
	t         *testing.T
	mu        sync.Mutex
	inFlight  map[string]bool
	bodies    map[string][]byte
	delivered []string
	attempts  map[string]int
	held      chan string
	release   chan struct{}
	holdOnce  sync.Once
	overlaps  []string
	// killed is set once the first replica is dead: what it had answered
	// 2xx but not yet recorded may be sent again (at least once); what
	// is answered after must never be.
	killed     bool
	beforeKill map[string]bool
}

func (a *appReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	wh, _ := standardwebhooks.NewWebhook(testAppSecret)
	body := make([]byte, r.ContentLength)
	_, _ = r.Body.Read(body)
	if err := wh.Verify(body, r.Header); err != nil {
		http.Error(w, "bad signature", http.StatusUnauthorized)
		a.t.Errorf("a delivery failed verification: %v", err)
		return
	}
	id := r.Header.Get("webhook-id")
	a.mu.Lock()
	if a.inFlight[id] {
		a.overlaps = append(a.overlaps, id)
	}
	a.inFlight[id] = true
	a.attempts[id]++
	a.bodies[id] = body
	a.mu.Unlock()
	defer func() { a.mu.Lock(); delete(a.inFlight, id); a.mu.Unlock() }()
	first := false
	a.holdOnce.Do(func() { first = true })
	if first {
		a.held <- id
		select { // the sender is killed meanwhile: its connection closes
		case <-r.Context().Done():
		case <-a.release:
		}
		return
	}
	a.mu.Lock()
	a.delivered = append(a.delivered, id)
	if !a.killed {
		a.beforeKill[id] = true
	}
	a.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// debitsFor makes an account for customer (userRef) on the Pro plan and
// debits it n times: 1 + n changes.
func debitsFor(t testing.TB, st *store.Store, customer, userRef string, n int) {
	t.Helper()
	ctx := context.Background()
	job, err := st.Hold(ctx, "stripe", customer, reconcile.TriggerResync, "test", time.Minute)
	require.NoError(t, err)
	now, err := st.Now(ctx)
	require.NoError(t, err)
	start := now.Truncate(time.Hour)
	snap := reconcile.Snapshot{Provider: "stripe", CustomerID: customer, UserRef: userRef, Subscriptions: []reconcile.Subscription{{
		ID: "sub_" + customer, Status: "active", Items: []reconcile.Item{{PriceRefs: []string{"price_pro"}, Quantity: 1,
			PeriodStart: start, PeriodEnd: start.AddDate(0, 1, 0)}}}}}
	_, err = st.Apply(ctx, job, now, reconcile.NewDecider(job, snap, testenv.Plans(), now))
	require.NoError(t, err)
	for i := range n {
		_, err := st.Debit(ctx, reconcile.Debit{UserRef: userRef, Key: fmt.Sprint(i), Amount: 1}, reconcile.DecideDebit)
		require.NoError(t, err)
	}
}

// TestAppWebhooksAcrossReplicas: one serve is killed (-9) while the app
// holds its delivery; two others on the same database then deliver every
// change, the held one again under its id, never one change by both at
// once, each account's in seq order, every one verified by the Standard
// Webhooks library.
func TestAppWebhooksAcrossReplicas(t *testing.T) {
	ctx := context.Background()
	recv := &appReceiver{t: t, inFlight: map[string]bool{}, bodies: map[string][]byte{}, attempts: map[string]int{},
		held: make(chan string, 1), release: make(chan struct{}), beforeKill: map[string]bool{}}
	app := httptest.NewServer(recv)
	defer app.Close()
	defer close(recv.release)

	url := storetest.URL(t)
	st := storetest.OpenStoreWithEndpoints(t, url, store.Options{}, app.URL)
	const accounts, debits = 3, 4
	for i := range accounts {
		debitsFor(t, st, fmt.Sprintf("cus_%d", i), fmt.Sprintf("u%d", i), debits)
	}
	total := accounts * (1 + debits)

	env := []string{"DATABASE_URL=" + url, "BILLSYNC_APP_WEBHOOK_URL=" + app.URL, "BILLSYNC_APP_WEBHOOK_SECRET=" + testAppSecret}
	args := func(addr string) string {
		return "BILLSYNC_TEST_ARGS=serve -workers 0 -app-webhook-lease 11s -addr " + addr
	}
	addrA := freeAddr(t)
	a := startBillsync(t, "", addrA, append(env, args(addrA))...)
	heldID := <-recv.held
	require.NoError(t, a.cmd.Process.Kill()) // kill -9 mid-delivery
	<-a.exited
	recv.mu.Lock()
	recv.killed = true
	recv.mu.Unlock()

	addrB, addrC := freeAddr(t), freeAddr(t)
	startBillsync(t, "", addrB, append(env, args(addrB))...)
	startBillsync(t, "", addrC, append(env, args(addrC))...)
	storetest.WaitFor(t, "every change delivered", func() bool {
		s, err := st.AppDeliveryStats(ctx)
		require.NoError(t, err)
		return s.Delivered == int64(total)
	})

	recv.mu.Lock()
	defer recv.mu.Unlock()
	require.Empty(t, recv.overlaps, "a change delivered by two replicas at once")
	// At least once: every change answered 2xx. Only a change the killed
	// replica had sent (answered before it died, not yet recorded) may be
	// answered twice; the live replicas answer each of theirs once.
	answered := map[string]int{}
	for _, id := range recv.delivered {
		answered[id]++
	}
	require.Len(t, answered, total, "every change answered 2xx: %v", recv.delivered)
	for id, n := range answered {
		if n > 1 {
			require.True(t, recv.beforeKill[id], "change %s answered %d times, not one the killed replica had in flight", id, n)
			require.Equal(t, 2, n, "change %s", id)
		}
	}
	require.Contains(t, recv.delivered, heldID, "the killed replica's change was delivered by another")
	require.Equal(t, 2, recv.attempts[heldID])
	seen := map[int64]int64{}
	first := map[string]bool{}
	for _, id := range recv.delivered {
		if first[id] {
			continue // a repeat of the killed replica's: in order the first time
		}
		first[id] = true
		var c struct {
			AccountID int64 `json:"account_id"`
			Seq       int64 `json:"seq"`
		}
		require.NoError(t, jsonUnmarshal(recv.bodies[id], &c))
		require.Equal(t, seen[c.AccountID]+1, c.Seq, "account %d in order", c.AccountID)
		seen[c.AccountID] = c.Seq
	}
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }
