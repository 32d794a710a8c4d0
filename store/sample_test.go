package store_test

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store"
	"github.com/billsync/billsync/store/storetest"
)

// addAccounts inserts n accounts of provider (cus_<i>), every third id
// skipped (the gaps a rolled-back preview's sequence value leaves), and
// returns their ids.
func addAccounts(t testing.TB, st *store.Store, provider string, n int) {
	t.Helper()
	ctx := context.Background()
	_, err := st.Pool().Exec(ctx, `
		INSERT INTO accounts (id, provider, customer_id)
		SELECT i * 3 / 2 + 1 + coalesce((SELECT max(id) FROM accounts), 0), $1, $1 || '_cus_' || i
		FROM generate_series(1, $2) i`, provider, n)
	require.NoError(t, err)
	_, err = st.Pool().Exec(ctx, `SELECT setval('accounts_id_seq', (SELECT max(id) FROM accounts))`)
	require.NoError(t, err)
}

// changeAccounts writes an account change for each of provider's
// customers named, ago old.
func changeAccounts(t testing.TB, st *store.Store, provider string, ago time.Duration, customers ...string) {
	t.Helper()
	_, err := st.Pool().Exec(context.Background(), `
		INSERT INTO account_changes (account_id, seq, created_at, payload)
		SELECT id, 1 + (SELECT count(*) FROM account_changes c WHERE c.account_id = a.id), now() - make_interval(secs => $3), '{}'
		FROM accounts a WHERE provider = $1 AND customer_id = ANY($2)`, provider, customers, ago.Seconds())
	require.NoError(t, err)
}

func TestPickSampleSmallBaseWhole(t *testing.T) {
	t.Parallel()
	st := storetest.NewStore(t)
	addAccounts(t, st, "stripe", 12)
	addAccounts(t, st, "kinde", 50)
	got, err := st.PickSample(context.Background(), "stripe", 12, 6)
	require.NoError(t, err)
	require.Len(t, got, 12, "a dozen accounts and a sample of 12: every one")
	got, err = st.PickSample(context.Background(), "stripe", 30, 15)
	require.NoError(t, err)
	require.Len(t, got, 12)
	for _, a := range got {
		require.Contains(t, a.CustomerID, "stripe_cus_")
	}
}

func TestPickSampleHalfRecentHalfUniform(t *testing.T) {
	t.Parallel()
	st := storetest.NewStore(t)
	addAccounts(t, st, "stripe", 2000)
	addAccounts(t, st, "kinde", 500)
	changeAccounts(t, st, "stripe", time.Minute, "stripe_cus_10", "stripe_cus_20", "stripe_cus_30")
	changeAccounts(t, st, "stripe", 2*24*time.Hour, "stripe_cus_40") // older than a day: not recent
	changeAccounts(t, st, "kinde", time.Minute, "kinde_cus_1")       // another provider's
	ctx := context.Background()
	counts := map[string]int{}
	for range 50 {
		got, err := st.PickSample(ctx, "stripe", 6, 3)
		require.NoError(t, err)
		require.Len(t, got, 6)
		ids := map[int64]bool{}
		for _, a := range got {
			require.False(t, ids[a.ID], "an account is picked once a round")
			ids[a.ID] = true
			require.Contains(t, a.CustomerID, "stripe_cus_")
			counts[a.CustomerID]++
		}
		// The recent half: the three changed within the day, each round.
		for _, c := range []string{"stripe_cus_10", "stripe_cus_20", "stripe_cus_30"} {
			require.True(t, containsCustomer(got, c), c)
		}
	}
	// The uniform half spreads over the 2000 (150 picks: many distinct).
	require.Greater(t, len(counts), 100)
}

func containsCustomer(as []reconcile.SampleAccount, customer string) bool {
	for _, a := range as {
		if a.CustomerID == customer {
			return true
		}
	}
	return false
}

