package e2e_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	stripemock "github.com/billsync/billsync/mocks/stripe"
	"github.com/billsync/billsync/providers/stripe"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store"
	"github.com/billsync/billsync/store/storetest"
)

// logRecords is a slog handler keeping every record, for assertions on
// what a run logged.
type logRecords struct {
	mu      sync.Mutex
	records []slog.Record
}

func (l *logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecords) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.records = append(l.records, r.Clone())
	return nil
}
func (l *logRecords) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logRecords) WithGroup(string) slog.Handler      { return l }

// perCustomer returns the messages of the records that name a customer.
func (l *logRecords) perCustomer() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var msgs []string
	for _, r := range l.records {
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "customer" {
				msgs = append(msgs, r.Message)
				return false
			}
			return true
		})
	}
	return msgs
}

func (h *harness) importer(st reconcile.SweepStore, logger *slog.Logger) *reconcile.Sweeper {
	h.t.Helper()
	s, err := reconcile.NewSweeper(reconcile.SweeperConfig{Store: st, Provider: stripe.Provider, Lister: h.Stripe.Client,
		Plans: h.Plans, Logger: logger})
	require.NoError(h.t, err)
	return s
}

// TestImportWritesWhatAReconcileWould: an import of 2,500 customers
// (several pages) writes each account once, recorded as imported, with
// exactly the state and grants a worker's reconcile of the same customers
// writes in a second database, and logs no line per account.
func TestImportWritesWhatAReconcileWould(t *testing.T) {
	t.Parallel()
	h, _ := newSweepHarness(t, stripemock.Options{}, false)
	n := 2500
	if raceEnabled {
		n = 600
	}
	prices := []string{"price_pro", "price_team", "price_free"}
	customers, _ := h.subscribeMany(n, func(i int) string { return prices[i%len(prices)] })

	logs := &logRecords{}
	rep, err := h.importer(h.Store, slog.New(logs)).RunKind(context.Background(), reconcile.RunImport)
	require.NoError(t, err)
	t.Logf("imported %d customers in %s (%d list calls)", n, rep.Took, rep.Calls)
	require.Equal(t, reconcile.RunImport, rep.Run.Kind)
	require.Equal(t, n, rep.Run.Seen)
	require.Equal(t, n, rep.Imported())
	require.Empty(t, rep.Healed, "an import reports no drift")
	require.Empty(t, logs.perCustomer(), "no log line per imported account")
	done, err := h.Store.Imported(context.Background(), stripe.Provider, "")
	require.NoError(t, err)
	require.True(t, done)

	// Each account once, recorded as imported.
	perCustomer := map[string]int{}
	for _, l := range storetest.ReconcileLog(t, h.Store) {
		perCustomer[l.CustomerID]++
		require.Equal(t, reconcile.TriggerImport, l.Trigger)
		require.Equal(t, "import", l.Actor)
		require.True(t, strings.HasPrefix(l.Outcome, reconcile.ImportedPrefix), l.Outcome)
	}
	require.Len(t, perCustomer, n)
	for c, k := range perCustomer {
		require.Equal(t, 1, k, c)
	}
	changes, err := h.Store.Changes(context.Background(), reconcile.ChangeCursor{}, 2*n)
	require.NoError(t, err)
	require.Len(t, changes, n, "one change per account")
	for _, c := range changes {
		require.Equal(t, reconcile.TriggerImport, c.Why.Trigger)
	}

	// The same customers reconciled by a worker in a second database.
	ctx := context.Background()
	other, err := store.Open(ctx, storetest.URL(t), store.Options{})
	require.NoError(t, err)
	t.Cleanup(other.Close)
	for _, c := range customers {
		require.NoError(t, other.Enqueue(ctx, stripe.Provider, c, reconcile.TriggerResync))
	}
	w, err := reconcile.NewWorker(reconcile.WorkerConfig{Name: "second", Store: other,
		Providers: []reconcile.Provider{h.Stripe.Client}, Plans: h.Plans})
	require.NoError(t, err)
	for {
		k, err := w.Drain(ctx)
		require.NoError(t, err)
		if k == 0 {
			break
		}
	}
	for _, c := range customers {
		imported, reconciled := storetest.Customer(t, h.Store, stripe.Provider, c), storetest.Customer(t, other, stripe.Provider, c)
		require.Equal(t, reconciled.Plan, imported.Plan, c)
		require.Equal(t, reconciled.Status, imported.Status, c)
		require.Equal(t, reconciled.Balance, imported.Balance, c)
		require.Equal(t, storetest.Grants(t, other, stripe.Provider, c), storetest.Grants(t, h.Store, stripe.Provider, c), c)
		a, err := h.Store.Account(ctx, stripe.Provider, c)
		require.NoError(t, err)
		b, err := other.Account(ctx, stripe.Provider, c)
		require.NoError(t, err)
		require.Equal(t, b.PeriodStart, a.PeriodStart, c)
		require.Equal(t, b.PeriodEnd, a.PeriodEnd, c)
		require.Equal(t, b.UserRef, a.UserRef, c)
	}
}

