package main

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/app"
	stripemock "github.com/billsync/billsync/mocks/stripe"
	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/server/openapitest"
	"github.com/billsync/billsync/store"
	"github.com/billsync/billsync/store/storetest"
)

func TestSweepCommand(t *testing.T) {
	h, err := testenv.New(testenv.Stripe, testenv.Options{})
	require.NoError(t, err)
	t.Cleanup(h.Close)
	ctx := context.Background()
	cus, err := h.Stripe.Customer(ctx, "u_1")
	require.NoError(t, err)
	sub, err := h.Stripe.Subscribe(ctx, cus, "price_team")
	require.NoError(t, err)
	t.Setenv("DATABASE_URL", storetest.URL(t))
	t.Setenv("STRIPE_API_KEY", stripemock.DefaultAPIKey)
	t.Setenv("STRIPE_API_URL", h.URL)

	var out, logs bytes.Buffer
	// Never imported: the sweep is the provider's import, and says so.
	require.NoError(t, run(ctx, []string{"sweep"}, &out, &logs), logs.String())
	require.True(t, strings.HasPrefix(out.String(), "stripe never imported: this sweep ran as its import (see docs/import.md)\n"+
		"stripe import 1 succeeded\n"), out.String())
	require.Contains(t, out.String(), "seen 1, imported 1, failed 0")
	require.NotContains(t, out.String(), "healed", out.String())
	require.NotContains(t, logs.String(), "sweep healed an account")

	// A change no webhook told billsync of: the next sweep heals it.
	require.NoError(t, h.Stripe.ChangePrice(ctx, sub, "price_pro"))
	out.Reset()
	require.NoError(t, run(ctx, []string{"sweep"}, &out, &logs), logs.String())
	// The summary once: a sweep of one page printed its progress line too,
	// the same figures just before them.
	require.True(t, strings.HasPrefix(out.String(), "stripe sweep 2 succeeded\n"), out.String())
	require.Equal(t, 1, strings.Count(out.String(), "seen"), out.String())
	require.Contains(t, out.String(), "seen 1, healed 1, failed 0")
	require.Contains(t, out.String(), "healed "+cus+": team (active) → pro (active)")
	require.Contains(t, out.String(), "cause: no webhook stored since the provider's change")

	out.Reset()
	require.NoError(t, run(ctx, []string{"sweep"}, &out, &logs), logs.String())
	require.Contains(t, out.String(), "seen 1, healed 0, failed 0", "the third sweep finds nothing to heal")

	f := h.Stripe.Fake.Faults()
	f.Error5xxRate = 1
	h.Stripe.Fake.SetFaults(f)
	out.Reset()
	err = run(ctx, []string{"sweep", "-stripe-rate", "1000"}, &out, &logs)
	require.Error(t, err, "a failed sweep exits non-zero")
	require.Contains(t, out.String(), "FAILED")
}

// TestSweepProgress: progress off a terminal is a line every tenth page,
// the first after ten pages, so a short sweep prints only its summary; on
// a terminal the line is rewritten in place and erased when the sweep
// ends, so the summary stands alone.
func TestSweepProgress(t *testing.T) {
	var out bytes.Buffer
	p := newProgress(&out)
	for i := range 25 {
		p.page(reconcile.SweepRun{ID: 1, Seen: 100 * (i + 1)})
	}
	p.done()
	require.Regexp(t, `^sweep 1: 1000 customers seen, 0 healed, 0 failed \(\S+\)\nsweep 1: 2000 customers seen, 0 healed, 0 failed \(\S+\)\n$`, out.String())

	out.Reset()
	p = newProgress(&out)
	p.tty = true
	p.page(reconcile.SweepRun{ID: 1, Seen: 100})
	p.done()
	require.True(t, strings.HasSuffix(out.String(), "\r\033[K"), "the last progress line is erased: %q", out.String())
}

