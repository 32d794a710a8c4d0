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

	kindemock "github.com/billsync/billsync/mocks/kinde"
	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store"
	"github.com/billsync/billsync/store/storetest"
)

// TestKindeImportKilledResumesFromItsFinderCursor: a `billsync import` of
// Kinde killed with SIGKILL while it pages through Kinde's users leaves
// its run running; the next `billsync import` resumes that run from the
// finder's cursor (fewer users-list calls than the whole listing), and
// every customer Kinde's users and organisations name ends queued once
// for the worker, as imported, under the one run.
func TestKindeImportKilledResumesFromItsFinderCursor(t *testing.T) {
	ctx := context.Background()
	var lists atomic.Int64 // users list calls billsync made
	h := testenv.ForTest(t, testenv.Kinde, testenv.Options{Wrap: func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodGet && r.URL.Path == "/api/v1/users" {
				lists.Add(1)
			}
			next.ServeHTTP(w, r)
		})
	}})
	const users, pages = 600, 6 // the finder reads 100 users a page
	want := map[string]bool{}
	for i := range users {
		cus := fmt.Sprintf("customer_u%03d", i)
		h.Kinde.Fake.AddUser(kindemock.User{ID: fmt.Sprintf("kp_u%03d", i), CustomerID: cus})
		want[cus] = true
	}
	h.Kinde.Fake.AddOrganization(kindemock.Organization{Code: "org_a", CustomerID: "customer_org_a"})
	want["customer_org_a"] = true
	// Each request takes 400 ms, so the kill lands between two pages.
	h.Kinde.Fake.SetFaults(kindemock.Faults{Latency: 400 * time.Millisecond})
	dbURL := storetest.URL(t)
	st := storetest.OpenStore(t, dbURL, store.Options{})
	env := append(kindeEnv(h.URL), "DATABASE_URL="+dbURL, "BILLSYNC_PLANS=")

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), "BILLSYNC_TEST_AS_MAIN=1", "BILLSYNC_TEST_ARGS=import"), env...)
	logs := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })

	var killed reconcile.SweepRecord
	storetest.WaitFor(t, "the import records two pages of users", func() bool {
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
	require.Less(t, runs[0].Seen, users, "killed mid-run")

	storetest.WaitFor(t, "the killed import's lease runs out", func() bool {
		_, release, err := st.SweepLock(ctx, "kinde", "")
		if err != nil {
			require.ErrorIs(t, err, reconcile.ErrLeaseHeld)
			return false
		}
		release()
		return true
	})
	h.Kinde.Fake.SetFaults(kindemock.Faults{})
	lists.Store(0)
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	var out, logs2 bytes.Buffer
	require.NoError(t, run(ctx, []string{"import"}, &out, &logs2), logs2.String())
	require.Contains(t, out.String(), fmt.Sprintf("kinde import %d (resumed) succeeded", killed.ID), out.String())
	require.Less(t, lists.Load(), int64(pages), "resumed from the finder's cursor, not listed again from the start")
	runs, err = st.SweepRuns(ctx, 10)
	require.NoError(t, err)
	require.Len(t, runs, 1, "the same run, resumed")
	require.Equal(t, "succeeded", runs[0].Status)

	queued := map[string]int{}
	for _, q := range storetest.Queue(t, st) {
		require.Equal(t, "kinde", q.Provider)
		require.Equal(t, reconcile.TriggerImport, q.Trigger, q.CustomerID)
		queued[q.CustomerID]++
	}
	require.Len(t, queued, len(want), "every customer found, once")
	for cus := range want {
		require.Equal(t, 1, queued[cus], cus)
	}
}