// TestImportKilledResumesImportingNobodyTwice: an importer killed half way
// through a page leaves its run running; the next start resumes it from
// its cursor, as an import, and every account is written once.
func TestImportKilledResumesImportingNobodyTwice(t *testing.T) {
	t.Parallel()
	h, calls := newSweepHarness(t, stripemock.Options{}, false)
	customers, _ := h.subscribeMany(350, func(int) string { return "price_pro" }) // four pages
	st := &dyingStore{crashingStore: crashingStore{h.Store}}
	st.left.Store(230) // two pages, then 30 of the third
	_, err := h.importer(st, nil).RunKind(context.Background(), reconcile.RunImport)
	require.ErrorIs(t, err, errKilled)
	status, seen, _, _ := h.sweepRun()
	require.Equal(t, "running", status)
	require.Equal(t, 200, seen)

	calls.n.Store(0)
	// Started as a sweep (the nightly schedule, say): the run left running
	// is resumed as what it is, an import.
	rep, err := h.importer(h.Store, nil).RunKind(context.Background(), reconcile.RunSweep)
	require.NoError(t, err)
	require.True(t, rep.Run.Resumed)
	require.Equal(t, reconcile.RunImport, rep.Run.Kind)
	require.Equal(t, 350, rep.Run.Seen)
	require.LessOrEqual(t, calls.n.Load(), int64(3), "only the pages not finished are listed again")
	require.Empty(t, h.wrongAccounts(customers))
	perCustomer := map[string]int{}
	for _, l := range storetest.ReconcileLog(t, h.Store) {
		require.Equal(t, reconcile.TriggerImport, l.Trigger)
		perCustomer[l.CustomerID]++
	}
	require.Len(t, perCustomer, 350)
	for c, k := range perCustomer {
		require.Equal(t, 1, k, "imported once: %s", c)
	}
	for _, c := range customers {
		require.Equal(t, 1, h.state(c).Grants, "one keyed grant: %s", c)
	}
	require.Equal(t, map[string]int{"succeeded": 1}, h.sweepRuns())
}

// messages returns the messages logged at level, in order.
func (l *logRecords) messages(level slog.Level) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var msgs []string
	for _, r := range l.records {
		if r.Level == level {
			msgs = append(msgs, r.Message)
		}
	}
	return msgs
}

// TestImportLogsProgressNotAccounts: an import logs its progress at INFO
// (here after every page) and a summary, never a line per account, and
// nothing at WARN when nothing needs a person.
func TestImportLogsProgressNotAccounts(t *testing.T) {
	t.Parallel()
	h, _ := newSweepHarness(t, stripemock.Options{}, false)
	h.subscribeMany(250, func(int) string { return "price_team" }) // three pages
	logs := &logRecords{}
	s, err := reconcile.NewSweeper(reconcile.SweeperConfig{Store: h.Store, Provider: stripe.Provider, Lister: h.Stripe.Client,
		Plans: h.Plans, Logger: slog.New(logs), Parallel: 1, ProgressEvery: time.Nanosecond})
	require.NoError(t, err)
	_, err = s.RunKind(context.Background(), reconcile.RunImport)
	require.NoError(t, err)
	info := logs.messages(slog.LevelInfo)
	require.Equal(t, []string{"import started", "import progress", "import progress", "import progress", "import succeeded"}, info)
	require.Empty(t, logs.messages(slog.LevelWarn))
	require.Empty(t, logs.perCustomer())
}

