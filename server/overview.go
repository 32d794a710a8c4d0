package server

import (
	"fmt"
	"html/template"
	"math"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/billsync/billsync/reconcile"
)

// The console's overview: the first page after sign-in. What the database
// knows (every replica shows the same) comes from AdminStore.Overview;
// what only this process knows (the answers it gave, its provider
// requests per second against its limit) from its Metrics. Charts are
// inline SVG drawn here from numbers alone, so the page stays without
// script under the console's Content-Security-Policy.

// overviewData is the overview page's data.
type overviewData struct {
	reconcile.Overview
	Sweeps     []sweepAge    // each provider's newest sweep
	Imports    []importView  // each provider's newest import
	Deliveries template.HTML // chart: deliveries per hour
	Reconciles template.HTML // chart: reconciles per hour by result
	Results    []resultTotal
	Answers    []labelCount // this process's webhook answers since it started
	Providers  []providerRate
	Budgets    []reconcile.SpendView // each provider's read budget, every replica's reads
	Unmapped   []labelCount          // this process's unmapped-price reconciles since it started
	Since      time.Time             // when this process's counts began
	Delivered  int                   // deliveries in the last 24 hours
	Copies     int
}

// sweepAge is a provider's newest sweep with its age.
type sweepAge struct {
	reconcile.SweepRecord
	Age string
	Bad bool // failed, or no success for more than a day and a half
}

// importView is a provider's newest import, with its
// pace: Percent and Left are empty when the provider's listing cannot
// tell, Rate before the first page.
type importView struct {
	reconcile.SweepRecord
	Age     string
	Percent int // of the listing done, when Progress is known
	Rate    string
	Left    string
	Bad     bool // failed
}

// importViewOf is run's importView at now.
func importViewOf(run reconcile.SweepRecord, age string, now time.Time) importView {
	v := importView{SweepRecord: run, Age: age, Bad: run.Status == "failed"}
	if run.Progress != nil {
		v.Percent = int(math.Round(*run.Progress * 100))
	}
	if rate := run.Rate(now); rate > 0 && run.Status == "running" {
		v.Rate = fmt.Sprintf("%.0f customers/s", rate)
	}
	if left, ok := run.Left(now); ok {
		v.Left = "about " + roughly(left) + " left"
	}
	return v
}

type resultTotal struct {
	Result reconcile.Result
	Count  int
}

type labelCount struct {
	Label string
	Count int64
}

// providerRate is one provider's requests per second over the last minute
// (this process) against its limit.
type providerRate struct {
	Provider string
	PerSec   float64
	Limit    float64 // 0: unknown
	Chart    template.HTML
	Hot      bool // above 80% of the limit
}

// results in the order the charts stack them.
var results = []reconcile.Result{reconcile.ResultApplied, reconcile.ResultUnchanged, reconcile.ResultStale,
	reconcile.ResultIgnored, reconcile.ResultRetry, reconcile.ResultDead}

