package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	stripemock "github.com/billsync/billsync/mocks/stripe"
	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store"
	"github.com/billsync/billsync/store/storetest"
)

// TestImportKilledResumesItsRun: a `billsync import` process killed with
// SIGKILL after some pages are recorded leaves its run running; the next
// `billsync import` resumes that run from its cursor (fewer list calls
// than the whole listing), and every customer ends with one account on
// the right plan, one keyed grant, one reconcile and one account change,
// all recorded as imported.
func TestImportKilledResumesItsRun(t *testing.T) {
	ctx := context.Background()
	var lists atomic.Int64 // customer list calls billsync made
	h := testenv.ForTest(t, testenv.Stripe, testenv.Options{Wrap: func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodGet && r.URL.Path == "/v1/customers" && billsyncCall(r) {
				lists.Add(1)
			}
			next.ServeHTTP(w, r)
		})
	}})
	const n, pages = 600, 6
	prices := map[string]string{"price_pro": "pro", "price_team": "team"}
	want := map[string]string{} // customer → plan
	for i := range n {
		price := "price_pro"
		if i%2 == 1 {
			price = "price_team"
		}
		cus := h.Customer(fmt.Sprint("u_", i))
		h.Subscribe(cus, price)
		want[cus] = prices[price]
	}
	// Each list call takes 400 ms, so the kill lands between two pages.
	h.Stripe.Fake.SetFaults(stripemock.Faults{Latency: 400 * time.Millisecond})
	dbURL := storetest.URL(t)
	st := storetest.OpenStore(t, dbURL, store.Options{})
	env := []string{"DATABASE_URL=" + dbURL, "STRIPE_API_KEY=" + stripemock.DefaultAPIKey, "STRIPE_API_URL=" + h.URL}

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), "BILLSYNC_TEST_AS_MAIN=1", "BILLSYNC_TEST_ARGS=import -sweep-parallel 1"), env...)
	logs := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })

	var killed reconcile.SweepRecord
	storetest.WaitFor(t, "the import records two pages", func() bool {
		runs, err := st.SweepRuns(ctx, 1)
		require.NoError(t, err)
		if len(runs) == 1 && runs[0].Seen >= 200 {
			killed = runs[0]
			return true
		}
		select {
		case <-exited:
			t.Fatalf("billsync import exited before it was killed:\n%s", logs)
		default:
		}
		return false
	})
	require.NoError(t, cmd.Process.Kill()) // kill -9
	<-exited
	runs, err := st.SweepRuns(ctx, 10)
	require.NoError(t, err)
	require.Len(t, runs, 1)
	require.Equal(t, "running", runs[0].Status, "killed, the run is left running:\n%s", logs)
	require.Equal(t, reconcile.RunImport, runs[0].Kind)
	require.Less(t, runs[0].Seen, n, "killed mid-run")

	// The killed process's lease outlives it by the lease's TTL: until
	// then a second import says one is running (TestImportCommand).
	storetest.WaitFor(t, "the killed import's lease runs out", func() bool {
		_, release, err := st.SweepLock(ctx, "stripe", "")
		if err != nil {
			require.ErrorIs(t, err, reconcile.ErrLeaseHeld)
			return false
		}
		release()
		return true
	})
	h.Stripe.Fake.SetFaults(stripemock.Faults{})
	lists.Store(0)
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	var out, logs2 bytes.Buffer
	require.NoError(t, run(ctx, []string{"import", "-sweep-parallel", "1"}, &out, &logs2), logs2.String())
	require.Contains(t, out.String(), fmt.Sprintf("stripe import %d (resumed) succeeded", killed.ID), out.String())
	require.Contains(t, out.String(), fmt.Sprintf("seen %d,", n))
	require.Less(t, lists.Load(), int64(pages), "resumed from its cursor, not listed again from the start")
	runs, err = st.SweepRuns(ctx, 10)
	require.NoError(t, err)
	require.Len(t, runs, 1, "the same run, resumed")
	require.Equal(t, "succeeded", runs[0].Status)

	accounts := map[string]int{}
	for _, a := range storetest.Accounts(t, st) {
		accounts[a.CustomerID]++
	}
	require.Len(t, accounts, n)
	applied := map[string]int{}
	for _, l := range storetest.ReconcileLog(t, st) {
		require.Equal(t, reconcile.TriggerImport, l.Trigger)
		if l.Result == reconcile.ResultApplied {
			applied[l.CustomerID]++
		}
	}
	for cus, plan := range want {
		require.Equal(t, 1, accounts[cus], "one account: %s", cus)
		c := storetest.Customer(t, st, "stripe", cus)
		require.Equal(t, plan, c.Plan, cus)
		require.Equal(t, 1, c.Grants, "one keyed grant, never twice: %s", cus)
		require.Equal(t, 1, applied[cus], "imported once: %s", cus)
	}
	changes, err := st.Changes(ctx, reconcile.ChangeCursor{}, 2*n)
	require.NoError(t, err)
	require.Len(t, changes, n, "one account change per account")
	for _, c := range changes {
		require.Equal(t, reconcile.TriggerImport, c.Why.Trigger)
	}
}
