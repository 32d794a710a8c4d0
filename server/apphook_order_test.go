package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store"
	"github.com/billsync/billsync/store/storetest"
	"github.com/billsync/billsync/store/storetest/tb"
)

const orderEndpoint = "http://app.test/hooks/billing"

// reconcileAs applies an active Pro subscription, or (free) none, to each
// customer the way the worker does for a job of trigger: each writes one
// account change whose why.trigger is trigger.
func reconcileAs(t *testing.T, st *store.Store, trigger string, free bool, customers ...string) {
	t.Helper()
	ctx := context.Background()
	for _, c := range customers {
		require.NoError(t, st.Enqueue(ctx, "stripe", c, trigger))
	}
	jobs, err := st.Claim(ctx, "test", len(customers), time.Minute)
	require.NoError(t, err)
	require.Len(t, jobs, len(customers))
	for _, job := range jobs {
		snap := reconcile.Snapshot{Provider: "stripe", CustomerID: job.CustomerID, UserRef: "u_" + job.CustomerID}
		if !free {
			snap.Subscriptions = []reconcile.Subscription{{ID: "sub_" + job.CustomerID, Status: "active",
				Items: []reconcile.Item{{PriceRefs: []string{"price_pro"}, Quantity: 1, PeriodStart: appPeriodStart, PeriodEnd: appPeriodEnd}}}}
		}
		obs, err := st.Now(ctx)
		require.NoError(t, err)
		out, err := st.Apply(ctx, job, obs, reconcile.NewDecider(job, snap, testenv.Plans(), obs))
		require.NoError(t, err)
		require.Equal(t, reconcile.ResultApplied, out.Result, out.Text)
	}
}

// received is what the app's endpoint was sent, in order.
type received struct {
	mu  sync.Mutex
	got []string // "<customer>/<seq>/<trigger>"
}

func (r *received) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	var c reconcile.AccountChange
	if err := json.NewDecoder(req.Body).Decode(&c); err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	r.got = append(r.got, fmt.Sprintf("%s/%d/%s", c.UserRef, c.Seq, c.Why.Trigger))
	r.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (r *received) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.got...)
}

// TestLiveChangesAreDeliveredBeforeAnImport: with an import's deliveries
// pending, live changes written after them reach the app first; a live
// change of an account whose import change is pending takes that one
// along (one account's changes go in seq order), and the import's
// backlog follows. The import's deliveries are created before the live
// changes are written, or with them in one fan-out.
func TestLiveChangesAreDeliveredBeforeAnImport(t *testing.T) {
	for _, tc := range []struct {
		name           string
		fannedOutFirst bool
	}{{"ImportFannedOutFirst", true}, {"OneFanOut", false}} {
		t.Run(tc.name, func(t *testing.T) {
			st := storetest.OpenStoreWithEndpoints(t, storetest.URL(t), store.Options{}, orderEndpoint)
			const backlog = 40
			imported := make([]string, backlog)
			for i := range imported {
				imported[i] = fmt.Sprintf("cus_imp%02d", i)
			}
			reconcileAs(t, st, reconcile.TriggerImport, false, imported...)
			reconcileAs(t, st, reconcile.TriggerImport, false, "cus_mixed")
			if tc.fannedOutFirst {
				storetest.FanOut(t, st, orderEndpoint)
			}
			reconcileAs(t, st, reconcile.TriggerWebhook, false, "cus_live")
			reconcileAs(t, st, reconcile.TriggerWebhook, true, "cus_mixed") // canceled: its second change

			app := &received{}
			d, err := reconcile.NewAppDeliverer(reconcile.AppDelivererConfig{Name: "test", Store: st, Sender: newSender(t, app),
				Endpoints: []string{orderEndpoint}, Concurrency: 1}) // one at a time: the order is the claims'
			require.NoError(t, err)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); d.Run(ctx) }()
			t.Cleanup(func() { cancel(); <-done })

			tb.WaitFor(t, "every change delivered", func() bool { return len(app.list()) == backlog+3 })
			got := app.list()
			require.Equal(t, []string{"u_cus_mixed/1/import", "u_cus_live/1/webhook", "u_cus_mixed/2/webhook"}, got[:3],
				"live changes (and the import change one waits for) go first")
			for _, g := range got[3:] {
				require.Regexp(t, `^u_cus_imp\d+/1/import$`, g)
			}
		})
	}
}

// TestQuietImportsReachTheFeedOnly: with QuietImports
// (BILLSYNC_IMPORT_NOTIFY=false) an import's changes get no delivery, yet
// stay in the change feed; live changes are delivered as ever, including
// the later change of an imported account.
func TestQuietImportsReachTheFeedOnly(t *testing.T) {
	st := storetest.OpenStoreWithEndpoints(t, storetest.URL(t), store.Options{}, orderEndpoint)
	reconcileAs(t, st, reconcile.TriggerImport, false, "cus_imp1", "cus_imp2", "cus_mixed")
	reconcileAs(t, st, reconcile.TriggerWebhook, false, "cus_live")
	reconcileAs(t, st, reconcile.TriggerWebhook, true, "cus_mixed")

	app := &received{}
	d, err := reconcile.NewAppDeliverer(reconcile.AppDelivererConfig{Name: "test", Store: st, Sender: newSender(t, app),
		Endpoints: []string{orderEndpoint}, QuietImports: true})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	tb.WaitFor(t, "the live changes delivered", func() bool { return len(app.list()) >= 2 })
	require.ElementsMatch(t, []string{"u_cus_live/1/webhook", "u_cus_mixed/2/webhook"}, app.list())
	// The fan-out that made those passed every change: none other got a delivery.
	ds, err := st.Deliveries(context.Background(), "", 100)
	require.NoError(t, err)
	require.Len(t, ds, 2)
	feed, err := st.Changes(context.Background(), reconcile.ChangeCursor{}, 100)
	require.NoError(t, err)
	require.Len(t, feed, 5, "the import's changes are in the feed")
}

// TestImportBacklogIsNotLate: an import's pending deliveries count as
// pending but not as the oldest undelivered change (the alert's), which a
// live change waiting is.
func TestImportBacklogIsNotLate(t *testing.T) {
	st := storetest.OpenStoreWithEndpoints(t, storetest.URL(t), store.Options{}, orderEndpoint)
	ctx := context.Background()
	reconcileAs(t, st, reconcile.TriggerImport, false, "cus_imp1", "cus_imp2")
	storetest.FanOut(t, st, orderEndpoint)
	stats, err := st.AppDeliveryStats(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(2), stats.Pending)
	require.True(t, stats.OldestUndelivered.IsZero(), "an import's backlog is not late")

	reconcileAs(t, st, reconcile.TriggerWebhook, false, "cus_live")
	storetest.FanOut(t, st, orderEndpoint)
	stats, err = st.AppDeliveryStats(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(3), stats.Pending)
	require.False(t, stats.OldestUndelivered.IsZero(), "a live change waiting is")
}
