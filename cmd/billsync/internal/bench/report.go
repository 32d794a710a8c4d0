package bench

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is one run's figures, each target judged against a baseline
// measured in the same run.
type Report struct {
	Mode      string         `json:"mode"`
	CPUs      int            `json:"cpus"`
	GoVersion string         `json:"go_version"`
	Database  string         `json:"database"`
	PoolConns int            `json:"pool_conns"`
	StartedAt time.Time      `json:"started_at"`
	Seconds   float64        `json:"seconds"`
	Intake    []IntakeResult `json:"intake"`
	// Drain, Latency and Sweep have one result for each provider latency
	// (Config.Latencies).
	Drain   []DrainResult   `json:"drain"`
	Latency []LatencyResult `json:"latency"`
	Sweep   []SweepResult   `json:"sweep"`
	Heal    HealResult      `json:"heal"`
	Idle    IdleResult      `json:"idle"`
	// Drift is the drift part (-only drift), one for each provider latency.
	Drift []DriftResult `json:"drift,omitempty"`
	// Connect is the connect part (-only connect), one for each provider
	// latency.
	Connect []ConnectResult `json:"connect,omitempty"`
	Targets []Target        `json:"targets"`
	Missed  int             `json:"missed"`
}

// Target is one measured figure against its target.
type Target struct {
	Name     string  `json:"name"`
	Value    float64 `json:"value"`
	Unit     string  `json:"unit"`
	Target   string  `json:"target"`
	Pass     bool    `json:"pass"`
	Verdict  string  `json:"verdict"` // PASS or MISS
	Baseline string  `json:"baseline,omitempty"`
}

func (r *Report) evaluate() {
	add := func(t Target) {
		t.Verdict = map[bool]string{true: "PASS", false: "MISS"}[t.Pass]
		if !t.Pass {
			r.Missed++
		}
		r.Targets = append(r.Targets, t)
	}
	// The intake targets are set at 32 senders; a run without 32 is judged
	// at its largest count, and says so in the name.
	var at *IntakeResult
	for i := range r.Intake {
		if at == nil || r.Intake[i].Senders == TargetSenders ||
			(at.Senders != TargetSenders && r.Intake[i].Senders > at.Senders) {
			at = &r.Intake[i]
		}
	}
	if at != nil {
		add(Target{
			Name: fmt.Sprintf("intake throughput / ceiling, %d senders", at.Senders), Value: at.Ratio, Unit: "ratio",
			Target: fmt.Sprintf(">= %.2f", TargetIntakeRatio), Pass: at.Ratio >= TargetIntakeRatio,
			Baseline: fmt.Sprintf("ceiling %.0f deliveries/s, intake %.0f deliveries/s", at.Ceiling.PerSec, at.HTTP.PerSec),
		})
		add(Target{
			Name: fmt.Sprintf("intake p99, %d senders", at.Senders), Value: at.HTTP.P99Ms, Unit: "ms",
			Target:   fmt.Sprintf("<= %d ms", TargetIntakeP99.Milliseconds()),
			Pass:     at.HTTP.P99Ms <= float64(TargetIntakeP99.Milliseconds()),
			Baseline: fmt.Sprintf("ceiling p99 %.1f ms", at.Ceiling.P99Ms),
		})
	}
	for _, d := range r.Drain {
		evaluateDrain(d, add)
	}
	for _, l := range r.Latency {
		evaluateLatency(l, add)
	}
	for _, sw := range r.Sweep {
		evaluateImport(sw, add)
		evaluateSweep(sw, add)
	}
	for _, c := range r.Connect {
		evaluateConnect(c, add)
	}
	if hl := r.Heal; hl.Changes > 0 {
		limit := hl.PollMs + float64(TargetHealSlack.Milliseconds())
		add(Target{
			Name:  fmt.Sprintf("heal p99, every webhook lost (events feed alone), %.0f reads/month", hl.Allocation),
			Value: hl.Feed.P99Ms, Unit: "ms",
			Target: fmt.Sprintf("<= %.0f ms (the budget's interval %s ÷ %d + %s)", limit,
				time.Duration(hl.BudgetPollMs*float64(time.Millisecond)), hl.Scale, TargetHealSlack),
			Pass:     hl.Feed.P99Ms <= limit,
			Baseline: fmt.Sprintf("same changes by webhook: p50 %.0f ms, p99 %.0f ms", hl.Webhook.P50Ms, hl.Webhook.P99Ms),
		})
	}
	if id := r.Idle; id.Allocation > 0 {
		add(Target{
			Name: fmt.Sprintf("idle events feed reads / 30 days, serve's defaults, %.0f reads/month", id.Allocation), Value: id.ReadsPerMonth, Unit: "reads",
			Target: fmt.Sprintf("<= %d (a quarter of the floor)", TargetIdleReads), Pass: id.ReadsPerMonth <= TargetIdleReads,
			Baseline: fmt.Sprintf("no read budget (a poll every %s): %.0f", time.Duration(id.BaselineIntervalS*float64(time.Second)), id.BaselineReadsPerMonth),
		})
	}
}

