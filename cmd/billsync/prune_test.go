package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/app"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store/storetest"
)

// TestPruneCommand: `billsync prune` deletes an old reconciled customer's
// events and log rows, keeps a recent one's and prints what it did; an age
// a provider could still retry within is refused.
func TestPruneCommand(t *testing.T) {
	e := newSupportEnv(t)
	old := e.customer("u_old", "old@example.com", "price_pro")
	recent := e.customer("u_new", "new@example.com", "price_pro")
	e.drain(e.sh.Stripe.Client)
	storetest.AgeCustomer(t, e.st, "stripe", old, 100*24*time.Hour)
	storetest.AgeAccountChanges(t, e.st, "stripe", old, 100*24*time.Hour)
	before := e.state(old)

	out, err := e.billsync("prune", "--older-than", "2d")
	require.ErrorIs(t, err, errUsage)
	require.ErrorContains(t, err, "below 72h0m0s")
	require.Empty(t, out)

	out, err = e.billsync("prune", "--older-than", "90d", "-batch", "1")
	require.NoError(t, err, out)
	require.Regexp(t, `pruned before \S+: [1-9]\d* events, [1-9]\d* receipts, 1 reconcile log rows, [1-9]\d* app changes, 0 samples, 0 connected accounts' sweep runs, 0 expired sessions \(\d+ batches, at most 1 rows each\)`, out)
	require.Empty(t, storetest.CustomerEvents(t, e.st, "stripe", old))
	require.NotEmpty(t, storetest.CustomerEvents(t, e.st, "stripe", recent))
	for _, ev := range storetest.CustomerEvents(t, e.st, "stripe", recent) {
		require.Equal(t, reconcile.EventApplied, ev.Status)
	}
	// The account, its plan and its grants are untouched.
	kept, _, _ := strings.Cut(before, " events=")
	require.Contains(t, kept, "plan=pro")
	require.True(t, strings.HasPrefix(e.state(old), kept+" events="), "before: %s\nafter: %s", before, e.state(old))
}

// TestPruneSizesOnlyReads: prune -sizes deletes nothing and prints rows
// counted, not the planner's estimate: it once pruned, then showed 0 rows
// for the accounts table holding two accounts (never analyzed). A prune
// flag given with it is refused.
func TestPruneSizesOnlyReads(t *testing.T) {
	e := newSupportEnv(t)
	old := e.customer("u_old", "old@example.com", "price_pro")
	e.customer("u_new", "new@example.com", "price_pro")
	e.drain(e.sh.Stripe.Client)
	storetest.AgeCustomer(t, e.st, "stripe", old, 100*24*time.Hour)
	events := len(storetest.CustomerEvents(t, e.st, "stripe", old))
	require.NotZero(t, events)

	out, err := e.billsync("prune", "-sizes")
	require.NoError(t, err, out)
	require.NotContains(t, out, "pruned")
	require.Len(t, storetest.CustomerEvents(t, e.st, "stripe", old), events, "a size report deletes nothing")
	require.Regexp(t, `(?m)^\s+accounts\s+2\s+\d+\s+\d+\s*$`, out)
	require.Regexp(t, `(?m)^\s+table\s+rows\s+bytes\s+bytes/row\s*$`, out)
	require.NotContains(t, out, "~", "small tables are counted")

	out, err = e.billsync("prune", "--older-than", "90d", "-sizes")
	require.ErrorIs(t, err, errUsage)
	require.ErrorContains(t, err, "-sizes only reports")
	require.Empty(t, out)
	require.Len(t, storetest.CustomerEvents(t, e.st, "stripe", old), events)
}

