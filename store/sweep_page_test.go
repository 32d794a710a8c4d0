package store_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store"
	"github.com/billsync/billsync/store/scratch"
	"github.com/billsync/billsync/store/storetest"
)

// sweptPage is a page of swept snapshots as the sweeper hands it over.
type sweptPage struct {
	trigger  string // TriggerImport when empty
	jobs     []reconcile.Job
	deciders []reconcile.Decider
}

func (p *sweptPage) add(snap reconcile.Snapshot, plans *reconcile.Plans, at time.Time) {
	job := reconcile.Job{Provider: "stripe", CustomerID: snap.CustomerID, Trigger: cmp.Or(p.trigger, reconcile.TriggerImport)}
	p.jobs = append(p.jobs, job)
	p.deciders = append(p.deciders, reconcile.NewDecider(job, snap, plans, at))
}

// applyAlone applies each account of the page in a transaction of its
// own, as the sweep did before pages were applied together.
func (p sweptPage) applyAlone(ctx context.Context, st *store.Store, at time.Time) ([]reconcile.SweptOutcome, error) {
	var outs []reconcile.SweptOutcome
	for i := range p.jobs {
		out, err := st.ApplySweptPage(ctx, p.jobs[i:i+1], at, p.deciders[i:i+1])
		if err != nil {
			return nil, err
		}
		outs = append(outs, out...)
	}
	return outs, nil
}

// sweepOnce applies one snapshot alone at at, as setup.
func sweepOnce(t *testing.T, st *store.Store, snap reconcile.Snapshot, at time.Time) {
	t.Helper()
	p := sweptPage{trigger: reconcile.TriggerSweep}
	p.add(snap, testenv.Plans(), at)
	_, err := st.ApplySweptPage(context.Background(), p.jobs, at, p.deciders)
	require.NoError(t, err)
}

// receiveExpecting stores an event for customer whose own object says its
// subscription is on price, so the customer's queue row expects it.
func receiveExpecting(t *testing.T, st *store.Store, id, customer, price string) {
	t.Helper()
	_, err := st.StoreReceipt(context.Background(), reconcile.Receipt{Event: reconcile.Event{
		Provider: "stripe", DedupeKey: id, EventID: id, Type: "customer.subscription.updated",
		CustomerID: customer, Payload: []byte(`{}`),
		Expect: &reconcile.Expectation{SubscriptionID: "sub_" + customer, Status: "active", Prices: []string{price}}}})
	require.NoError(t, err)
}

// mixedPage seeds st with a customer of each kind a page meets and
// returns the page to apply at at (after every seeded event):
//
//	a_new        no account yet
//	b_changed    on pro, now team
//	c_regrant    on pro, its grant lost
//	d_same       on pro, granted: nothing to write
//	e_stale      on pro, observed after at: stale
//	f_unmapped   a price no plan maps: ignored
//	g_events     on pro, now team, two pending events, a queue row expecting team
//	h_waiting    on pro and right, a pending event: left pending
func mixedPage(t *testing.T, st *store.Store, seeded, at time.Time) sweptPage {
	t.Helper()
	plans := testenv.Plans()
	for _, c := range []string{"cus_b_changed", "cus_c_regrant", "cus_d_same", "cus_g_events", "cus_h_waiting"} {
		sweepOnce(t, st, liveSnap(c, "price_pro"), seeded)
	}
	sweepOnce(t, st, liveSnap("cus_e_stale", "price_pro"), at.Add(time.Hour))
	regrant, err := st.Account(context.Background(), "stripe", "cus_c_regrant")
	require.NoError(t, err)
	storetest.LoseLedger(t, st, regrant.ID)
	var p sweptPage
	for _, snap := range []reconcile.Snapshot{
		liveSnap("cus_a_new", "price_pro"), liveSnap("cus_b_changed", "price_team"), liveSnap("cus_c_regrant", "price_pro"),
		liveSnap("cus_d_same", "price_pro"), liveSnap("cus_e_stale", "price_team"), liveSnap("cus_f_unmapped", "price_nope"),
		liveSnap("cus_g_events", "price_team"), liveSnap("cus_h_waiting", "price_pro"),
	} {
		p.add(snap, plans, at)
	}
	receiveExpecting(t, st, "evt_g1", "cus_g_events", "price_pro")
	receiveExpecting(t, st, "evt_g2", "cus_g_events", "price_team")
	receive(t, st, "evt_h1", "cus_h_waiting")
	return p
}