// TestImportMeetsALiveWebhook: during an import, a live webhook for a
// customer the import has not reached yet is applied at once (the
// account, and its change for the app, trigger webhook); the import,
// reaching the customer later, finds the account right and writes nothing
// for it: one change, not two.
func TestImportMeetsALiveWebhook(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h, _ := newSweepHarness(t, stripemock.Options{}, false)
	customers, _ := h.subscribeMany(250, func(int) string { return "price_pro" }) // three pages
	var firstPage []string
	reached, release := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	lister := listerFunc(func(ctx context.Context, cursor string) ([]reconcile.Snapshot, string, bool, error) {
		if calls.Add(1) == 2 {
			close(reached)
			<-release
		}
		snaps, next, more, err := h.Stripe.Client.ListPage(ctx, cursor)
		if calls.Load() == 1 {
			for _, s := range snaps {
				firstPage = append(firstPage, s.CustomerID)
			}
		}
		return snaps, next, more, err
	})
	type result struct {
		rep reconcile.SweepReport
		err error
	}
	done := make(chan result, 1)
	go func() {
		rep, err := h.sweeper(lister, nil).RunKind(ctx, reconcile.RunImport)
		done <- result{rep, err}
	}()
	<-reached // the import has listed its first page and waits on the second

	// A webhook for a customer on a later page is applied by the worker
	// while the import waits.
	live := ""
	for _, a := range customers {
		if !slices.Contains(firstPage, a) {
			live = a
			break
		}
	}
	require.NotEmpty(t, live, "a customer beyond the first page")
	require.NoError(t, h.Store.Enqueue(ctx, stripe.Provider, live, reconcile.TriggerWebhook))
	h.DrainAll(h.Worker(reconcile.WorkerConfig{}), 0)
	require.Equal(t, "pro", h.account(live).Plan, "applied before the import reached it")

	close(release)
	res := <-done
	require.NoError(t, res.err)
	require.Equal(t, 250, res.rep.Run.Seen)

	var triggers []string
	for _, l := range storetest.ReconcileLog(t, h.Store) {
		if l.CustomerID == live && l.Result == reconcile.ResultApplied {
			triggers = append(triggers, l.Trigger)
		}
	}
	require.Equal(t, []string{reconcile.TriggerWebhook}, triggers, "the import wrote nothing for the live customer")
	entries, err := h.Store.AccountChanges(ctx, h.account(live).ID, 10)
	require.NoError(t, err)
	var changes []string
	for _, e := range entries {
		changes = append(changes, e.Why.Trigger)
	}
	require.Equal(t, []string{reconcile.TriggerWebhook}, changes, "the app hears of the live customer once")
	require.Equal(t, 250-1, res.rep.Run.Healed, "every other customer imported")
}

// TestImportAtStartRetriedUntilItSucceeds: an import at start whose
// listing fails (the provider down) is started again after a wait while
// the runner runs, until it succeeds: no restart needed. Each failed try
// is recorded as a failed import.
func TestImportAtStartRetriedUntilItSucceeds(t *testing.T) {
	t.Parallel()
	h, _ := newSweepHarness(t, stripemock.Options{}, false)
	customers, _ := h.subscribeMany(150, func(int) string { return "price_team" }) // two pages
	var calls atomic.Int32
	down := errors.New("provider down")
	lister := listerFunc(func(ctx context.Context, cursor string) ([]reconcile.Snapshot, string, bool, error) {
		if calls.Add(1) <= 2 { // the first two tries fail on their first page
			return nil, "", false, down
		}
		return h.Stripe.Client.ListPage(ctx, cursor)
	})
	r, err := reconcile.NewSweepRunner(reconcile.SweepRunnerConfig{Sweepers: []*reconcile.Sweeper{h.sweeper(lister, nil)},
		ImportRetry: time.Millisecond})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	starts := r.StartImports(context.Background())
	require.Len(t, starts, 1)
	rec := sweepRecord(t, h.Store, stripe.Provider, "succeeded")
	require.Equal(t, reconcile.RunImport, rec.Kind)
	require.Equal(t, 150, rec.Seen)
	require.Equal(t, map[string]int{"failed": 2, "succeeded": 1}, h.sweepRuns())
	runs, err := h.Store.SweepRuns(context.Background(), 10)
	require.NoError(t, err)
	for _, run := range runs {
		require.Equal(t, reconcile.RunImport, run.Kind, "run %d", run.ID)
	}
	require.Empty(t, h.wrongAccounts(customers))
	imported, err := h.Store.Imported(context.Background(), stripe.Provider, "")
	require.NoError(t, err)
	require.True(t, imported)
}

// TestImportRetryStopsWithTheRunner: the wait before a failed import's
// next try ends with the runner, whose Run then returns; no try starts
// after it.
func TestImportRetryStopsWithTheRunner(t *testing.T) {
	t.Parallel()
	h, _ := newSweepHarness(t, stripemock.Options{}, false)
	h.subscribeMany(1, func(int) string { return "price_team" })
	var calls atomic.Int32
	lister := listerFunc(func(context.Context, string) ([]reconcile.Snapshot, string, bool, error) {
		calls.Add(1)
		return nil, "", false, errors.New("provider down")
	})
	r, err := reconcile.NewSweepRunner(reconcile.SweepRunnerConfig{Sweepers: []*reconcile.Sweeper{h.sweeper(lister, nil)},
		ImportRetry: time.Hour})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	require.Len(t, r.StartImports(context.Background()), 1)
	sweepRecord(t, h.Store, stripe.Provider, "failed") // now waiting an hour to try again
	cancel()
	storetest.WaitFor(t, "Run returns, the retry's wait stopped", func() bool {
		select {
		case <-done:
			return true
		default:
			return false
		}
	})
	require.EqualValues(t, 1, calls.Load(), "no try after the runner stopped")
	require.Equal(t, map[string]int{"failed": 1}, h.sweepRuns())
}
