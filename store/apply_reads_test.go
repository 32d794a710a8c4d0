package store_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store"
	"github.com/billsync/billsync/store/storetest"
)

// statements records the SQL a store sends (a pgx tracer).
type statements struct {
	mu  sync.Mutex
	sql []string
}

func (s *statements) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sql = append(s.sql, d.SQL)
	return ctx
}

func (s *statements) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// during returns the statements fn sent: all of them, and those that read
// the ledger.
func (s *statements) during(t *testing.T, fn func()) (all, ledgerReads int) {
	t.Helper()
	s.mu.Lock()
	s.sql = nil
	s.mu.Unlock()
	fn()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, q := range s.sql {
		if strings.Contains(q, "FROM ledger") {
			ledgerReads++
		}
	}
	return len(s.sql), ledgerReads
}

// TestApplyReadsTheLedgerOnce: an apply reads the account's ledger once,
// under the lock, whatever it grants (the default meter and a metered
// feature here: two grants), and does not read it again to tell the app;
// the same for the sweep's apply.
func TestApplyReadsTheLedgerOnce(t *testing.T) {
	ctx := context.Background()
	trace := &statements{}
	st, err := store.OpenTraced(ctx, storetest.URL(t), trace)
	require.NoError(t, err)
	t.Cleanup(st.Close)
	plans := testenv.FeaturePlans()

	receive(t, st, "evt_1", "cus_1")
	job, at := claimOne(t, st), dbNow(t, st)
	var out reconcile.Outcome
	all, reads := trace.during(t, func() {
		out, err = applySnap(ctx, st, job, at, liveSnap("cus_1", "price_pro"), plans)
	})
	require.NoError(t, err)
	require.Equal(t, reconcile.ResultApplied, out.Result)
	require.Contains(t, out.Text, "granted ai_credits +1000", "two grants were written")
	t.Logf("Apply of a new account with two grants: %d statements (begin and commit included), %d ledger reads", all, reads)
	require.Equal(t, 1, reads, "the ledger is read once per apply")
	require.Equal(t, map[string]storetest.MeterRows{"": {Grants: 1, Sum: 500}, "ai_credits": {Grants: 1, Sum: 1000}},
		storetest.Meters(t, st, out.AccountID))

	// An upgrade tops both meters up, again from one read.
	receive(t, st, "evt_2", "cus_1")
	job, at = claimOne(t, st), dbNow(t, st)
	all, reads = trace.during(t, func() {
		out, err = applySnap(ctx, st, job, at, liveSnap("cus_1", "price_team"), plans)
	})
	require.NoError(t, err)
	require.Contains(t, out.Text, "Team allowance granted (+1500), granted ai_credits +4000")
	t.Logf("Apply of an upgrade with two top-ups: %d statements, %d ledger reads", all, reads)
	require.Equal(t, 1, reads, "the ledger is read once per apply")

	sweep := reconcile.Job{Provider: "stripe", CustomerID: "cus_2", Trigger: reconcile.TriggerSweep}
	at = dbNow(t, st)
	all, reads = trace.during(t, func() {
		var outs []reconcile.SweptOutcome
		outs, err = st.ApplySweptPage(ctx, []reconcile.Job{sweep}, at,
			[]reconcile.Decider{reconcile.NewDecider(sweep, liveSnap("cus_2", "price_pro"), plans, at)})
		if err == nil {
			out = outs[0].Outcome
		}
	})
	require.NoError(t, err)
	require.Equal(t, reconcile.ResultApplied, out.Result)
	t.Logf("ApplySweptPage of a new account with two grants: %d statements, %d ledger reads", all, reads)
	require.Equal(t, 1, reads, "the ledger is read once per swept apply")
}
