package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/reconcile"
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
	run, err := st.StartSweep(ctx, "stripe")
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
