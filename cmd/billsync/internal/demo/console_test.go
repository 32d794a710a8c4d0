package demo_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/cmd/billsync/internal/demo"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store"
	"github.com/billsync/billsync/store/storetest"
)

// TestConsoleInBrowser drives the support console in headless Chromium on
// the demo's result, for each provider: sign in with the token the demo
// prints, find the demo customer, open its account, resync (the dry run
// writes nothing, the apply heals), replay an event, and see each outcome
// on the page; then the page on a phone's width, and sign-out. The
// overview's and the account page's screenshots are saved as test
// artifacts.
func TestConsoleInBrowser(t *testing.T) {
	browser := startBrowser(t)
	for _, provider := range []string{"stripe", "kinde"} {
		t.Run(provider, func(t *testing.T) { testConsoleInBrowser(t, browser, provider) })
	}
}

func testConsoleInBrowser(t *testing.T, browser context.Context, provider string) {
	ctx := context.Background()
	d, err := demo.Start(ctx, storetest.URL(t), demo.Config{Addr: "127.0.0.1:0", Provider: provider})
	require.NoError(t, err)
	defer d.Close()
	res, err := d.Play(ctx)
	require.NoError(t, err)
	require.True(t, res.Billsync.Right)
	wh := d.Where()
	st := storetest.OpenStore(t, wh.DatabaseURL, store.Options{})
	account := func() reconcile.Account {
		a, err := st.Account(ctx, provider, res.Customer)
		require.NoError(t, err)
		return a
	}
	plan := func() string { return account().Plan }
	// Drift, as after a lost webhook: billsync holds Free, the provider Pro.
	drift := func() { storetest.DriftAccount(t, st, account().ID, "free", "") }
	drift()

	tab, cancel := chromedp.NewContext(browser)
	defer cancel()
	// The tab lives as long as the context of its first run: open it
	// without the steps' timeouts.
	require.NoError(t, chromedp.Do(tab))
	do := func(steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		ctx, cancel := context.WithTimeout(tab, time.Minute)
		defer cancel()
		require.NoError(t, chromedp.Do(ctx, steps...))
	}
	get := func(a chromedp.Action[string]) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(tab, time.Minute)
		defer cancel()
		v, err := chromedp.Run(ctx, a)
		require.NoError(t, err)
		return v
	}
	text := func(id chromedp.ID) string { t.Helper(); return get(chromedp.Text(id)) }
	screenshot := func(name string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(tab, time.Minute)
		defer cancel()
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		require.NoError(t, err)
		saveArtifact(t, name, png)
	}

	// Sign in: the overview comes first, with the demo's deliveries and
	// reconciles charted.
	do(chromedp.Navigate(wh.ConsoleURL),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), wh.ConsoleToken),
		chromedp.Click(chromedp.ID("signin")),
		chromedp.WaitVisible(chromedp.ID("health")))
	require.Equal(t, "Overview", get(chromedp.Text(chromedp.CSS("h1"))))
	require.Regexp(t, `\d+ pending, \d+ due now`, text("queue"))
	require.Contains(t, text("last-sweep"), "No sweep has run yet.")
	require.Regexp(t, `new events: [1-9]\d* +copies: [1-9]\d*`, text("deliveries"), "the demo sends copies")
	require.Regexp(t, `applied: [1-9]\d*`, text("reconciles"))
	ctx1, cancel1 := context.WithTimeout(tab, time.Minute)
	defer cancel1()
	bars, err := chromedp.Run(ctx1, chromedp.Evaluate[int](`document.querySelectorAll("#reconciles svg rect.applied").length`))
	require.NoError(t, err)
	require.Positive(t, bars, "no bar of applied reconciles is drawn")
	screenshot("console-overview-" + provider + ".png")

	// Search, open the account.
	do(chromedp.WaitVisible(chromedp.ID("q")),
		chromedp.SendKeys(chromedp.ID("q"), res.Customer),
		chromedp.Click(chromedp.ID("search")),
		chromedp.WaitVisible(chromedp.ID("results")),
		chromedp.Click(chromedp.CSS("#results td a")),
		chromedp.WaitVisible(chromedp.ID("plan")))
	require.Equal(t, "free", text("plan"))

	// Resync: the dry run shows Free → Pro and writes nothing.
	do(chromedp.Click(chromedp.ID("resync")), chromedp.WaitVisible(chromedp.ID("outcome")))
	require.Contains(t, text("outcome"), "would be applied: ")
	diff := text("diff")
	require.Contains(t, diff, "free")
	require.Contains(t, diff, "pro")
	require.Equal(t, "free", plan(), "a dry run wrote")

	// Apply it, and the account page shows Pro.
	// The dry run's page has an #outcome too: wait for it to be gone.
	do(chromedp.Click(chromedp.ID("apply")), chromedp.WaitNotPresent(chromedp.ID("apply")),
		chromedp.WaitVisible(chromedp.ID("outcome")))
	outcome := text("outcome")
	require.True(t, strings.HasPrefix(outcome, "applied: "), outcome)
	require.Equal(t, "pro", plan())
	do(chromedp.Click(chromedp.ID("back")), chromedp.WaitVisible(chromedp.ID("plan")))
	require.Equal(t, "pro", text("plan"))
	screenshot("console-account-" + provider + ".png")

	// Replay an event after another drift: the page shows it healed.
	drift()
	do(chromedp.Reload(), chromedp.WaitVisible(chromedp.ID("plan")))
	require.Equal(t, "free", text("plan"))
	do(chromedp.Click(chromedp.CSS("#events button.replay")), chromedp.WaitVisible(chromedp.ID("outcome")))
	outcome = text("outcome")
	require.True(t, strings.HasPrefix(outcome, "applied: "), outcome)
	do(chromedp.Click(chromedp.ID("back")), chromedp.WaitVisible(chromedp.ID("plan")))
	require.Equal(t, "pro", text("plan"))
	history := text("history")
	require.Contains(t, history, "replay")
	require.Contains(t, history, "admin-console")
	// What the app was told: the resync's free → pro and the replay's
	// heal (a drift written behind billsync's back is no change of its own).
	changes := text("changes")
	require.Contains(t, changes, "free → pro")
	require.Contains(t, changes, "replay (admin-console)")
	require.Contains(t, changes, "resync (admin-console)")

	// On a phone's width the page does not scroll sideways: wide tables
	// scroll in their own box.
	do(chromedp.EmulateViewport(390, 844), chromedp.Reload(), chromedp.WaitVisible(chromedp.ID("plan")))
	ctx2, cancel2 := context.WithTimeout(tab, time.Minute)
	defer cancel2()
	fits, err := chromedp.Run(ctx2, chromedp.Evaluate[bool](`document.documentElement.scrollWidth <= window.innerWidth`))
	require.NoError(t, err)
	require.True(t, fits, "the account page is wider than a phone")
	screenshot("console-account-" + provider + "-phone.png")

	// The failures page tells how many changes wait for the app (none is
	// configured in the demo: none waits); the Deliveries page lists none.
	do(chromedp.Navigate(wh.ConsoleURL+"events"), chromedp.WaitVisible(chromedp.ID("outbox")))
	require.Contains(t, text("outbox"), "None waiting")
	do(chromedp.Navigate(wh.ConsoleURL+"deliveries"), chromedp.WaitVisible(chromedp.ID("no-deliveries")))

	// Sign out: the console asks to sign in again.
	do(chromedp.Click(chromedp.ID("signout")),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.Navigate(wh.ConsoleURL+"sweeps"),
		chromedp.WaitVisible(chromedp.ID("token")))
}

