package store_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store/storetest"
)

// TestApplyTellsWhatItAnswered: the outcome of a committed apply lists
// each stored event it answered once, with the source that first stored
// it (a copy by webhook of a feed-stored event stays feed) and its receipt
// time, for the freshness SLI; a later apply answers none again.
func TestApplyTellsWhatItAnswered(t *testing.T) {
	st := storetest.NewStore(t)
	ctx := context.Background()
	store := func(id, source string) {
		_, err := st.StoreReceipt(ctx, reconcile.Receipt{Source: source, Event: reconcile.Event{
			Provider: "stripe", DedupeKey: id, EventID: id, Type: "customer.subscription.updated",
			CustomerID: "cus_1", Payload: []byte(`{}`)}})
		require.NoError(t, err)
	}
	store("evt_hook", reconcile.SourceWebhook)
	store("evt_hook", reconcile.SourceWebhook) // a copy
	store("evt_feed", reconcile.SourceFeed)
	store("evt_feed", reconcile.SourceWebhook) // the late webhook
	job := claimOne(t, st)
	obs := dbNow(t, st)
	out, err := applySnap(ctx, st, job, obs, liveSnap("cus_1", "pro"), testenv.Plans())
	require.NoError(t, err)
	require.Len(t, out.Answered, 2)
	sources := map[string]int{}
	for _, a := range out.Answered {
		sources[a.Source]++
		require.False(t, a.ReceivedAt.After(obs), "received before the read")
		require.False(t, a.ReceivedAt.IsZero())
	}
	require.Equal(t, map[string]int{reconcile.SourceWebhook: 1, reconcile.SourceFeed: 1}, sources)

	store("evt_2", reconcile.SourceWebhook)
	job = claimOne(t, st)
	out, err = applySnap(ctx, st, job, dbNow(t, st), liveSnap("cus_1", "pro"), testenv.Plans())
	require.NoError(t, err)
	require.Len(t, out.Answered, 1, "an answered event is never answered again")
}
