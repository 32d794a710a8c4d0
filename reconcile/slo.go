package reconcile

import (
	"fmt"
	"time"
)

// CorrectnessObjective is the correctness SLO's objective: the share of
// sampled accounts equal to the provider. It is deploy/prometheus/slo.yml's
// default (billsync:slo_correctness_objective); the console reckons its
// error budget against it (docs/correctness.md).
const CorrectnessObjective = 0.999

// SampleWindows are the windows the console reckons the correctness sample
// over: the fast page's hour, the slow page's six hours and the SLO's 30
// days (docs/deploy.md, SLOs).
var SampleWindows = []time.Duration{time.Hour, 6 * time.Hour, 30 * 24 * time.Hour}

// Burn thresholds of the pages (the SRE Workbook's multiwindow alerts, as
// slo.yml pages): the budget burnt 14.4 times as fast as it lasts over an
// hour, or 6 times over six hours.
const (
	FastBurn = 14.4
	SlowBurn = 6
)

// SampleWindow counts the accounts the correctness sample compared over
// one window, and those found drifted.
type SampleWindow struct {
	Window           time.Duration
	Sampled, Drifted int64
}

// Burn is how many times faster than it lasts the window spent the error
// budget (1 - objective): 1 spends it exactly over the SLO's 30 days. 0
// when nothing was sampled.
func (w SampleWindow) Burn(objective float64) float64 {
	if w.Sampled == 0 || objective >= 1 {
		return 0
	}
	return float64(w.Drifted) / float64(w.Sampled) / (1 - objective)
}

// CorrectnessSignals are the overview's signals of the correctness sample
// (windows as SampleWindows gives them, shortest first): each window's
// share of equal accounts and burn rate, bad at the page's threshold for
// the hour (FastBurn) and the six hours (SlowBurn), and the error budget
// the last window left, bad once spent. None when nothing was sampled.
func CorrectnessSignals(windows []SampleWindow, objective float64) []HealthSignal {
	if len(windows) == 0 || windows[len(windows)-1].Sampled == 0 {
		return nil
	}
	var out []HealthSignal
	for i, w := range windows {
		burn := w.Burn(objective)
		s := HealthSignal{Name: "correctness, last " + windowName(w.Window)}
		if w.Sampled == 0 {
			s.Value, s.Hint = "no samples", "the sample compared no account"
			out = append(out, s)
			continue
		}
		s.Value = fmt.Sprintf("%.2f%% equal", 100*float64(w.Sampled-w.Drifted)/float64(w.Sampled))
		s.Hint = fmt.Sprintf("%d of %d sampled accounts drifted; budget burnt at %.1f× (objective %.1f%%)",
			w.Drifted, w.Sampled, burn, 100*objective)
		switch i {
		case 0:
			s.Bad = burn >= FastBurn
		case 1:
			s.Bad = burn >= SlowBurn
		}
		out = append(out, s)
	}
	last := windows[len(windows)-1]
	left := 1 - last.Burn(objective)
	budget := HealthSignal{Name: "correctness error budget, " + windowName(last.Window),
		Value: fmt.Sprintf("%.0f%% left", 100*max(left, 0)),
		Hint:  fmt.Sprintf("%d drifted of %d sampled; the budget allows %.1f%% drifted", last.Drifted, last.Sampled, 100*(1-objective)),
		Bad:   left <= 0}
	return append(out, budget)
}

// windowName names a window of whole days as days ("30d"), else hours.
func windowName(d time.Duration) string {
	if d%(24*time.Hour) == 0 {
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	}
	return fmt.Sprintf("%gh", d.Hours())
}