// at names the provider latency a figure was measured at.
func at(latencyMs float64) string { return fmt.Sprintf("%.0f ms", latencyMs) }

func evaluateDrain(d DrainResult, add func(Target)) {
	add(Target{
		Name: "drain API requests/s / what its read operations allow, " + at(d.LatencyMs), Value: d.LimitShare, Unit: "share",
		Target: fmt.Sprintf(">= %.0f%%", TargetLimitShare*100), Pass: d.LimitShare >= TargetLimitShare,
		Baseline: drainBaseline(d),
	})
	add(Target{
		Name: "drain 429s per 1,000 requests, " + at(d.LatencyMs), Value: d.LimitedPer1000, Unit: "per1000",
		Target: fmt.Sprintf("<= %.0f", TargetLimited), Pass: d.LimitedPer1000 <= TargetLimited,
		Baseline: fmt.Sprintf("%d of %d requests; by operation %s", d.RateLimited, d.APIRequests, formatCounts(d.Operations)),
	})
	add(Target{
		Name: "drain fetches per customer, burst stored first, " + at(d.LatencyMs), Value: d.FetchesPerCustomer, Unit: "fetches",
		Target: fmt.Sprintf("<= %.1f", TargetFetches), Pass: d.FetchesPerCustomer <= TargetFetches,
		Baseline: fmt.Sprintf("%d events over %d customers", d.Events, d.Customers),
	})
	add(Target{
		Name: "drain fetches per customer, burst arriving live, " + at(d.LatencyMs), Value: d.Live.FetchesPerCustomer, Unit: "fetches",
		Target: fmt.Sprintf("<= %.1f", TargetFetches), Pass: d.Live.FetchesPerCustomer <= TargetFetches,
		Baseline: fmt.Sprintf("%d customers fetched more than once", d.Live.Refetched),
	})
}

