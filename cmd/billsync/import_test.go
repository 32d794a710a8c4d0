package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/app"
	stripemock "github.com/billsync/billsync/mocks/stripe"
	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store"
	"github.com/billsync/billsync/store/storetest"
)

func TestImportCommand(t *testing.T) {
	h := testenv.ForTest(t, testenv.Stripe, testenv.Options{})
	ctx := context.Background()
	cus := h.Customer("u_1")
	h.Subscribe(cus, "price_team")
	dbURL := storetest.URL(t)
	t.Setenv("DATABASE_URL", dbURL)
	t.Setenv("STRIPE_API_KEY", stripemock.DefaultAPIKey)
	t.Setenv("STRIPE_API_URL", h.URL)

	// Another replica holds the lease: the import says so and fails.
	st := storetest.OpenStore(t, dbURL, store.Options{})
	_, release, err := st.SweepLock(ctx, "stripe", "")
	require.NoError(t, err)
	var out, logs bytes.Buffer
	err = run(ctx, []string{"import"}, &out, &logs)
	require.ErrorIs(t, err, reconcile.ErrSweepRunning)
	require.ErrorContains(t, err, "another replica or command holds the sweep lock")
	release()

	out.Reset()
	require.NoError(t, run(ctx, []string{"import", "-provider", "stripe"}, &out, &logs), logs.String())
	require.True(t, strings.HasPrefix(out.String(), "stripe import 1 succeeded\n"), out.String())
	require.Contains(t, out.String(), "seen 1, imported 1, failed 0")
	require.NotContains(t, out.String(), "healed")
	require.NotContains(t, logs.String(), "sweep healed an account")
	done, err := st.Imported(ctx, "stripe", "")
	require.NoError(t, err)
	require.True(t, done)
	require.Equal(t, "team", storetest.Customer(t, st, "stripe", cus).Plan)
}

// TestServesImportOnceAtStart: two replicas of serve's assembly start
// together on an empty database: they run one import between them, the
// start says why, and a replica started once it has succeeded imports
// nothing.
func TestServesImportOnceAtStart(t *testing.T) {
	h := testenv.ForTest(t, testenv.Stripe, testenv.Options{})
	const n = 250 // three pages
	customers := make([]string, n)
	for i := range customers {
		customers[i] = h.Customer(fmt.Sprint("u_", i))
		h.Subscribe(customers[i], "price_pro")
	}
	plans, err := loadPlans("")
	require.NoError(t, err)
	dbURL := storetest.URL(t)
	logs := &syncBuffer{}
	start := func(ctx context.Context) func(context.Context) error {
		st := storetest.OpenStore(t, dbURL, store.Options{})
		a, err := app.New(ctx, app.Config{Workers: 1, AutoImport: true, ShutdownTimeout: time.Minute},
			app.Parts{Store: st, Plans: plans, Stripe: h.Stripe.Client, Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
		require.NoError(t, err)
		return a.Start(ctx)
	}
	st := storetest.OpenStore(t, dbURL, store.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	stops := []func(context.Context) error{start(ctx), start(ctx)}
	require.Eventually(t, func() bool {
		done, err := st.Imported(context.Background(), "stripe", "")
		return err == nil && done
	}, time.Minute, 10*time.Millisecond, "the import never completed:\n%s", logs)
	cancel()
	for _, stop := range stops {
		require.NoError(t, stop(context.Background()))
	}
	require.Contains(t, logs.String(), "no import of stripe has completed: importing its customers now")
	require.NotContains(t, logs.String(), "sweep healed an account", "no line per imported account")
	runs, err := st.SweepRuns(context.Background(), maxSweepRuns)
	require.NoError(t, err)
	require.Len(t, runs, 1, "one import between the replicas")
	require.Equal(t, reconcile.RunImport, runs[0].Kind)
	require.Equal(t, n, runs[0].Seen)
	require.Equal(t, n, runs[0].Healed)
	for _, c := range customers[:5] {
		require.Equal(t, "pro", storetest.Customer(t, st, "stripe", c).Plan)
	}

	// Imported: a replica starting now starts no import.
	before := strings.Count(logs.String(), "importing its customers now")
	ctx, cancel = context.WithCancel(context.Background())
	stop := start(ctx)
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "no import at start") },
		time.Minute, 10*time.Millisecond, "the third replica never looked:\n%s", logs)
	cancel()
	require.NoError(t, stop(context.Background()))
	require.Equal(t, before, strings.Count(logs.String(), "importing its customers now"))
	runs, err = st.SweepRuns(context.Background(), maxSweepRuns)
	require.NoError(t, err)
	require.Len(t, runs, 1)
}

// TestImportMetrics: /metrics reads a running import's figures from the
// database, as every replica does.
func TestImportMetrics(t *testing.T) {
	ctx := context.Background()
	h := testenv.ForTest(t, testenv.Stripe, testenv.Options{})
	st := storetest.NewStore(t)
	run, err := st.StartSweep(ctx, "stripe", "", reconcile.RunImport)
	require.NoError(t, err)
	run.Healed, run.Progress = 2, 0.25
	_, err = st.SweepPage(ctx, run, []string{"cus_a", "cus_b", "cus_c"})
	require.NoError(t, err)
	plans, err := loadPlans("")
	require.NoError(t, err)
	a, err := app.New(ctx, app.Config{}, app.Parts{Store: st, Plans: plans, Stripe: h.Stripe.Client})
	require.NoError(t, err)
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(srv.Close)
	text := scrape(t, strings.TrimPrefix(srv.URL, "http://"))
	require.Regexp(t, `(?m)^billsync_import_accounts\{provider="stripe"\} 3$`, text)
	require.Regexp(t, `(?m)^billsync_import_imported_accounts\{provider="stripe"\} 2$`, text)
	require.Regexp(t, `(?m)^billsync_import_progress_ratio\{provider="stripe"\} 0.25$`, text)
	require.Regexp(t, `(?m)^billsync_import_eta_seconds\{provider="stripe"\} [0-9.e+-]+$`, text)
	require.Regexp(t, `(?m)^billsync_sweep_healed_accounts_total\{provider="stripe"\} 0$`, text, "an import heals nothing")

	require.NoError(t, st.FinishSweep(ctx, run, nil))
	text = scrape(t, strings.TrimPrefix(srv.URL, "http://"))
	require.NotContains(t, text, "billsync_import_accounts{", "no import runs")
}
