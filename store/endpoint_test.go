package store_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store"
	"github.com/billsync/billsync/store/storetest"
)

// deliveriesBy returns the seqs of each endpoint's deliveries by account,
// in seq order.
func deliveriesBy(t *testing.T, st *store.Store) map[string]map[int64][]int64 {
	t.Helper()
	ds, err := st.Deliveries(context.Background(), "", 1000)
	require.NoError(t, err)
	out := map[string]map[int64][]int64{}
	for i := len(ds) - 1; i >= 0; i-- { // oldest change first
		d := ds[i]
		if out[d.Endpoint] == nil {
			out[d.Endpoint] = map[int64][]int64{}
		}
		out[d.Endpoint][d.AccountID] = append(out[d.Endpoint][d.AccountID], d.Seq)
	}
	return out
}

// requirePrefixes fails unless each endpoint's deliveries of each account
// are its seqs 1…n with none missing: a change never gets its delivery
// before an earlier change of its account.
func requirePrefixes(t *testing.T, by map[string]map[int64][]int64) {
	t.Helper()
	for ep, accounts := range by {
		for id, seqs := range accounts {
			for i, s := range seqs {
				require.Equal(t, int64(i+1), s, "%s, account %d: %v", ep, id, seqs)
			}
		}
	}
}

// TestFanOutOncePerEndpointInOrder: each change gets one delivery per
// endpoint, an account's in seq order page by page, whether one store
// fans out or two replicas do at once.
func TestFanOutOncePerEndpointInOrder(t *testing.T) {
	ctx := context.Background()
	url := storetest.URL(t)
	eps := []string{"http://app/one", "http://app/two"}
	st := storetest.OpenStoreWithEndpoints(t, url, store.Options{}, eps...)
	other := storetest.OpenStore(t, url, store.Options{})
	a := grantedAccount(t, st, "cus_a", "ua", "price_pro")
	b := grantedAccount(t, st, "cus_b", "ub", "price_pro")
	debit := func(user, key string) {
		_, err := st.Debit(ctx, reconcile.Debit{UserRef: user, Key: key, Amount: 1}, reconcile.DecideDebit)
		require.NoError(t, err)
	}
	for _, k := range []string{"1", "2", "3"} {
		debit("ua", k)
	}
	debit("ub", "1")
	allChanges(t, st, 6) // a 1-4, b 1-2: all committed and below xmin

	// One change a page, the two stores in turn.
	stores := []*store.Store{st, other}
	for i := 0; ; i++ {
		more, err := stores[i%2].FanOut(ctx, eps, 1, true)
		require.NoError(t, err)
		requirePrefixes(t, deliveriesBy(t, st))
		if !more {
			break
		}
	}
	want := map[int64][]int64{a: {1, 2, 3, 4}, b: {1, 2}}
	require.Equal(t, map[string]map[int64][]int64{eps[0]: want, eps[1]: want}, deliveriesBy(t, st))

	// Two replicas at once, small pages; nothing twice, nothing missed.
	for _, k := range []string{"4", "5", "6", "7"} {
		debit("ua", k)
		debit("ub", k)
	}
	allChanges(t, st, 14)
	var wg sync.WaitGroup
	for _, s := range stores {
		wg.Go(func() {
			for more := true; more; {
				var err error
				more, err = s.FanOut(ctx, eps, 2, true)
				require.NoError(t, err)
			}
		})
	}
	wg.Wait()
	storetest.FanOut(t, st, eps...) // a page one skipped (locked) is taken now
	want = map[int64][]int64{a: {1, 2, 3, 4, 5, 6, 7, 8}, b: {1, 2, 3, 4, 5, 6}}
	require.Equal(t, map[string]map[int64][]int64{eps[0]: want, eps[1]: want}, deliveriesBy(t, st))
	stats, err := st.AppDeliveryStats(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(28), stats.Pending, "14 changes, 2 endpoints")
}