func TestSweepSchedule(t *testing.T) {
	for _, spec := range []string{defaultSweepSchedule, "off", "*/5 * * * *", "@daily"} {
		_, err := parseSweepSchedule(spec)
		require.NoError(t, err, spec)
	}
	cfg := config{DBTimeout: 1, Config: app.Config{Addr: "127.0.0.1:0", StripeWebhookSecrets: []string{"whsec_x"}, StripeAPIKey: "sk_test",
		StripeRateLimit: 1, StripeOperationRate: 1, ShutdownTimeout: 1, IntakeTimeout: 1, StripeTolerance: 1, Workers: 1,
		SweepSchedule: "nightly"}}
	err := cfg.validateServe()
	require.ErrorContains(t, err, `BILLSYNC_SWEEP_SCHEDULE "nightly": want a five-field cron spec`)
	cfg.SweepSchedule = "off"
	require.NoError(t, cfg.validateServe())
}

// TestScheduledSweepRuns: serve's schedule sweeps every provider; the
// first scheduled sweep of a provider never imported is its import
// (recorded and logged as one: no WARN per account), the next ones are
// sweeps.
func TestScheduledSweepRuns(t *testing.T) {
	h, err := testenv.New(testenv.Stripe, testenv.Options{})
	require.NoError(t, err)
	t.Cleanup(h.Close)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var customers []string
	for i := range 3 {
		cus, err := h.Stripe.Customer(ctx, fmt.Sprint("u_", i))
		require.NoError(t, err)
		_, err = h.Stripe.Subscribe(ctx, cus, "price_pro")
		require.NoError(t, err)
		customers = append(customers, cus)
	}
	st := storetest.NewStore(t)
	plans, err := loadPlans("")
	require.NoError(t, err)
	logs := &syncBuffer{}
	// serve's assembly on the fake: its schedule, runner and worker.
	a, err := app.New(ctx, app.Config{Workers: 1, SweepSchedule: "@every 50ms", ShutdownTimeout: time.Minute},
		app.Parts{Store: st, Plans: plans, Stripe: h.Stripe.Client, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	require.NoError(t, err)
	stop := a.Start(ctx)
	require.Eventually(t, func() bool {
		n, err := sweepsOf(st, "", "succeeded")
		return err == nil && n >= 3
	}, time.Minute, 10*time.Millisecond, "the schedule runs sweeps")
	cancel()
	require.NoError(t, stop(context.Background()), "the schedule, the sweeps and the worker stop")
	for _, cus := range customers {
		acct, err := st.Account(context.Background(), "stripe", cus)
		require.NoError(t, err)
		require.Equal(t, "pro", acct.Plan)
	}

	runs, err := st.SweepRuns(context.Background(), maxSweepRuns)
	require.NoError(t, err)
	slices.SortFunc(runs, func(a, b reconcile.SweepRecord) int { return cmp.Compare(a.ID, b.ID) })
	require.Equal(t, reconcile.RunImport, runs[0].Kind, "the first scheduled sweep is the import")
	require.Equal(t, "succeeded", runs[0].Status)
	require.Equal(t, len(customers), runs[0].Healed, "every account imported")
	for _, r := range runs[1:] {
		require.Equal(t, reconcile.RunSweep, r.Kind, "once imported, a sweep: run %d", r.ID)
		require.Zero(t, r.Healed, "nothing drifted: run %d", r.ID)
	}
	for _, l := range storetest.ReconcileLog(t, st) {
		require.Equal(t, reconcile.TriggerImport, l.Trigger)
		require.True(t, strings.HasPrefix(l.Outcome, reconcile.ImportedPrefix), l.Outcome)
	}
	require.Contains(t, logs.String(), "no import of stripe has completed: this sweep runs as its import")
	require.NotContains(t, logs.String(), "sweep healed an account")
	require.NotContains(t, logs.String(), "level=WARN", "nothing for a person to look at")

	// /metrics reads the sweeps from the database.
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(srv.Close)
	text := scrape(t, strings.TrimPrefix(srv.URL, "http://"))
	require.Regexp(t, `(?m)^billsync_sweep_runs\{provider="stripe",status="succeeded"\} [3-9]`, text)
	require.Regexp(t, `(?m)^billsync_sweep_healed_accounts_total\{provider="stripe"\} 0$`, text, "the import created the accounts; the sweeps found them right")
	require.Regexp(t, `(?m)^billsync_sweep_progress_customers\{provider="stripe"\} 0$`, text)
	require.Regexp(t, `(?m)^billsync_sweep_last_success_timestamp_seconds\{provider="stripe"\} [0-9.e+]+$`, text)
}

// TestTwoServesSweepOneAtATime: two `billsync serve` processes on one
// database with the same schedule, each sweep outlasting the schedule's
// period: sweeps never overlap, both processes try, and every run succeeds.
func TestTwoServesSweepOneAtATime(t *testing.T) {
	ctx := context.Background()
	h := testenv.ForTest(t, testenv.Stripe, testenv.Options{})
	for i := range 250 {
		cus, err := h.Stripe.Customer(ctx, fmt.Sprint("u_", i))
		require.NoError(t, err)
		_, err = h.Stripe.Subscribe(ctx, cus, "price_pro")
		require.NoError(t, err)
	}
	// Each list call takes 400 ms, so a sweep (3 pages and the end) lasts
	// longer than the schedule's 1 s period.
	h.Stripe.Fake.SetFaults(stripemock.Faults{Latency: 400 * time.Millisecond})
	dbURL := storetest.URL(t)
	var procs []*billsyncProc
	for range 2 {
		addr := freeAddr(t)
		procs = append(procs, startBillsync(t, t.TempDir(), addr,
			"BILLSYNC_TEST_ARGS=serve -workers 1 -addr "+addr, "BILLSYNC_SWEEP_SCHEDULE=@every 1s",
			"DATABASE_URL="+dbURL, "STRIPE_API_KEY="+stripemock.DefaultAPIKey, "STRIPE_API_URL="+h.URL))
	}
	st := storetest.OpenStore(t, dbURL, store.Options{})
	// Both processes try: each one's schedule, firing during a sweep (its
	// own or the other's), skips. How soon the second process starts
	// ticking after the first depends on the machine's load, so the test
	// waits for both to have skipped rather than for a count of sweeps
	// alone.
	const skipped = "scheduled sweep skipped: a sweep of the provider is running"
	require.Eventually(t, func() bool {
		n, err := sweepsOf(st, "", "succeeded")
		return err == nil && n >= 3 &&
			strings.Contains(procs[0].logs.String(), skipped) && strings.Contains(procs[1].logs.String(), skipped)
	}, time.Minute, 100*time.Millisecond, "the schedules never ran three sweeps, both trying:\n%s\n%s", procs[0].logs, procs[1].logs)
	for _, p := range procs {
		stopBillsync(t, p)
	}

	runs, err := st.SweepRuns(ctx, maxSweepRuns)
	require.NoError(t, err)
	require.Less(t, len(runs), maxSweepRuns, "every run read")
	require.Equal(t, storetest.SweepRunCount(t, st, "", ""), len(runs))
	overlapping := 0
	for _, a := range runs {
		for _, b := range runs {
			// b started after a, before a finished (or a never did).
			if a.ID < b.ID && (a.FinishedAt == nil || b.StartedAt.Before(*a.FinishedAt)) {
				overlapping++
			}
		}
	}
	require.Zero(t, overlapping, "two sweeps ran at once")
	require.Zero(t, storetest.SweepRunCount(t, st, "", "failed"), "a sweep failed")
	require.LessOrEqual(t, storetest.SweepRunCount(t, st, "", "running"), 1, "only the sweep SIGTERM interrupted is left running, for the next to resume")
}

// maxSweepRuns bounds the sweep runs a test reads back: far more than any
// test starts.
const maxSweepRuns = 1000

// sweepsOf counts the sweep runs of provider (every provider's when empty)
// with status, by the store's own read: it runs in require.Eventually's
// goroutine, where a test may not fail.
func sweepsOf(st *store.Store, provider, status string) (int, error) {
	runs, err := st.SweepRuns(context.Background(), maxSweepRuns)
	n := 0
	for _, r := range runs {
		if (provider == "" || r.Provider == provider) && r.Status == status {
			n++
		}
	}
	return n, err
}

// TestServeSIGTERMStopsAnAdminSweep: a sweep started from the admin API
// is stopped by SIGTERM with the workers: serve exits 0 once it has
// stopped, its run stays running with the page it applied, and the next
// sweep resumes it.
func TestServeSIGTERMStopsAnAdminSweep(t *testing.T) {
	ctx := context.Background()
	// The first customer list call is answered; the next ones hang until
	// the client gives up (until released), so the sweep is mid-run when
	// SIGTERM comes.
	var lists atomic.Int32
	hang := make(chan struct{})
	var release sync.Once
	h := testenv.ForTest(t, testenv.Stripe, testenv.Options{Wrap: func(fake http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodGet && r.URL.Path == "/v1/customers" && lists.Add(1) > 1 {
				select {
				case <-r.Context().Done():
					return
				case <-hang:
				}
			}
			fake.ServeHTTP(w, r)
		})
	}})
	t.Cleanup(func() { release.Do(func() { close(hang) }) })
	for i := range 150 { // two pages
		cus, err := h.Stripe.Customer(ctx, fmt.Sprint("u_", i))
		require.NoError(t, err)
		_, err = h.Stripe.Subscribe(ctx, cus, "price_pro")
		require.NoError(t, err)
	}
	dbURL := storetest.URL(t)
	addr := freeAddr(t)
	const token = "admin-token-0123456789abcdef"
	proc := startBillsync(t, t.TempDir(), addr,
		"BILLSYNC_TEST_ARGS=serve -workers 1 -sweep-parallel 1 -shutdown-timeout 30s -import-at-start=false -addr "+addr, "BILLSYNC_SWEEP_SCHEDULE=off",
		"BILLSYNC_ADMIN_TOKEN="+token, "DATABASE_URL="+dbURL, "STRIPE_API_KEY="+stripemock.DefaultAPIKey, "STRIPE_API_URL="+h.URL)
	st := storetest.OpenStore(t, dbURL, store.Options{})

	req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/admin/api/sweeps", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := openapitest.Client().Do(req)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.Contains(t, string(body), `"provider":"stripe","started":true,"run":1`)
	require.Eventually(t, func() bool {
		runs, err := st.SweepRuns(ctx, 1)
		return err == nil && len(runs) == 1 && runs[0].Seen == 100
	}, time.Minute, 10*time.Millisecond, "the sweep never applied its first page")

	stopBillsync(t, proc) // exits 0, within -shutdown-timeout
	// Never imported: the admin's sweep ran as the provider's import.
	require.True(t, strings.Contains(proc.logs.String(), "import interrupted; the next start"), "serve exited without stopping the sweep")
	runs, err := st.SweepRuns(ctx, 10)
	require.NoError(t, err)
	require.Len(t, runs, 1)
	require.Equal(t, "running", runs[0].Status, "stopped, not failed: left to resume")
	require.Equal(t, 100, runs[0].Seen)

	release.Do(func() { close(hang) })
	t.Setenv("DATABASE_URL", dbURL)
	t.Setenv("STRIPE_API_KEY", stripemock.DefaultAPIKey)
	t.Setenv("STRIPE_API_URL", h.URL)
	var out, logs bytes.Buffer
	require.NoError(t, run(ctx, []string{"sweep", "-sweep-parallel", "1"}, &out, &logs), logs.String())
	require.Contains(t, out.String(), "stripe an import was left running: this sweep resumed it\nstripe import 1 (resumed) succeeded")
	require.Contains(t, out.String(), "seen 150, imported 150")
}