// startBrowser starts headless Chromium (Debian's chromium package; .ci/run
// installs it). Without one the test is skipped, except under CI=true,
// where it fails: CI must run it.
func startBrowser(t *testing.T) context.Context {
	t.Helper()
	missing := func(why string, args ...any) {
		t.Helper()
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true and no browser: "+why, args...)
		}
		t.Skipf("no browser, so the console's browser test is skipped: "+why, args...)
	}
	var path string
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			path = p
			break
		}
	}
	if path == "" {
		missing("no chromium on PATH (apt-get install chromium)")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path),
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.WindowSize(1280, 900))
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium's sandbox refuses root
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	browser, cancel := chromedp.NewContext(alloc)
	t.Cleanup(cancel)
	if err := chromedp.Do(browser); err != nil {
		missing("%s did not start: %v", path, err)
	}
	return browser
}

// saveArtifact writes a test artifact to $BILLSYNC_TEST_ARTIFACTS (default:
// billsync-test-artifacts in the temporary directory).
func saveArtifact(t *testing.T, name string, data []byte) {
	t.Helper()
	require.NotEmpty(t, data)
	dir := os.Getenv("BILLSYNC_TEST_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "billsync-test-artifacts")
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	path := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(path, data, 0o644))
	t.Logf("saved %s", path)
}