func (c *console) overview(w http.ResponseWriter, r *http.Request, session string) error {
	o, err := c.s.admin.Store.Overview(r.Context())
	if err != nil {
		return err
	}
	o.Signals = slices.DeleteFunc(o.Signals, func(s reconcile.HealthSignal) bool {
		return s.Feed != "" && !slices.Contains(c.s.admin.EventsFeeds, s.Feed)
	})
	d := overviewData{Overview: o}
	for _, run := range o.Sweeps {
		ref := run.StartedAt
		if run.FinishedAt != nil {
			ref = *run.FinishedAt
		}
		if run.Kind == reconcile.RunImport {
			d.Imports = append(d.Imports, importViewOf(run, ago(o.Now.Sub(ref)), o.Now))
			continue
		}
		d.Sweeps = append(d.Sweeps, sweepAge{SweepRecord: run, Age: ago(o.Now.Sub(ref)),
			Bad: run.Status == "failed" || (run.Status != "running" && o.Now.Sub(ref) > 36*time.Hour)})
	}
	var deliveries, reconciles [][]int
	var labels []string
	totals := map[reconcile.Result]int{}
	for _, h := range o.Hours {
		deliveries = append(deliveries, []int{h.Deliveries, h.Copies})
		d.Delivered += h.Deliveries
		d.Copies += h.Copies
		row := make([]int, len(results))
		for i, res := range results {
			row[i] = h.Reconciles[res]
			totals[res] += h.Reconciles[res]
		}
		reconciles = append(reconciles, row)
		labels = append(labels, h.Start.UTC().Format("15:04"))
	}
	for _, res := range results {
		d.Results = append(d.Results, resultTotal{res, totals[res]})
	}
	d.Deliveries = stackedBars("Webhook deliveries per hour, last 24 hours: new events and copies", deliveries, []string{"new", "copy"}, labels)
	classes := make([]string, len(results))
	for i, res := range results {
		classes[i] = string(res)
	}
	d.Reconciles = stackedBars("Reconciles per hour, last 24 hours, by result", reconciles, classes, labels)
	if m := c.s.metrics; m != nil {
		d.Since = m.started
		d.Answers = m.counts("billsync_webhook_receipts_total", "answer")
		d.Unmapped = m.counts("billsync_unmapped_prices_total", "price")
		d.Budgets = m.budget.spends()
		now := time.Now()
		for _, p := range m.rates.providers() {
			perSecond := m.rates.lastMinute(p, now)
			sum := 0
			for _, n := range perSecond {
				sum += n
			}
			pr := providerRate{Provider: p, PerSec: float64(sum) / float64(len(perSecond)), Limit: c.s.admin.ProviderLimits[p]}
			pr.Hot = pr.Limit > 0 && pr.PerSec > 0.8*pr.Limit
			pr.Chart = rateBars(fmt.Sprintf("%s requests per second, last minute, against the limit", p), perSecond, pr.Limit)
			d.Providers = append(d.Providers, pr)
		}
	}
	c.show(w, session, "overview", "Overview", d)
	return nil
}

// roughly says a time left in the largest unit that fits.
func roughly(d time.Duration) string {
	switch {
	case d < time.Minute:
		return "a minute"
	case d < time.Hour:
		return fmt.Sprintf("%d min", int(math.Ceil(d.Minutes())))
	case d < 48*time.Hour:
		return fmt.Sprintf("%.1f h", d.Hours())
	}
	return fmt.Sprintf("%d days", int(d.Hours()/24))
}

// ago says how long ago, in the largest unit that fits.
func ago(d time.Duration) string {
	switch {
	case d < time.Minute:
		return "just now"
	case d < time.Hour:
		return fmt.Sprintf("%d min ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%.1f h ago", d.Hours())
	}
	return fmt.Sprintf("%d days ago", int(d.Hours()/24))
}

// Chart geometry, in SVG user units (the page scales them).
const (
	chartW, chartH = 960, 150
	chartTop       = 14 // room for the largest value's label
	chartBottom    = 16 // room for the hour labels
)

// stackedBars draws one bar per row, its layers stacked in classes' order
// (console.css colours them), with the largest total written at the top
// and every sixth label under its bar. Only numbers and fixed strings go
// into the markup; title is escaped.
func stackedBars(title string, rows [][]int, classes, labels []string) template.HTML {
	maxTotal := 0
	for _, row := range rows {
		total := 0
		for _, v := range row {
			total += v
		}
		maxTotal = max(maxTotal, total)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %d %d" role="img" aria-label="%s"><title>%s</title>`,
		chartW, chartH, template.HTMLEscapeString(title), template.HTMLEscapeString(title))
	plot := float64(chartH - chartTop - chartBottom)
	slot := float64(chartW) / float64(max(len(rows), 1))
	for i, row := range rows {
		y := float64(chartH - chartBottom)
		for k, v := range row {
			if v == 0 || maxTotal == 0 {
				continue
			}
			h := plot * float64(v) / float64(maxTotal)
			y -= h
			fmt.Fprintf(&b, `<rect class="%s" x="%.1f" y="%.1f" width="%.1f" height="%.1f"><title>%s: %d</title></rect>`,
				classes[k], float64(i)*slot+1, y, slot-2, h, template.HTMLEscapeString(labels[i]), v)
		}
		if i%6 == 0 {
			fmt.Fprintf(&b, `<text class="axis" x="%.1f" y="%d">%s</text>`, float64(i)*slot+1, chartH-3, template.HTMLEscapeString(labels[i]))
		}
	}
	fmt.Fprintf(&b, `<line class="base" x1="0" y1="%d" x2="%d" y2="%d"/>`, chartH-chartBottom, chartW, chartH-chartBottom)
	fmt.Fprintf(&b, `<text class="axis" x="%d" y="11" text-anchor="end">max %d/h</text></svg>`, chartW, maxTotal)
	return template.HTML(b.String()) //nolint:gosec // numbers and escaped text only
}