// pageRows reads what applying a page leaves, table by table, without
// what differs between two runs of the same writes (row ids of the log
// and the changes, write times, transaction ids).
func pageRows(t *testing.T, st *store.Store) map[string][]string {
	t.Helper()
	queries := map[string]string{
		"accounts": `SELECT (to_jsonb(a) - ARRAY['updated_at', 'created_at', 'change_xid'])::text FROM accounts a ORDER BY customer_id`,
		"ledger":   `SELECT (to_jsonb(l) - ARRAY['id', 'created_at'])::text FROM ledger l ORDER BY entry_key`,
		"reconcile_log": `SELECT (to_jsonb(r) - ARRAY['id', 'created_at'])::text FROM reconcile_log r
			WHERE trigger = 'import' ORDER BY id`,
		"account_changes": `SELECT jsonb_build_object('account', account_id, 'seq', seq, 'payload', payload - 'id' - 'time')::text
			FROM account_changes ORDER BY account_id, seq`,
		"inbox_events": `SELECT jsonb_build_object('key', dedupe_key, 'status', status, 'outcome', outcome)::text
			FROM inbox_events ORDER BY dedupe_key`,
		"reconcile_queue": `SELECT jsonb_build_object('customer', customer_id, 'status', status, 'expect', expect,
			'expect_event', expect_event IS NOT NULL)::text FROM reconcile_queue ORDER BY customer_id`,
	}
	out := map[string][]string{}
	for table, q := range queries {
		rows, err := st.Pool().Query(context.Background(), q)
		require.NoError(t, err)
		out[table], err = pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err, table)
	}
	return out
}

// TestSweptPageLeavesWhatEachApplyLeaves: a page of every kind of
// customer applied in one transaction leaves exactly the rows that
// applying each of its accounts alone leaves, and answers the same.
func TestSweptPageLeavesWhatEachApplyLeaves(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	batch, alone := storetest.NewStore(t), storetest.NewStore(t)
	seeded := time.Now().Add(-time.Hour).Truncate(time.Microsecond)
	at := seeded.Add(50 * time.Minute)
	page := mixedPage(t, batch, seeded, at)
	mixedPage(t, alone, seeded, at)
	at = dbNow(t, batch).Add(time.Second) // after every event of either database

	outs, err := batch.ApplySweptPage(ctx, page.jobs, at, page.deciders)
	require.NoError(t, err)
	want, err := page.applyAlone(ctx, alone, at)
	require.NoError(t, err)
	// The events answered are the same, from the same sources; each
	// database received its copies at its own times.
	for i := range outs {
		require.Len(t, outs[i].Answered, len(want[i].Answered), outs[i].Text)
		for k := range outs[i].Answered {
			require.Equal(t, want[i].Answered[k].Source, outs[i].Answered[k].Source)
			outs[i].Answered[k].ReceivedAt, want[i].Answered[k].ReceivedAt = time.Time{}, time.Time{}
		}
	}
	require.Equal(t, want, outs)
	require.Equal(t, pageRows(t, alone), pageRows(t, batch))

	results := map[string]reconcile.Result{}
	for i, o := range outs {
		results[page.jobs[i].CustomerID] = o.Result
	}
	require.Equal(t, map[string]reconcile.Result{
		"cus_a_new": reconcile.ResultApplied, "cus_b_changed": reconcile.ResultApplied, "cus_c_regrant": reconcile.ResultApplied,
		"cus_d_same": reconcile.ResultUnchanged, "cus_e_stale": reconcile.ResultStale, "cus_f_unmapped": reconcile.ResultIgnored,
		"cus_g_events": reconcile.ResultApplied, "cus_h_waiting": reconcile.ResultUnchanged,
	}, results)
	g := storetest.Customer(t, batch, "stripe", "cus_g_events")
	require.Equal(t, "team", g.Plan)
	require.Equal(t, map[string]int{"applied": 2}, g.Events)
	var expects bool
	require.NoError(t, batch.Pool().QueryRow(ctx, `SELECT expect IS NOT NULL FROM reconcile_queue WHERE customer_id = 'cus_g_events'`).
		Scan(&expects))
	require.False(t, expects, "no pending event expects anything now")
	require.Equal(t, map[string]int{"pending": 1}, storetest.Customer(t, batch, "stripe", "cus_h_waiting").Events)
	require.Equal(t, "pro", storetest.Customer(t, batch, "stripe", "cus_e_stale").Plan)
	require.Equal(t, 1, storetest.Customer(t, batch, "stripe", "cus_c_regrant").Grants)
	require.True(t, outs[6].WebhookSince, "g's webhooks came after its last observation")
	require.False(t, outs[1].WebhookSince)
	require.Equal(t, 2, outs[6].Events)
}