// TestFanOutNewEndpointStartsFromNow: an endpoint registered after a
// change does not get it, only the changes after; one that already has
// deliveries (written with the change, before app_endpoints) starts after
// the last of them; registering again moves no cursor.
func TestFanOutNewEndpointStartsFromNow(t *testing.T) {
	ctx := context.Background()
	old, late, upgraded := "http://app/old", "http://app/late", "http://app/upgraded"
	st := storetest.OpenStoreWithEndpoints(t, storetest.URL(t), store.Options{}, old)
	a := grantedAccount(t, st, "cus_a", "ua", "price_pro") // seq 1
	first := allChanges(t, st, 1)[0]
	// A writer of the old kind queued seq 1 for upgraded with the change.
	_, err := st.Pool().Exec(ctx, `INSERT INTO app_deliveries (change_id, endpoint, account_id, seq) VALUES ($1, $2, $3, 1)`,
		first.ID, upgraded, a)
	require.NoError(t, err)
	_, err = st.Debit(ctx, reconcile.Debit{UserRef: "ua", Key: "1", Amount: 1}, reconcile.DecideDebit) // seq 2
	require.NoError(t, err)

	require.NoError(t, st.RegisterEndpoints(ctx, []string{late, upgraded}))
	_, err = st.Debit(ctx, reconcile.Debit{UserRef: "ua", Key: "2", Amount: 1}, reconcile.DecideDebit) // seq 3
	require.NoError(t, err)
	allChanges(t, st, 3)
	storetest.FanOut(t, st, old, late, upgraded)
	require.NoError(t, st.RegisterEndpoints(ctx, []string{old, late, upgraded}))
	storetest.FanOut(t, st, old, late, upgraded)
	require.Equal(t, map[string]map[int64][]int64{
		old:      {a: {1, 2, 3}},
		late:     {a: {3}},
		upgraded: {a: {1, 2, 3}},
	}, deliveriesBy(t, st))
}

// TestFanOutWaitsForAnOlderTransaction: a change committed after a later
// one was fanned out, by a transaction that was open meanwhile, still
// gets its delivery: the cursor never passes a transaction in flight.
func TestFanOutWaitsForAnOlderTransaction(t *testing.T) {
	ctx := context.Background()
	ep := "http://app/hook"
	st := storetest.OpenStoreWithEndpoints(t, storetest.URL(t), store.Options{}, ep)
	idA := grantedAccount(t, st, "cus_a", "ua", "price_pro")
	idB := grantedAccount(t, st, "cus_b", "ub", "price_pro")
	allChanges(t, st, 2)
	storetest.FanOut(t, st, ep)

	held, release := holdFirstChangeWrite(st)
	errA := make(chan error, 1)
	go func() {
		_, err := st.Debit(ctx, reconcile.Debit{UserRef: "ua", Key: "a", Amount: 1}, reconcile.DecideDebit)
		errA <- err
	}()
	<-held // A wrote its change and is still open
	_, err := st.Debit(ctx, reconcile.Debit{UserRef: "ub", Key: "b", Amount: 1}, reconcile.DecideDebit)
	require.NoError(t, err) // B committed
	storetest.FanOut(t, st, ep)
	require.Equal(t, map[int64][]int64{idA: {1}, idB: {1}}, deliveriesBy(t, st)[ep], "B's change waits for A, older")

	close(release)
	require.NoError(t, <-errA)
	storetest.WaitFor(t, "both changes fanned out", func() bool {
		storetest.FanOut(t, st, ep)
		return len(deliveriesBy(t, st)[ep][idB]) == 2
	})
	require.Equal(t, map[int64][]int64{idA: {1, 2}, idB: {1, 2}}, deliveriesBy(t, st)[ep])
}