// formatCounts writes counts by name, sorted: "a 3, b 1".
func formatCounts(m map[string]int64) string {
	parts := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func evaluateLatency(l LatencyResult, add func(Target)) {
	if l.Measured.Events == 0 {
		return
	}
	ratio := round(l.Measured.P99Ms/l.LatencyMs, 2)
	base := fmt.Sprintf("provider latency %.0f ms", l.LatencyMs)
	if b := l.Baseline; b != nil {
		base += fmt.Sprintf("; %d fixed: p99 %.0f ms", b.Workers, b.P99Ms)
	}
	add(Target{
		Name: "webhook → applied p99 / provider latency, load at half the limit, " + at(l.LatencyMs), Value: ratio, Unit: "times",
		Target: fmt.Sprintf("<= %.1f", TargetAppliedP99), Pass: l.LatencyMs > 0 && ratio <= TargetAppliedP99,
		Baseline: base,
	})
}

func printLatency(w io.Writer, l LatencyResult) {
	fmt.Fprintf(w, "LATENCY: %.0f deliveries/s (half the %.0f req/s the read operations allow) for %.0f s through the HTTP intake, over %d customers; fake Stripe latency %.0f ms\n",
		l.LoadPerSec, l.RateLimit, l.Seconds, l.Customers, l.LatencyMs)
	for _, a := range []*Applied{&l.Measured, l.Baseline} {
		if a == nil {
			continue
		}
		fmt.Fprintf(w, "  at most %d in flight: %d deliveries, webhook → applied p50 %.0f ms, p99 %.0f ms, max %.0f ms\n",
			a.Workers, a.Events, a.P50Ms, a.P99Ms, a.MaxMs)
	}
	fmt.Fprintln(w)
}

// drainBaseline says what the drain did against its baseline in the same
// run: the old fixed loops, and what its operations allow.
func drainBaseline(d DrainResult) string {
	s := fmt.Sprintf("%.1f of %.0f req/s (%d operations × %.0f within %.0f)", d.APIRequestsPerSec, d.Allowed, readOperations, d.OperationRate, d.RateLimit)
	if b := d.Baseline; b != nil {
		s += fmt.Sprintf("; %d fixed: %.1f req/s (%.1f%%), %.1f× slower", b.Workers, b.APIRequestsPerSec, b.LimitShare*100, b.Seconds/d.Seconds)
	}
	return s
}

func evaluateSweep(sw SweepResult, add func(Target)) {
	if sw.Accounts == 0 {
		return
	}
	add(Target{
		Name: fmt.Sprintf("sweep wall time / list operation's minimum, %d accounts, %s", sw.Accounts, at(sw.LatencyMs)), Value: sw.WallRatio, Unit: "ratio",
		Target: fmt.Sprintf("<= %.1f", TargetSweepWall), Pass: sw.WallRatio > 0 && sw.WallRatio <= TargetSweepWall,
		Baseline: fmt.Sprintf("%.2f s against %d list calls ÷ the sweep's %.0f req/s = %.2f s", sw.Seconds, sw.ListCalls, sw.ListRate, sw.ProviderBoundSeconds),
	})
	add(Target{
		Name: "sweep per-account requests / list requests, " + at(sw.LatencyMs), Value: sw.CallReduction, Unit: "times",
		Target: fmt.Sprintf(">= %.0f×", TargetSweepCalls), Pass: sw.CallReduction >= TargetSweepCalls,
		Baseline: fmt.Sprintf("%d accounts × %.2f requests per fetch = %d, against %d", sw.Accounts, sw.RequestsPerFetch, sw.PerAccountCalls, sw.ListCalls),
	})
	if sw.Accounts >= TargetSweep1MFrom {
		// billsync sweep in a process of its own is how billsync sweeps
		// (serve's schedule runs the same code); the in-process sweep
		// shares its CPU and heap with the fake's million objects.
		projected, seconds, from := sw.Projected1MSeconds, sw.Seconds, "the in-process sweep"
		if p := sw.Process; p != nil {
			projected, seconds, from = p.Projected1MSeconds, p.Seconds, "billsync sweep, a process of its own"
		}
		add(Target{
			Name: fmt.Sprintf("sweep, 1M accounts projected at %.0f req/s (%s), %s", sw.ListRate, from, at(sw.LatencyMs)), Value: projected / 60, Unit: "min",
			Target: fmt.Sprintf("<= %.0f min", TargetSweep1M.Minutes()), Pass: projected > 0 && projected <= TargetSweep1M.Seconds(),
			Baseline: fmt.Sprintf("the floor at the sweep's %.0f req/s: %.1f min; the in-process sweep: %.1f min; the whole run scaled, start and end too: %.1f min",
				sw.ListRate, float64(sw.ListCalls)/sw.ListRate*1e6/float64(sw.Accounts)/60, sw.Projected1MSeconds/60,
				seconds*1e6/float64(sw.Accounts)/60),
		})
	}
	if p := sw.Process; p != nil {
		add(Target{
			Name: fmt.Sprintf("billsync sweep peak RSS, %d accounts, %s", sw.Accounts, at(sw.LatencyMs)), Value: p.PeakRSSMiB, Unit: "MiB",
			Target: fmt.Sprintf("<= %.0f MiB", TargetSweepRSSMiB), Pass: p.PeakRSSMiB > 0 && p.PeakRSSMiB <= TargetSweepRSSMiB,
			Baseline: fmt.Sprintf("a process of its own: %d healed of %d drifted in %.2f s", p.Healed, p.Drifted, p.Seconds),
		})
	}
}

// Print writes the report as tables: each part's figures, then each
// target with its verdict.
func (r Report) Print(w io.Writer) {
	fmt.Fprintf(w, "billsync bench (%s): %d CPUs, %s, %s, pools of %d connections, %.0f s\n\n",
		r.Mode, r.CPUs, r.GoVersion, r.Database, r.PoolConns, r.Seconds)
	if len(r.Intake) > 0 {
		first := r.Intake[0]
		fmt.Fprintf(w, "INTAKE: %d deliveries per path and round (%d%% copies, %d customers), %d rounds, paths alternating first\n",
			first.Deliveries, int(copyShare*100), intakeCustomers, first.Rounds)
		fmt.Fprintln(w, "  ceiling = store.StoreReceipt called directly (same transaction, no HTTP, no signature check)")
		fmt.Fprintln(w, "  bench CPU = this process (senders, HTTP server, pgx); machine busy = all CPUs, PostgreSQL included")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "  senders\tpath\tdeliveries/s\tp50 ms\tp99 ms\tmax ms\tratio\tbench CPU µs/delivery\tmachine busy\t")
		row := func(senders int, path string, l Latency, ratio string) {
			fmt.Fprintf(tw, "  %d\t%s\t%.0f\t%.1f\t%.1f\t%.1f\t%s\t%.0f\t%.0f%%\t\n",
				senders, path, l.PerSec, l.P50Ms, l.P99Ms, l.MaxMs, ratio, l.ProcessCPUus, l.MachineBusy*100)
		}
		for _, in := range r.Intake {
			row(in.Senders, "ceiling", in.Ceiling, "")
			row(in.Senders, "HTTP intake", in.HTTP, fmt.Sprintf("%.3f", in.Ratio))
		}
		tw.Flush()
		fmt.Fprintln(w)
	}
	for _, d := range r.Drain {
		printDrain(w, d)
	}
	for _, l := range r.Latency {
		if l.Measured.Events > 0 {
			printLatency(w, l)
		}
	}
	for _, sw := range r.Sweep {
		if sw.Import.Accounts > 0 {
			printImport(w, sw)
		}
		if sw.Accounts > 0 {
			printSweep(w, sw)
		}
	}
	if hl := r.Heal; hl.Changes > 0 {
		fmt.Fprintf(w, "HEAL: %d plan changes at the fake (%.0f ms latency), %d workers; events feed as serve runs it at %.0f reads/month (a quiet poll every %s), its times ÷ %d: every %.0f ms\n",
			hl.Changes, hl.LatencyMs, hl.Workers, hl.Allocation, time.Duration(hl.BudgetPollMs*float64(time.Millisecond)), hl.Scale, hl.PollMs)
		fmt.Fprintf(w, "  change at the fake → account applied: by webhook p50 %.0f ms, p99 %.0f ms, max %.0f ms\n",
			hl.Webhook.P50Ms, hl.Webhook.P99Ms, hl.Webhook.MaxMs)
		fmt.Fprintf(w, "  every webhook dropped, the feed alone: p50 %.0f ms, p99 %.0f ms, max %.0f ms (%d events caught)\n\n",
			hl.Feed.P50Ms, hl.Feed.P99Ms, hl.Feed.MaxMs, hl.FeedCaught)
	}

	if id := r.Idle; id.Allocation > 0 {
		fmt.Fprintf(w, "IDLE: the events feed as serve runs it on an account with no transactions (read allocation %.0f a month)\n", id.Allocation)
		fmt.Fprintf(w, "  counted at the fake: %.1f reads a quiet poll, %.0f a read of the webhook endpoint's status\n", id.ReadsPerPoll, id.EndpointReads)
		fmt.Fprintf(w, "  a quiet poll every %s (the budget's), the endpoint every %s: %.0f reads / 30 days = %.1f%% of the allocation\n",
			time.Duration(id.IntervalS*float64(time.Second)), time.Duration(id.EndpointEveryS*float64(time.Second)), id.ReadsPerMonth, id.Share*100)
		fmt.Fprintf(w, "  baseline, same reads with no budget (a poll every %s): %.0f reads / 30 days\n\n",
			time.Duration(id.BaselineIntervalS*float64(time.Second)), id.BaselineReadsPerMonth)
	}

	for _, d := range r.Drift {
		printDrift(w, d)
	}
	for _, c := range r.Connect {
		printConnect(w, c)
	}

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TARGET\tMEASURED\tTARGET\tRESULT\tBASELINE (same run)")
	for _, t := range r.Targets {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", t.Name, t.formatValue(), t.Target, t.Verdict, t.Baseline)
	}
	tw.Flush()
	if r.Missed > 0 {
		fmt.Fprintf(w, "\nMISS: %d of %d targets missed (a measurement: the exit status is 0 anyway)\n", r.Missed, len(r.Targets))
	} else {
		fmt.Fprintf(w, "\nall %d targets met\n", len(r.Targets))
	}
}