// TestSweptPageRacesWorkers: a page applied while workers apply the same
// customers (a worker locks its queue row, then one account; the page
// locks its accounts in id order and never waits for a queue row: it
// refreshes their expectations only where no worker holds one) neither
// deadlocks nor loses a write: every account ends on the later
// observation (the workers'), granted once for it, its changes numbered
// without a gap. Run many rounds: the interleavings differ.
func TestSweptPageRacesWorkers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.NewStore(t)
	plans := testenv.Plans()
	const n = 30
	for round := range 15 {
		for i := range n {
			c := fmt.Sprintf("cus_%d_%d", round, i)
			receiveExpecting(t, st, "evt_"+c, c, "price_team") // a queue row the page refreshes, unless a worker holds it
		}
		jobs, err := st.Claim(ctx, "worker", n, time.Minute)
		require.NoError(t, err)
		require.Len(t, jobs, n)
		at := dbNow(t, st)
		var page sweptPage
		for _, j := range jobs {
			page.add(liveSnap(j.CustomerID, "price_pro"), plans, at)
		}
		later := at.Add(time.Millisecond)
		errs := make(chan error, n+1)
		var wg sync.WaitGroup
		wg.Go(func() {
			_, err := st.ApplySweptPage(ctx, page.jobs, at, page.deciders)
			errs <- err
		})
		for w := range 2 {
			wg.Go(func() {
				for k := w; k < n; k += 2 {
					j := jobs[n-1-k] // against the page's order
					_, err := applySnap(ctx, st, j, later, liveSnap(j.CustomerID, "price_team"), plans)
					errs <- err
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err, "round %d", round)
		}
		for _, j := range jobs {
			c := storetest.Customer(t, st, "stripe", j.CustomerID)
			require.Equal(t, "team", c.Plan, "round %d: %s", round, j.CustomerID)
			require.EqualValues(t, 2000, c.Balance, "round %d: %s", round, j.CustomerID)
			require.Equal(t, map[string]int{"applied": 1}, c.Events)
			var seqs, top int
			require.NoError(t, st.Pool().QueryRow(ctx, `SELECT count(*), max(seq) FROM account_changes c JOIN accounts a ON a.id = c.account_id
				WHERE a.customer_id = $1`, j.CustomerID).Scan(&seqs, &top))
			require.Equal(t, top, seqs, "round %d: %s's changes are numbered without a gap", round, j.CustomerID)
		}
	}
}

var errPageKilled = errors.New("killed mid-page")

// TestSweptPageCrashLeavesNothing: a crash injected in a page's
// transaction (after its account write, after its change write) leaves
// nothing of the page, and applying the page again writes each account
// once.
func TestSweptPageCrashLeavesNothing(t *testing.T) {
	t.Parallel()
	for name, crash := range map[string]func(*store.Store, func() error){
		"AfterAccountWrite": scratch.CrashAfterAccountWrite,
		"AfterChangeWrite":  func(st *store.Store, fn func() error) { st.SetAfterChangeWrite(fn) },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			st := storetest.NewStore(t)
			seeded := time.Now().Add(-time.Hour)
			page := mixedPage(t, st, seeded, seeded.Add(50*time.Minute))
			at := dbNow(t, st).Add(time.Second)
			before, counts := pageRows(t, st), storetest.Counts(t, st)

			var fired int
			crash(st, func() error { fired++; return errPageKilled })
			_, err := st.ApplySweptPage(ctx, page.jobs, at, page.deciders)
			require.ErrorIs(t, err, errPageKilled)
			require.Equal(t, 1, fired, "the fault fires once for the page")
			require.Equal(t, before, pageRows(t, st), "nothing of the page is left")
			require.Equal(t, counts, storetest.Counts(t, st))

			crash(st, nil)
			_, err = st.ApplySweptPage(ctx, page.jobs, at, page.deciders)
			require.NoError(t, err)
			written := map[string]int{}
			rows, err := st.Pool().Query(ctx, `SELECT a.customer_id FROM account_changes c JOIN accounts a ON a.id = c.account_id
				WHERE c.payload->'why'->>'trigger' = 'import'`)
			require.NoError(t, err)
			customers, err := pgx.CollectRows(rows, pgx.RowTo[string])
			require.NoError(t, err)
			for _, c := range customers {
				written[c]++
			}
			require.Equal(t, map[string]int{"cus_a_new": 1, "cus_b_changed": 1, "cus_c_regrant": 1, "cus_g_events": 1}, written)
			logged := map[string]int{}
			for _, l := range storetest.ReconcileLog(t, st) {
				if l.Trigger == reconcile.TriggerImport {
					logged[l.CustomerID]++
				}
			}
			require.Equal(t, map[string]int{"cus_a_new": 1, "cus_b_changed": 1, "cus_c_regrant": 1, "cus_f_unmapped": 1,
				"cus_g_events": 1}, logged)
			require.Equal(t, 1, storetest.Customer(t, st, "stripe", "cus_a_new").Grants)
		})
	}
}

