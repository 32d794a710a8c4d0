package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	stripemock "github.com/billsync/billsync/mocks/stripe"
	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/providers/stripe"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/server/openapitest"
	"github.com/billsync/billsync/store"
	"github.com/billsync/billsync/store/storetest"
)

// TestLastReadReportCountsReadsFinishedDuringShutdown: Stripe reads
// answered after SIGTERM, while serve drains, are in provider_reads once it
// has exited, every one. Two admin resyncs are in flight at the signal,
// their reads held at the fake: the HTTP drain waits for them (a worker's
// own fetch would not do: it is cut short at the signal). The first is
// answered once shutdown has begun, the second once the first is in the
// record or the replica has left the budget. A last report sent at the
// signal, alongside the drain, has been sent by then either way, and
// misses the second read; one sent after the drain counts both.
func TestLastReadReportCountsReadsFinishedDuringShutdown(t *testing.T) {
	ctx := context.Background()
	const adminToken = "budget_admin_token_0123456789"
	var holds sync.Map            // customer id → chan struct{}: closed to answer its retrieve
	held := make(chan string, 16) // an attempt that times out is sent again
	h := testenv.ForTest(t, testenv.Stripe, testenv.Options{Wrap: func(fake http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			customer := customerRead(r)
			if release, ok := holds.Load(customer); ok && billsyncCall(r) {
				held <- customer
				select {
				case <-release.(chan struct{}):
				case <-r.Context().Done():
					return // billsync gave up: nothing served, nothing to count
				}
			}
			fake.ServeHTTP(w, r)
		})
	}})
	dbURL := storetest.URL(t)
	st := storetest.OpenStore(t, dbURL, store.Options{})
	addr := freeAddr(t)
	secret := h.Stripe.Fake.AddWebhookEndpoint("http://" + addr + "/webhooks/stripe")
	// Two workers: two fetch slots, one for each resync.
	p := startBillsync(t, "", addr, "BILLSYNC_TEST_ARGS=serve -workers 2 -sweep-schedule off -addr "+addr,
		"DATABASE_URL="+dbURL, "BILLSYNC_ADMIN_TOKEN="+adminToken, "STRIPE_WEBHOOK_SECRET="+secret,
		"STRIPE_API_KEY="+stripemock.DefaultAPIKey, "STRIPE_API_URL="+h.URL)

	// Two accounts, applied; then no read is due (no webhook unsettled,
	// no job queued, no sweep, no events feed) but the resyncs'.
	var accounts [2]reconcile.Account
	for i := range accounts {
		cus, err := h.Stripe.Customer(ctx, fmt.Sprint("user_", i))
		require.NoError(t, err)
		_, err = h.Stripe.Subscribe(ctx, cus, "price_pro")
		require.NoError(t, err)
		storetest.WaitFor(t, "the account on pro", func() bool {
			accounts[i], err = st.Account(ctx, stripe.Provider, cus)
			return err == nil && accounts[i].Plan == "pro"
		})
	}
	_, err := h.Stripe.WaitSettled(ctx, time.Minute)
	require.NoError(t, err)
	storetest.WaitFor(t, "the queue empty", func() bool {
		q, err := st.QueueDepth(ctx)
		require.NoError(t, err)
		return q.Pending == 0
	})

	first, second := make(chan struct{}), make(chan struct{})
	holds.Store(accounts[0].CustomerID, first)
	holds.Store(accounts[1].CustomerID, second)
	resynced := make(chan string, len(accounts))
	for _, a := range accounts {
		go func() { resynced <- resync(addr, adminToken, a.ID) }()
	}
	for waiting := map[string]bool{accounts[0].CustomerID: true, accounts[1].CustomerID: true}; len(waiting) > 0; {
		select {
		case customer := <-held:
			delete(waiting, customer)
		case <-time.After(time.Minute):
			t.Fatalf("the resyncs' reads never reached Stripe:\n%s", p.logs.String())
		}
	}
	served := h.Stripe.Fake.KeyUsage(stripemock.DefaultAPIKey).Reads

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	storetest.WaitFor(t, "shutdown begun", func() bool { return strings.Contains(p.logs.String(), "shutting down") })
	close(first)
	// recorded: what the fake served billsync and what provider_reads
	// holds, by operation.
	recorded := func() (fake, record map[string]int64, replicas int) {
		usage := h.Stripe.Fake.KeyUsage(stripemock.DefaultAPIKey)
		fake = map[string]int64{}
		for op, u := range usage.Operations {
			if u.Reads > 0 {
				fake[op] = u.Reads
			}
		}
		// A report without reads, as no replica, adds nothing.
		spend, err := st.ReportSpend(ctx, stripe.Provider, "test", nil, false)
		require.NoError(t, err)
		return fake, spend.Reads, spend.Replicas
	}
	storetest.WaitFor(t, "the first resync's read recorded, or the replica gone", func() bool {
		fake, record, replicas := recorded()
		return replicas == 0 || sumOf(fake) == served+1 && maps.Equal(fake, record)
	})
	close(second)

	for range accounts {
		select {
		case out := <-resynced:
			require.True(t, strings.HasPrefix(out, "200 "), "a resync in flight at SIGTERM is finished: %s\n%s", out, p.logs.String())
		case <-time.After(time.Minute):
			t.Fatalf("a resync never answered:\n%s", p.logs.String())
		}
	}
	select {
	case <-p.exited:
		require.NoError(t, p.err, "billsync must exit 0 on SIGTERM:\n%s", p.logs.String())
	case <-time.After(time.Minute):
		t.Fatalf("billsync did not exit within a minute of SIGTERM:\n%s", p.logs.String())
	}

	fake, record, replicas := recorded()
	require.EqualValues(t, served+2, sumOf(fake), "the fake answered both held retrieves: %v\n%s", fake, p.logs.String())
	require.Equal(t, fake, record, "provider_reads against the reads Stripe served:\n%s", p.logs.String())
	require.Zero(t, replicas, "serve left the replicas sharing Stripe's rates on exit")
}

// customerRead returns the customer a read of r is of: a retrieve, or the
// list of its subscriptions (the worker's other way to read a customer,
// taken when the retrieve's rate is spent); "" for any other request.
func customerRead(r *http.Request) string {
	switch {
	case r.Method != http.MethodGet:
		return ""
	case r.URL.Path == "/v1/subscriptions":
		return r.URL.Query().Get("customer")
	}
	if id, ok := strings.CutPrefix(r.URL.Path, "/v1/customers/"); ok {
		return id
	}
	return ""
}

// resync posts an admin resync of account id and returns the answer's
// status and body ("200 {…}"), or the error; from any goroutine.
func resync(addr, token string, id int64) string {
	req, err := http.NewRequest(http.MethodPost, fmt.Sprintf("http://%s/admin/api/accounts/%d/resync", addr, id), nil)
	if err != nil {
		return err.Error()
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := openapitest.Client().Do(req)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return fmt.Sprint(resp.StatusCode, " ", string(b))
}

func sumOf(m map[string]int64) int64 {
	n := int64(0)
	for _, v := range m {
		n += v
	}
	return n
}
