package store_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store"
	"github.com/billsync/billsync/store/storetest"
)

// TestOverview: the overview counts this hour's deliveries (new and
// copies) and reconciles by result, leaves out what is older than 24
// hours, names the unmapped price, and reads the queue and each
// provider's newest sweep.
func TestOverview(t *testing.T) {
	ctx := context.Background()
	st := storetest.NewStore(t)
	reconciled(t, st, "evt_1", "cus_1", "", 2) // 3 deliveries, applied
	reconciled(t, st, "evt_old", "cus_old", "", 0)
	storetest.AgeCustomer(t, st, "stripe", "cus_old", 25*time.Hour)
	receive(t, st, "evt_legacy", "cus_legacy")
	out, err := applySnap(ctx, st, claimOne(t, st), dbNow(t, st), liveSnap("cus_legacy", "price_legacy"), testenv.Plans())
	require.NoError(t, err)
	require.Equal(t, reconcile.ResultIgnored, out.Result)
	storetest.SetQueueDead(t, st, "stripe", "cus_dead", 5, "timeout")
	receive(t, st, "evt_pending", "cus_pending")
	run, err := st.StartSweep(ctx, "stripe", "", reconcile.RunSweep)
	require.NoError(t, err)

	o, err := st.Overview(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, o.Pending)
	require.Equal(t, 1, o.Due)
	require.Equal(t, 1, o.Dead)
	require.Len(t, o.Hours, reconcile.OverviewHours)
	now := o.Hours[len(o.Hours)-1]
	require.Equal(t, o.Now.Truncate(time.Hour), now.Start)
	require.Equal(t, 3, now.Deliveries, "evt_1, evt_legacy, evt_pending")
	require.Equal(t, 2, now.Copies)
	require.Equal(t, map[reconcile.Result]int{reconcile.ResultApplied: 1, reconcile.ResultIgnored: 1}, now.Reconciles)
	total := 0
	for _, h := range o.Hours {
		total += h.Deliveries + h.Copies
	}
	require.Equal(t, 5, total, "cus_old's delivery, 25 hours ago, is not counted")
	require.Equal(t, []reconcile.UnmappedCount{{Outcome: "ignored: price price_legacy maps to no plan", Accounts: 1}}, o.Unmapped)
	require.Len(t, o.Sweeps, 1)
	require.Equal(t, run.ID, o.Sweeps[0].ID)
	require.Equal(t, "running", o.Sweeps[0].Status)
}

// TestOverviewSignals: the overview shows the events feed and its webhook
// endpoint once the feed has polled, the app deliveries once one exists,
// each bad past its alert's threshold (a stopped feed, a disabled
// endpoint, a change undelivered for too long, a dead delivery).
func TestOverviewSignals(t *testing.T) {
	ctx := context.Background()
	st := storetest.OpenStoreWithEndpoints(t, storetest.URL(t), store.Options{}, "http://app/hook")
	signals := func() map[string]reconcile.HealthSignal {
		t.Helper()
		o, err := st.Overview(ctx)
		require.NoError(t, err)
		out := map[string]reconcile.HealthSignal{}
		for _, s := range o.Signals {
			out[s.Name] = s
		}
		return out
	}
	require.Empty(t, signals(), "no feed has polled, no change was written")

	newest := dbNow(t, st).Add(-3 * time.Minute)
	require.NoError(t, st.SaveEventsFeedPoll(ctx, "stripe", reconcile.EventsFeedPoll{Cursor: newest, NewestEventAt: newest,
		EndpointChecked: true, EndpointID: "we_1", EndpointEnabled: false}))
	storetest.SetFeedCaught(t, st, "stripe", 2)
	s := signals()
	require.Len(t, s, 2)
	require.False(t, s["stripe events feed"].Bad, "polled just now")
	require.Contains(t, s["stripe events feed"].Value, "lag 3m")
	require.Contains(t, s["stripe events feed"].Hint, "2 caught")
	require.Equal(t, "disabled", s["stripe webhook endpoint"].Value)
	require.True(t, s["stripe webhook endpoint"].Bad)

	storetest.AgeFeedPoll(t, st, "stripe", reconcile.FeedStaleAfter+time.Minute)
	require.True(t, signals()["stripe events feed"].Bad, "no poll for 11 minutes")

	grantedAccount(t, st, "cus_a", "ua", "price_pro") // writes a change, pending for the app
	s = signals()
	require.False(t, s["oldest undelivered change"].Bad)
	require.Equal(t, "0", s["dead app deliveries"].Value)
	require.False(t, s["dead app deliveries"].Bad)
	storetest.AgeAppDeliveries(t, st, reconcile.UndeliveredTooOld+time.Minute)
	s = signals()
	require.True(t, s["oldest undelivered change"].Bad, "undelivered for 16 minutes")
	require.Contains(t, s["oldest undelivered change"].Value, "16m")

	storetest.FanOut(t, st, "http://app/hook")
	ds, err := st.ClaimDeliveries(ctx, "r1", []string{"http://app/hook"}, 10, 10, time.Minute)
	require.NoError(t, err)
	require.NotEmpty(t, ds)
	for _, d := range ds {
		require.NoError(t, st.RecordDelivery(ctx, "r1", d, reconcile.AppDeliveryAttempt{StatusCode: 410}, reconcile.DeliveryDead, 0))
	}
	s = signals()
	require.Equal(t, strconv.Itoa(len(ds)), s["dead app deliveries"].Value)
	require.True(t, s["dead app deliveries"].Bad)
	require.Equal(t, "none", s["oldest undelivered change"].Value, "a dead delivery is no longer pending")
	require.False(t, s["oldest undelivered change"].Bad)
}