// BenchmarkApplySweptPage measures an import's writes: pages of 100 new
// accounts applied in one transaction (ApplySweptPage) and, in the same
// run, each account of such a page in a transaction of its own, reported
// in accounts a second and as the ratio of the two.
//
//	go test -bench ApplySweptPage -benchtime 30x -run '^$' ./store
func BenchmarkApplySweptPage(b *testing.B) {
	ctx := context.Background()
	st := storetest.NewStore(b)
	plans := testenv.Plans()
	const size = 100
	newPage := func(kind string, i int, at time.Time) sweptPage {
		var p sweptPage
		for k := range size {
			p.add(liveSnap(fmt.Sprintf("cus_%s_%d_%d", kind, i, k), "price_pro"), plans, at)
		}
		return p
	}
	var together, alone time.Duration
	pages := 0
	for b.Loop() {
		at := time.Now()
		p := newPage("together", pages, at)
		start := time.Now()
		if _, err := st.ApplySweptPage(ctx, p.jobs, at, p.deciders); err != nil {
			b.Fatal(err)
		}
		together += time.Since(start)
		p = newPage("alone", pages, at)
		start = time.Now()
		if _, err := p.applyAlone(ctx, st, at); err != nil {
			b.Fatal(err)
		}
		alone += time.Since(start)
		pages++
	}
	accounts := float64(pages * size)
	b.ReportMetric(accounts/together.Seconds(), "page-accounts/s")
	b.ReportMetric(accounts/alone.Seconds(), "alone-accounts/s")
	b.ReportMetric(alone.Seconds()/together.Seconds(), "speedup")
}