func printDrain(w io.Writer, d DrainResult) {
	fmt.Fprintf(w, "DRAIN: %d events over %d customers, stored with %s; fake Stripe latency %s, limits %.0f req/s global and %.0f req/s each operation (enforced by the fake, followed by the client), at most %d in flight (sized to rate × latency below it; batch %d)\n",
		d.Events, d.Customers, d.StoredVia, time.Duration(d.LatencyMs*float64(time.Millisecond)), d.RateLimit, d.OperationRate, d.Workers, d.Batch)
	fmt.Fprintf(w, "  queue empty after %.2f s: %d API requests = %.1f req/s = %.1f%% of the %.0f req/s its %d read operations allow (%.1f%% over the time less one latency, while requests waited)\n",
		d.Seconds, d.APIRequests, d.APIRequestsPerSec, d.LimitShare*100, d.Allowed, readOperations, d.DeepShare*100)
	fmt.Fprintf(w, "  requests by operation: %s; 429s by reason: %s\n", formatCounts(d.Operations), formatCounts(d.LimitedBy))
	if b := d.Baseline; b != nil {
		fmt.Fprintf(w, "  baseline, same run: at most %d in flight (serve's old %d fixed loops): %.2f s, %.1f req/s = %.1f%% of the limit\n",
			b.Workers, b.Workers, b.Seconds, b.APIRequestsPerSec, b.LimitShare*100)
	}
	fmt.Fprintf(w, "  %d reconciles = %.1f reconciles/s (each costs %.1f requests, so the limit allows at most %.1f/s)\n",
		d.Reconciles, d.ReconcilesPerSec, d.RequestsPerReconcile, d.MaxReconcilesPerSec)
	fmt.Fprintf(w, "  %d provider fetches for %d customers = %.2f per customer; %d answers 429; %d connections opened to the fake\n",
		d.Fetches, d.Customers, d.FetchesPerCustomer, d.RateLimited, d.Connections)
	fmt.Fprintf(w, "  events: %d applied, %d pending; setup: seeding the fake %.1f s, storing events %.1f s\n",
		d.EventsApplied, d.EventsPending, d.SeedSeconds, d.StoreSeconds)
	l := d.Live
	fmt.Fprintf(w, "  live: %d more events posted through the HTTP intake by %d senders, each customer's burst back to back,\n", l.Events, l.Senders)
	fmt.Fprintf(w, "    while the workers ran (woken after each delivery): posted in %.2f s, queue empty after %.2f s;\n", l.PostSeconds, l.Seconds)
	fmt.Fprintf(w, "    %d fetches for %d customers = %.2f per customer (%d customers fetched more than once)\n\n",
		l.Fetches, l.Customers, l.FetchesPerCustomer, l.Refetched)
}

