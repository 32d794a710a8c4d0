package e2e_test

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	stripemock "github.com/billsync/billsync/mocks/stripe"
	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store/scratch"
	"github.com/billsync/billsync/store/storetest"
)

// TestKilledWorkerProcessStrandsNothing: a worker process is killed with
// SIGKILL while it holds customers mid-fetch. Nothing it did may be half
// applied, and every customer it held must be reconciled by another worker
// once its lease (not renewed by a dead process) runs out: right plan,
// balance equal to the largest plan granted (no double grant), every event
// applied. The time from the kill to the last stranded customer is logged
// (a measurement, not a claim): BILLSYNC_TEST_CRASH_LEASE sets the dead
// process's lease (default 2 s here; serve's is reconcile.DefaultLease).
func TestKilledWorkerProcessStrandsNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a second process")
	}
	const customers = 12
	ctx := context.Background()
	lease := cmp.Or(os.Getenv("BILLSYNC_TEST_CRASH_LEASE"), "2s")
	h := newHarness(t, testenv.Stripe, testenv.Options{})
	ids := make([]string, customers)
	for i := range ids {
		ids[i] = h.Customer(fmt.Sprintf("user_%d", i))
		sub := h.Subscribe(ids[i], "price_free")
		h.ChangePrice(sub, []string{"price_pro", "price_team"}[i%2])
	}
	h.Delivered()

	// Every read is slow, so the doomed process holds its claims mid-fetch.
	h.Stripe.Fake.SetFaults(stripemock.Faults{Latency: time.Minute})
	proc := exec.Command(os.Args[0], "-test.run=^$")
	proc.Env = append(os.Environ(), workerProcEnv+"="+h.dbURL+" "+h.URL+" "+lease)
	var procLog bytes.Buffer
	proc.Stdout, proc.Stderr = &procLog, &procLog
	require.NoError(t, proc.Start())
	t.Cleanup(func() { _ = proc.Process.Kill() })

	// heldByProc2 counts the queue rows the second process's worker holds.
	heldByProc2 := func() int {
		held := 0
		for _, q := range storetest.Queue(t, h.Store) {
			if q.LockedBy == "proc2" {
				held++
			}
		}
		return held
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("second process:\n%s", &procLog)
		}
	})
	storetest.WaitFor(t, "the second process claiming its first jobs", func() bool {
		return heldByProc2() >= 4 // 4 in flight (its bound), and spares
	})
	require.NoError(t, proc.Process.Kill())
	killed := time.Now()
	_ = proc.Wait()
	held := heldByProc2()

	h.Stripe.Fake.SetFaults(stripemock.Faults{})
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	local := h.Worker(reconcile.WorkerConfig{Name: "survivor", Concurrency: 2, Poll: 20 * time.Millisecond})
	done := make(chan struct{})
	go func() { local.Run(runCtx); close(done) }()
	defer func() { stop(); <-done }()

	storetest.WaitUpTo(t, 5*time.Minute, "the stranded customers are reconciled", func() bool {
		stats, err := scratch.ReadStats(ctx, h.Store)
		return err == nil && stats.Queued == 0 && stats.Pending == 0
	})
	t.Logf("lease %s: %d customers stranded by kill -9, all reconciled %s after the kill", lease, held, time.Since(killed).Round(10*time.Millisecond))

	for i, cus := range ids {
		s := h.state(cus)
		require.Equal(t, []string{"pro", "team"}[i%2], s.Plan, "customer %d", i)
		require.Equal(t, h.largestGrant(cus), s.Balance, "customer %d: no double grant", i)
		require.Positive(t, s.Events["applied"], "customer %d", i)
		require.Len(t, s.Events, 1, "customer %d: every event applied", i)
	}
}