func TestParseAge(t *testing.T) {
	for in, want := range map[string]time.Duration{"90d": 90 * 24 * time.Hour, "3d": 72 * time.Hour, "2160h": 2160 * time.Hour, "0d": 0} {
		got, err := parseAge(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "d", "-1d", "1.5d", "90 days", "x"} {
		_, err := parseAge(in)
		require.Error(t, err, in)
	}
}

// TestServePruneSchedule: serve prunes on BILLSYNC_PRUNE_SCHEDULE with
// BILLSYNC_PRUNE_OLDER_THAN, and a short retention is a start-up error.
// (One prune at a time across replicas: store's TestPruneOneAtATime.)
func TestServePruneSchedule(t *testing.T) {
	e := newSupportEnv(t)
	old := e.customer("u_old", "old@example.com", "price_pro")
	e.drain(e.sh.Stripe.Client)
	storetest.AgeCustomer(t, e.st, "stripe", old, 40*24*time.Hour)
	dbURL := os.Getenv("DATABASE_URL") // newSupportEnv's

	var out bytes.Buffer
	err := run(context.Background(), []string{"serve", "-workers", "0", "-prune-schedule", "@every 1s", "-prune-older-than", "1d"}, &out, &out)
	require.ErrorContains(t, err, "-prune-older-than: invalid request: older-than 24h0m0s is below 72h0m0s")

	addr := freeAddr(t)
	p := startBillsync(t, "", addr, "DATABASE_URL="+dbURL, "BILLSYNC_PRUNE_SCHEDULE=@every 1s", "BILLSYNC_PRUNE_OLDER_THAN=30d",
		"BILLSYNC_TEST_ARGS=serve -workers 0 -addr "+addr)
	storetest.WaitFor(t, "the schedule to prune the old customer's events", func() bool {
		return len(storetest.CustomerEvents(t, e.st, "stripe", old)) == 0
	})
	storetest.WaitFor(t, "the prune's log line", func() bool { return strings.Contains(p.logs.String(), "msg=pruned") })
	stopBillsync(t, p)
	require.Contains(t, p.logs.String(), "prune scheduled")
	require.NotEmpty(t, storetest.Accounts(t, e.st))
}

// TestPruneConfig: serve checks the prune settings only when a schedule
// is on; a wrong BILLSYNC_PRUNE_OLDER_THAN is named, and a flag replaces
// it.
func TestPruneConfig(t *testing.T) {
	cfg := config{DBTimeout: 1, Config: app.Config{Addr: "127.0.0.1:0", StripeWebhookSecrets: []string{"whsec_x"}, StripeAPIKey: "sk_test",
		StripeRateLimit: 1, StripeOperationRate: 1, ShutdownTimeout: 1, IntakeTimeout: 1, StripeTolerance: 1, Workers: 1,
		SweepSchedule: "off", PruneSchedule: "off"}}
	cfg.PruneOlderThan.fromEnv("ninety days")
	require.NoError(t, cfg.validateServe(), "off: the retention is not used")
	cfg.PruneSchedule = "nightly"
	require.ErrorContains(t, cfg.validateServe(), `BILLSYNC_PRUNE_SCHEDULE "nightly": want a five-field cron spec`)
	cfg.PruneSchedule = "30 4 * * *"
	require.ErrorContains(t, cfg.validateServe(), `BILLSYNC_PRUNE_OLDER_THAN "ninety days": want whole days like 90d`)
	require.NoError(t, cfg.PruneOlderThan.Set("30d"))
	require.NoError(t, cfg.validateServe())
	require.NoError(t, cfg.PruneOlderThan.Set("48h"))
	require.ErrorContains(t, cfg.validateServe(), "-prune-older-than: invalid request: older-than 48h0m0s is below 72h0m0s")
}

// TestPruneHelpOneDefault: -older-than's help names its default once, in
// the days it is written in (it once showed "default 90d" and flag's own
// "(default 2160h0m0s)"); serve's -prune-older-than alike.
func TestPruneHelpOneDefault(t *testing.T) {
	for cmd, name := range map[string]string{"prune": "-older-than", "serve": "-prune-older-than"} {
		help := runBillsync(t, cmd+" --help")
		_, usage, ok := strings.Cut(help, "\n  "+name+" ")
		require.True(t, ok, "%s --help lists %s:\n%s", cmd, name, help)
		usage, _, _ = strings.Cut(usage, "\n  -")
		require.Equal(t, 1, strings.Count(usage, "default"), "%s %s: %s", cmd, name, usage)
		require.Contains(t, usage, "(default 90d)", "%s %s", cmd, name)
		require.NotContains(t, usage, "2160h0m0s", "%s %s", cmd, name)
	}
}