// evaluateImport judges the import that created the sweep's accounts.
func evaluateImport(sw SweepResult, add func(Target)) {
	im := sw.Import
	if im.Accounts == 0 {
		return
	}
	add(Target{
		Name: fmt.Sprintf("import wall time / list operation's minimum, %d accounts into an empty database, %s", im.Accounts, at(sw.LatencyMs)), Value: im.WallRatio, Unit: "ratio",
		Target: fmt.Sprintf("<= %.1f", TargetImportWall), Pass: im.WallRatio > 0 && im.WallRatio <= TargetImportWall,
		Baseline: fmt.Sprintf("%.2f s (%.0f accounts/s) against %d list calls ÷ %.0f req/s = %.2f s; the sweep of the same accounts, %d drifted: %.2f s",
			im.Seconds, im.AccountsPerSec, im.ListCalls, sw.ListRate, im.ProviderBoundSeconds, sw.Drifted, sw.Seconds),
	})
	if im.Accounts >= TargetImport1MFrom {
		add(Target{
			Name: fmt.Sprintf("import, 1M customers projected at %.0f req/s, %s", sw.ListRate, at(sw.LatencyMs)), Value: im.Projected1MSeconds / 60, Unit: "min",
			Target: fmt.Sprintf("<= %.0f min", TargetImport1M.Minutes()), Pass: im.Projected1MSeconds > 0 && im.Projected1MSeconds <= TargetImport1M.Seconds(),
			Baseline: fmt.Sprintf("the floor at %.0f req/s: %.1f min; at the run's middle half, %.0f accounts/s",
				sw.ListRate, float64(im.ListCalls)/sw.ListRate*1e6/float64(im.Accounts)/60, im.SteadyPerSec),
		})
	}
}

