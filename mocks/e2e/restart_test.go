package e2e_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/mocks/mock"
	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store"
	"github.com/billsync/billsync/store/storetest"
)

// TestDatabaseRestartMidReconcileKeepsNoLease: every connection billsync
// holds is cut (as a database restart does) between the fetch and the
// apply. The failed apply must be recorded as an attempt and the job
// rescheduled, not left leased for a lease's length; the next attempt
// applies it.
func TestDatabaseRestartMidReconcileKeepsNoLease(t *testing.T) {
	ctx := context.Background()
	url := storetest.URL(t)
	st := storetest.OpenStore(t, url, store.Options{})
	_, err := st.StoreReceipt(ctx, reconcile.Receipt{Event: reconcile.Event{Provider: "stripe", DedupeKey: "evt_1", EventID: "evt_1",
		Type: "customer.subscription.updated", CustomerID: "cus_1", Payload: []byte(`{}`)}})
	require.NoError(t, err)

	restart := storetest.CutConnections(t, url)
	fetches := 0
	provider := &mock.Provider{ProviderName: "stripe", FetchFn: func(ctx context.Context, customerID string) (reconcile.Snapshot, error) {
		if fetches++; fetches == 1 {
			if err := restart(ctx); err != nil {
				return reconcile.Snapshot{}, err
			}
		}
		return oneSub(customerID, "active", time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), "pro"), nil
	}}
	w, err := reconcile.NewWorker(reconcile.WorkerConfig{Store: st, Providers: []reconcile.Provider{provider}, Plans: testenv.Plans(),
		Backoff: []time.Duration{time.Millisecond}})
	require.NoError(t, err)

	// One Drain: the first attempt fails in the store and is rescheduled;
	// the job is due again a millisecond later and the next one applies.
	var n int
	storetest.WaitFor(t, "the job is claimable again (its lease was not left behind)", func() bool {
		got, err := w.Drain(ctx)
		n += got
		return err == nil && n >= 2
	})

	var results []string
	for _, l := range storetest.ReconcileLog(t, st) {
		if l.CustomerID == "cus_1" {
			results = append(results, string(l.Result))
		}
	}
	require.Equal(t, []string{"retry", "applied"}, results)
	a, err := st.Account(ctx, "stripe", "cus_1")
	require.NoError(t, err)
	require.Equal(t, "pro", a.Plan)
	ev, err := st.EventByKey(ctx, "stripe", "evt_1")
	require.NoError(t, err)
	require.Equal(t, reconcile.EventApplied, ev.Status)
}