// rateBars draws a bar per second and the limit as a line.
func rateBars(title string, perSecond []int, limit float64) template.HTML {
	top := limit
	for _, n := range perSecond {
		top = math.Max(top, float64(n))
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart rate" viewBox="0 0 %d %d" role="img" aria-label="%s"><title>%s</title>`,
		chartW, chartH/2, template.HTMLEscapeString(title), template.HTMLEscapeString(title))
	plot := float64(chartH/2 - chartTop)
	slot := float64(chartW) / float64(max(len(perSecond), 1))
	for i, n := range perSecond {
		if n == 0 || top == 0 {
			continue
		}
		h := plot * float64(n) / top
		fmt.Fprintf(&b, `<rect class="req" x="%.1f" y="%.1f" width="%.1f" height="%.1f"/>`, float64(i)*slot, float64(chartH/2)-h, max(slot-1, 1), h)
	}
	if limit > 0 {
		y := float64(chartH/2) - plot*limit/top
		fmt.Fprintf(&b, `<line class="limit" x1="0" y1="%.1f" x2="%d" y2="%.1f"/><text class="axis" x="%d" y="%.1f" text-anchor="end">limit %g/s</text>`,
			y, chartW, y, chartW, y-3, limit)
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) //nolint:gosec // numbers and escaped text only
}

// requestRates counts a process's provider requests per second over the
// last minute, per provider: the overview's "requests against the limit".
type requestRates struct {
	mu  sync.Mutex
	per map[string]*[60]secondCount
}

type secondCount struct {
	unix int64
	n    int
}

func newRequestRates() *requestRates { return &requestRates{per: map[string]*[60]secondCount{}} }

func (r *requestRates) add(provider string, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ring := r.per[provider]
	if ring == nil {
		ring = new([60]secondCount)
		r.per[provider] = ring
	}
	sec := now.Unix()
	slot := &ring[sec%60]
	if slot.unix != sec {
		*slot = secondCount{unix: sec}
	}
	slot.n++
}

// lastMinute returns the requests of each of the 60 whole seconds before
// now, oldest first.
func (r *requestRates) lastMinute(provider string, now time.Time) []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]int, 60)
	ring := r.per[provider]
	if ring == nil {
		return out
	}
	end := now.Unix()
	for i := range out {
		sec := end - 60 + int64(i)
		if slot := ring[((sec%60)+60)%60]; slot.unix == sec {
			out[i] = slot.n
		}
	}
	return out
}

func (r *requestRates) providers() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ps []string
	for p := range r.per {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	return ps
}

// counts sums a counter of the registry by one label, largest first.
func (m *Metrics) counts(name, label string) []labelCount {
	families, err := m.reg.Gather()
	if err != nil {
		return nil
	}
	sums := map[string]float64{}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, metric := range f.GetMetric() {
			for _, l := range metric.GetLabel() {
				if l.GetName() == label {
					sums[l.GetValue()] += metric.GetCounter().GetValue()
				}
			}
		}
	}
	out := make([]labelCount, 0, len(sums))
	for l, v := range sums {
		out = append(out, labelCount{l, int64(v)})
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Count > out[j].Count || (out[i].Count == out[j].Count && out[i].Label < out[j].Label)
	})
	return out
}