func printImport(w io.Writer, sw SweepResult) {
	im := sw.Import
	fmt.Fprintf(w, "IMPORT: %d customers at the fake into an empty database (a run of kind import, serve's sweeper and client), limits %.0f req/s global (the listing's share: its list operation's %.0f), %.0f ms latency\n",
		im.Accounts, sw.RateLimit, sw.ListRate, sw.LatencyMs)
	fmt.Fprintf(w, "  %.2f s for %d list calls (%d answered 429); at the list operation's %.0f req/s they need %.2f s, so wall time is %.2f× that (1.0: bound by Stripe)\n",
		im.Seconds, im.ListCalls, im.RateLimited, sw.ListRate, im.ProviderBoundSeconds, im.WallRatio)
	fmt.Fprintf(w, "  %.0f accounts/s (%d imported); the sweep below lists the same accounts, %d drifted, in %.2f s (%.0f accounts/s)\n",
		im.AccountsPerSec, im.Imported, sw.Drifted, sw.Seconds, sw.AccountsPerSec)
	fmt.Fprintf(w, "  1M customers projected at %.0f s (%.1f min: this run, then the rest at its middle half's %.0f accounts/s); the floor at %.0f req/s: %.1f min\n\n",
		im.Projected1MSeconds, im.Projected1MSeconds/60, im.SteadyPerSec, sw.ListRate, float64(im.ListCalls)/sw.ListRate*1e6/float64(im.Accounts)/60)
}