func TestRecordSamplesQueuesTheDrifted(t *testing.T) {
	t.Parallel()
	st := storetest.NewStore(t)
	addAccounts(t, st, "stripe", 3)
	accs := storetest.Accounts(t, st)
	ctx := context.Background()
	require.NoError(t, st.RecordSamples(ctx, []reconcile.Sample{
		{Provider: "stripe", CustomerID: accs[0].CustomerID, AccountID: accs[0].ID},
		{Provider: "stripe", CustomerID: accs[1].CustomerID, AccountID: accs[1].ID, Drifted: true, Class: reconcile.SampleClassPlan},
		{Provider: "stripe", CustomerID: accs[2].CustomerID, AccountID: accs[2].ID, Drifted: true, Class: reconcile.SampleClassMissing},
	}))
	q := storetest.Queue(t, st)
	require.Len(t, q, 1, "the drifted account a reconcile can heal, not the equal one nor the missing one")
	require.Equal(t, accs[1].CustomerID, q[0].CustomerID)
	require.Equal(t, reconcile.TriggerSample, q[0].Trigger)
	d, err := st.DriftedSamples(ctx, 10)
	require.NoError(t, err)
	require.Len(t, d, 2)
	require.Equal(t, reconcile.SampleClassMissing, d[0].Class, "newest first")
	require.Equal(t, accs[1].ID, d[1].AccountID)
	require.Equal(t, map[string]int{"samples": 3}, map[string]int{"samples": storetest.Counts(t, st)["samples"]})

	// The prune forgets samples older than the retention.
	_, err = st.Pool().Exec(ctx, `UPDATE samples SET sampled_at = now() - interval '100 days' WHERE drifted`)
	require.NoError(t, err)
	p, err := st.Prune(ctx, reconcile.Retention{OlderThan: 90 * 24 * time.Hour})
	require.NoError(t, err)
	require.EqualValues(t, 2, p.Samples)
	require.Equal(t, 1, storetest.Counts(t, st)["samples"])
}

// TestSampleWindows: each window counts the samples since its start and
// the drifted among them; the overview shows them as signals.
func TestSampleWindows(t *testing.T) {
	t.Parallel()
	st := storetest.NewStore(t)
	addAccounts(t, st, "stripe", 4)
	accs := storetest.Accounts(t, st)
	ctx := context.Background()
	var samples []reconcile.Sample
	for i, a := range accs {
		s := reconcile.Sample{Provider: "stripe", CustomerID: a.CustomerID, AccountID: a.ID}
		if i%2 == 1 {
			s.Drifted, s.Class = true, reconcile.SampleClassPlan
		}
		samples = append(samples, s)
	}
	require.NoError(t, st.RecordSamples(ctx, samples))
	// One equal and one drifted sample three hours ago; one equal 40 days ago.
	_, err := st.Pool().Exec(ctx, `UPDATE samples SET sampled_at = now() - interval '3 hours' WHERE account_id = ANY($1)`,
		[]int64{accs[0].ID, accs[1].ID})
	require.NoError(t, err)
	require.NoError(t, st.RecordSamples(ctx, []reconcile.Sample{{Provider: "stripe", CustomerID: accs[0].CustomerID, AccountID: accs[0].ID}}))
	_, err = st.Pool().Exec(ctx, `UPDATE samples SET sampled_at = now() - interval '40 days'
		WHERE id = (SELECT max(id) FROM samples)`)
	require.NoError(t, err)

	w, err := st.SampleWindows(ctx, reconcile.SampleWindows)
	require.NoError(t, err)
	require.Equal(t, []reconcile.SampleWindow{
		{Window: time.Hour, Sampled: 2, Drifted: 1},
		{Window: 6 * time.Hour, Sampled: 4, Drifted: 2},
		{Window: 30 * 24 * time.Hour, Sampled: 4, Drifted: 2},
	}, w)
	o, err := st.Overview(ctx)
	require.NoError(t, err)
	var names []string
	for _, s := range o.Signals {
		names = append(names, s.Name)
	}
	require.Contains(t, names, "correctness error budget, 30d")
}

// TestPickSampleCheapOn100k measures the pick on 100,000 accounts (with
// 100,000 changes, a third of the ids gaps); BILLSYNC_SAMPLE_BENCH=1 runs
// it.
func TestPickSampleCheapOn100k(t *testing.T) {
	if os.Getenv("BILLSYNC_SAMPLE_BENCH") == "" {
		t.Skip("BILLSYNC_SAMPLE_BENCH=1 measures the pick on 100,000 accounts")
	}
	st := storetest.NewStore(t)
	const n = 100_000
	addAccounts(t, st, "stripe", n)
	ctx := context.Background()
	_, err := st.Pool().Exec(ctx, `
		INSERT INTO account_changes (account_id, seq, created_at, payload)
		SELECT id, 1, now() - make_interval(secs => random() * 2 * 86400), '{}' FROM accounts`)
	require.NoError(t, err)
	_, err = st.Pool().Exec(ctx, `ANALYZE accounts; ANALYZE account_changes`)
	require.NoError(t, err)
	for _, size := range []int{1, 60, 300} {
		const rounds = 20
		start := time.Now()
		for range rounds {
			got, err := st.PickSample(ctx, "stripe", size, size/2)
			require.NoError(t, err)
			require.Len(t, got, size)
		}
		t.Logf("pick of %s on %d accounts: %s a round", strconv.Itoa(size), n, time.Since(start)/rounds)
	}
}
