package demo_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
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
// on the page; then, on a phone's width (390×844), the account page, a
// replay's outcome, an event and the events list, each measured so that the
// outcomes, results and Replay buttons lie inside the window; and sign-out.
// Each page's screenshot is saved as a test artifact.
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

	// On a phone's width (issue 26) a support person sees what matters
	// without scrolling sideways: each event's outcome and its Replay
	// button, each reconcile's result and what it did, on every page that
	// shows them.
	fits := func(page string, targets ...phoneTarget) {
		t.Helper()
		ctx, cancel := context.WithTimeout(tab, time.Minute)
		defer cancel()
		requirePhoneFit(t, ctx, page, targets...)
		screenshot("console-" + page + "-" + provider + "-phone.png")
	}
	do(chromedp.EmulateViewport(390, 844), chromedp.Reload(), chromedp.WaitVisible(chromedp.ID("plan")))
	fits("account",
		phoneTarget{Table: "events", Column: "Outcome"},
		phoneTarget{Selector: "#events button.replay"},
		phoneTarget{Table: "history", Column: "Result"},
		phoneTarget{Table: "history", Column: "What it did"})
	do(chromedp.Click(chromedp.CSS("#events button.replay")), chromedp.WaitVisible(chromedp.ID("outcome")))
	fits("replayed", phoneTarget{Selector: "#outcome"}, phoneTarget{Selector: "#diff td"})
	do(chromedp.Click(chromedp.ID("back")), chromedp.WaitVisible(chromedp.ID("plan")),
		chromedp.Click(chromedp.CSS("#events td a")), chromedp.WaitVisible(chromedp.ID("replay")))
	fits("event", phoneTarget{Selector: "#replay"})
	do(chromedp.Navigate(wh.ConsoleURL+"events?status=applied"), chromedp.WaitVisible(chromedp.ID("event-list")))
	fits("events-applied",
		phoneTarget{Table: "event-list", Column: "Customer"},
		phoneTarget{Table: "event-list", Column: "Outcome"})

	// The failures page tells how many changes wait for the app (none is
	// configured in the demo: none waits); the Deliveries page lists none.
	do(chromedp.Navigate(wh.ConsoleURL+"events"), chromedp.WaitVisible(chromedp.ID("outbox")))
	require.Contains(t, text("outbox"), "None waiting")
	fits("events-failed")
	do(chromedp.Navigate(wh.ConsoleURL+"deliveries"), chromedp.WaitVisible(chromedp.ID("no-deliveries")))
	fits("deliveries")

	// Sign out: the console asks to sign in again.
	do(chromedp.Click(chromedp.ID("signout")),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.Navigate(wh.ConsoleURL+"sweeps"),
		chromedp.WaitVisible(chromedp.ID("token")))
}

// phoneTarget names what must be seen on a phone: the cells of a table's
// column, by the column's heading, or the elements a CSS selector matches.
type phoneTarget struct {
	Table    string `json:"table,omitempty"`
	Column   string `json:"column,omitempty"`
	Selector string `json:"selector,omitempty"`
}

func (p phoneTarget) String() string {
	if p.Selector != "" {
		return p.Selector
	}
	return "#" + p.Table + " " + p.Column
}

// phoneView is what the page measured: each target's boxes, and every
// table cell that sticks out of the window or, in a table laid out as
// cards, is not labelled with its column's heading.
type phoneView struct {
	Inner, Scroll float64
	Boxes         map[string][]phoneBox
	Outside       []string
	Unlabelled    []string
}

type phoneBox struct{ Left, Right, Width, Height float64 }

// phoneFitJS measures, in the page, what phoneView holds.
const phoneFitJS = `((targets) => {
	const inner = window.innerWidth;
	const view = {inner, scroll: document.documentElement.scrollWidth, boxes: {}, outside: [], unlabelled: []};
	const box = (el) => { const r = el.getBoundingClientRect(); return {left: r.left, right: r.right, width: r.width, height: r.height}; };
	const heads = (table) => table.tHead ? [...table.tHead.rows[0].cells].map((th) => th.textContent.trim()) : null;
	for (const t of targets) {
		const name = t.selector || "#" + t.table + " " + t.column;
		let els = [];
		if (t.selector) {
			els = [...document.querySelectorAll(t.selector)];
		} else {
			const table = document.getElementById(t.table);
			const col = table ? (heads(table) || []).indexOf(t.column) : -1;
			if (col >= 0) els = [...table.tBodies[0].rows].map((r) => r.cells[col]);
		}
		view.boxes[name] = els.map(box);
	}
	for (const table of document.querySelectorAll("main table")) {
		const hs = heads(table);
		for (const [i, r] of [...table.tBodies[0].rows].entries()) {
			for (const [j, c] of [...r.cells].entries()) {
				const b = box(c);
				const where = "#" + table.id + " row " + i + " cell " + j;
				if (b.left < 0 || b.right > inner) view.outside.push(where + ": " + b.left.toFixed(0) + ".." + b.right.toFixed(0));
				if (hs && table.classList.contains("cards") && c.dataset.label !== hs[j]) view.unlabelled.push(where + ": " + c.dataset.label + " for " + hs[j]);
			}
		}
	}
	return view;
})(%s)`

// requirePhoneFit checks the page in the window as it is now: every target
// is found, drawn and wholly inside the window's width; no table cell sticks
// out; the page does not scroll sideways.
func requirePhoneFit(t *testing.T, ctx context.Context, page string, targets ...phoneTarget) {
	t.Helper()
	spec, err := json.Marshal(append([]phoneTarget{}, targets...))
	require.NoError(t, err)
	v, err := chromedp.Run(ctx, chromedp.Evaluate[phoneView](fmt.Sprintf(phoneFitJS, spec)))
	require.NoError(t, err)
	for _, target := range targets {
		boxes := v.Boxes[target.String()]
		require.NotEmpty(t, boxes, "%s: no %s on the page", page, target)
		var edges []string
		inside := true
		for i, b := range boxes {
			require.Positive(t, b.Width, "%s: %s[%d] is not drawn", page, target, i)
			require.Positive(t, b.Height, "%s: %s[%d] is not drawn", page, target, i)
			edges = append(edges, fmt.Sprintf("%.0f..%.0f", b.Left, b.Right))
			inside = inside && b.Left >= 0 && b.Right <= v.Inner
		}
		t.Logf("%s at %.0f px: %s spans %s", page, v.Inner, target, strings.Join(edges, ", "))
		assert.True(t, inside, "%s: %s is not inside the %.0f px window: %s", page, target, v.Inner, strings.Join(edges, ", "))
	}
	assert.Empty(t, v.Outside, "%s: table cells outside the %.0f px window", page, v.Inner)
	assert.Empty(t, v.Unlabelled, "%s: cells of a card table without their column's heading", page)
	assert.LessOrEqual(t, v.Scroll, v.Inner, "%s: the page scrolls sideways", page)
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