func printSweep(w io.Writer, sw SweepResult) {
	parallel := "adapting to rate × latency"
	if sw.Parallel > 0 {
		parallel = fmt.Sprintf("pinned at %d", sw.Parallel)
	}
	fmt.Fprintf(w, "SWEEP: %d accounts at the fake (%d drifted: plan changed at Stripe, webhook lost), client and fake limits %.0f req/s global (the sweep's share: its list operation's %.0f), %.0f ms latency, list requests in flight %s\n",
		sw.Accounts, sw.Drifted, sw.RateLimit, sw.ListRate, sw.LatencyMs, parallel)
	fmt.Fprintf(w, "  %.2f s for %d list calls (%d answered 429); at the sweep's share they need %.2f s, so wall time is %.2f× that\n",
		sw.Seconds, sw.ListCalls, sw.RateLimited, sw.ProviderBoundSeconds, sw.WallRatio)
	fmt.Fprintf(w, "  %.0f accounts/s; %d healed of %d drifted; one by one would cost %d requests (%.2f per fetch): %.1f× more\n",
		sw.AccountsPerSec, sw.Healed, sw.Drifted, sw.PerAccountCalls, sw.RequestsPerFetch, sw.CallReduction)
	fmt.Fprintf(w, "  1M accounts projected at %.0f s (%.1f min: the list calls' time scaled, plus this run's start and end); Go heap grew at most %.1f MiB during the sweep; peak RSS %.0f MiB (includes the in-process fake)\n",
		sw.Projected1MSeconds, sw.Projected1MSeconds/60, sw.HeapPeakMiB, sw.PeakRSSMiB)
	fmt.Fprintf(w, "  setup: seeding the fake %.1f s; every account created by the import above\n", sw.SeedSeconds)
	if p := sw.Process; p != nil {
		fmt.Fprintf(w, "  billsync sweep, a process of its own, after another %d drifted: %d healed in %.2f s for %d list calls (%.2f× the minimum; 1M projected at %.1f min), peak RSS %.0f MiB (its own: the fake and PostgreSQL are other processes)\n",
			p.Drifted, p.Healed, p.Seconds, p.ListCalls, p.WallRatio, p.Projected1MSeconds/60, p.PeakRSSMiB)
	}
	fmt.Fprintln(w)
}

func (t Target) formatValue() string {
	switch t.Unit {
	case "ms":
		return fmt.Sprintf("%.1f ms", t.Value)
	case "share":
		return fmt.Sprintf("%.1f%%", t.Value*100)
	case "times":
		return fmt.Sprintf("%.1f×", t.Value)
	case "MiB":
		return fmt.Sprintf("%.0f MiB", t.Value)
	case "min":
		return fmt.Sprintf("%.1f min", t.Value)
	case "reads":
		return fmt.Sprintf("%.0f", t.Value)
	case "per1000":
		return fmt.Sprintf("%.2f", t.Value)
	default:
		return fmt.Sprintf("%.3f", t.Value)
	}
}

func evaluateConnect(c ConnectResult, add func(Target)) {
	for _, r := range c.Rounds {
		how := "measured"
		if !r.Measured {
			how = fmt.Sprintf("computed from %d polls' rate", r.Polls)
		}
		add(Target{
			Name:  fmt.Sprintf("connect round polls/s / the events list's rate, %d accounts, %s", r.Accounts, at(c.LatencyMs)),
			Value: r.LimitShare, Unit: "share", Target: fmt.Sprintf(">= %.0f%%", TargetConnectShare*100),
			Pass: r.LimitShare >= TargetConnectShare,
			Baseline: fmt.Sprintf("round %.1f s (%s); one poll at a time %.2f polls/s: %.1f s (%.1f× longer); %d 429s of %d requests",
				r.RoundSeconds, how, c.Baseline.PollsPerSec, r.BaselineRoundSeconds, r.Speedup, r.RateLimited, r.Requests),
		})
	}
}
