package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store/storetest"
)

// TestAuthorizationsKeepTheNewestWord: a connected account's state is the
// newest word about it, whatever order the words arrive in, and an
// authorisation event is recorded with the event itself.
func TestAuthorizationsKeepTheNewestWord(t *testing.T) {
	ctx := context.Background()
	st := storetest.NewStore(t)
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	authorized := func(account string) bool {
		t.Helper()
		accounts, err := st.ConnectedAccounts(ctx, "stripe")
		require.NoError(t, err)
		for _, a := range accounts {
			if a.Account == account {
				return a.Authorized
			}
		}
		t.Fatalf("%s not recorded", account)
		return false
	}

	// Deauthorised at t0+1h, then the authorisation of t0 arrives late.
	require.NoError(t, st.SaveAuthorizations(ctx, "stripe", []reconcile.Authorization{{Account: "acct_a", At: t0.Add(time.Hour)}}))
	require.NoError(t, st.SaveAuthorizations(ctx, "stripe", []reconcile.Authorization{{Account: "acct_a", Authorized: true, At: t0}}))
	require.False(t, authorized("acct_a"), "an older word changed the newer one")

	// Several words about one account in one call: the newest wins.
	require.NoError(t, st.SaveAuthorizations(ctx, "stripe", []reconcile.Authorization{
		{Account: "acct_b", Authorized: true, At: t0.Add(2 * time.Hour)},
		{Account: "acct_b", At: t0.Add(time.Hour)},
	}))
	require.True(t, authorized("acct_b"))

	// The intake records an event's word in the event's transaction; its
	// copy changes nothing, a newer event does.
	store := func(id string, ok bool, at time.Time) {
		t.Helper()
		_, err := st.StoreReceipt(ctx, reconcile.Receipt{Event: reconcile.Event{
			Provider: "stripe", DedupeKey: reconcile.Connected("acct_c", id), EventID: id, Type: "account.application.authorized",
			Payload: []byte(`{}`), IgnoreReason: "recorded", Authorization: &reconcile.Authorization{Account: "acct_c", Authorized: ok, At: at},
		}})
		require.NoError(t, err)
	}
	store("evt_1", true, t0)
	require.True(t, authorized("acct_c"))
	store("evt_2", false, t0.Add(time.Minute))
	require.False(t, authorized("acct_c"))
	store("evt_1", true, t0) // a copy of the older event
	require.False(t, authorized("acct_c"))
	store("evt_3", true, t0.Add(2*time.Minute))
	require.True(t, authorized("acct_c"))
}