// TestPruneKeepsAChangeNotFannedOut: an old change with no delivery yet
// is kept while an endpoint's cursor has not passed it, and goes once its
// delivery is created and finished.
func TestPruneKeepsAChangeNotFannedOut(t *testing.T) {
	ctx := context.Background()
	ep := "http://app/hook"
	st := storetest.OpenStoreWithEndpoints(t, storetest.URL(t), store.Options{}, ep)
	grantedAccount(t, st, "cus_a", "ua", "price_pro")
	allChanges(t, st, 1)
	storetest.AgeAccountChanges(t, st, "stripe", "cus_a", 100*24*time.Hour)
	p, err := st.Prune(ctx, reconcile.Retention{OlderThan: 90 * 24 * time.Hour})
	require.NoError(t, err)
	require.Zero(t, p.Changes, "the endpoint has not had it yet")

	storetest.FanOut(t, st, ep)
	ds, err := st.ClaimDeliveries(ctx, "r1", []string{ep}, 10, 10, time.Minute)
	require.NoError(t, err)
	require.Len(t, ds, 1)
	require.NoError(t, st.RecordDelivery(ctx, "r1", ds[0], reconcile.AppDeliveryAttempt{StatusCode: 204}, reconcile.DeliveryDelivered, 0))
	p, err = st.Prune(ctx, reconcile.Retention{OlderThan: 90 * 24 * time.Hour})
	require.NoError(t, err)
	require.Equal(t, int64(1), p.Changes)
}

// TestClaimLiveFirstAndAtMostImports: a claim gives the live change
// before an import's older ones, and no more of an import's than asked.
func TestClaimLiveFirstAndAtMostImports(t *testing.T) {
	ctx := context.Background()
	ep := "http://app/hook"
	st := storetest.OpenStoreWithEndpoints(t, storetest.URL(t), store.Options{}, ep)
	storetest.FanOut(t, st, ep) // registered before the changes
	at := dbNow(t, st)
	var p sweptPage // an import's page of three new accounts
	for _, c := range []string{"cus_i1", "cus_i2", "cus_i3"} {
		p.add(liveSnap(c, "price_pro"), testenv.Plans(), at)
	}
	_, err := st.ApplySweptPage(ctx, p.jobs, at, p.deciders)
	require.NoError(t, err)
	live := grantedAccount(t, st, "cus_live", "u_live", "price_pro")
	storetest.FanOut(t, st, ep)

	first, err := st.ClaimDeliveries(ctx, "r1", []string{ep}, 1, 1, time.Minute)
	require.NoError(t, err)
	require.Len(t, first, 1)
	require.Equal(t, live, first[0].AccountID, "the live change first, though written last")
	require.False(t, first[0].Imported)

	two, err := st.ClaimDeliveries(ctx, "r1", []string{ep}, 10, 2, time.Minute)
	require.NoError(t, err)
	require.Len(t, two, 2, "no more of the import's than asked")
	require.True(t, two[0].Imported && two[1].Imported)
	none, err := st.ClaimDeliveries(ctx, "r2", []string{ep}, 10, 0, time.Minute)
	require.NoError(t, err)
	require.Empty(t, none, "the third is an import's, and none were asked for")
	rest, err := st.ClaimDeliveries(ctx, "r2", []string{ep}, 1, 5, time.Minute)
	require.NoError(t, err)
	require.Len(t, rest, 1)
}

// TestFanOutAnalyzesTheDeliveries: once it has fanned out analyzeEvery
// changes, the fan-out brings the planner's count of app_deliveries up
// to date, so claims during an import do not sort every pending delivery.
func TestFanOutAnalyzesTheDeliveries(t *testing.T) {
	ctx := context.Background()
	ep := "http://app/hook"
	st := storetest.OpenStoreWithEndpoints(t, storetest.URL(t), store.Options{}, ep)
	st.SetAnalyzeEvery(3)
	storetest.FanOut(t, st, ep)
	reltuples := func() float64 {
		var n float64
		require.NoError(t, st.Pool().QueryRow(ctx, `SELECT reltuples FROM pg_class WHERE oid = 'app_deliveries'::regclass`).Scan(&n))
		return n
	}
	require.LessOrEqual(t, reltuples(), 0.0, "never analyzed")
	at := dbNow(t, st)
	var p sweptPage
	for _, c := range []string{"cus_i1", "cus_i2", "cus_i3"} {
		p.add(liveSnap(c, "price_pro"), testenv.Plans(), at)
	}
	_, err := st.ApplySweptPage(ctx, p.jobs, at, p.deciders)
	require.NoError(t, err)
	storetest.FanOut(t, st, ep)
	require.Equal(t, 3.0, reltuples(), "analyzed once three changes were fanned out")
}
