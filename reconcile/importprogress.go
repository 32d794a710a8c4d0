package reconcile

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

// runProgress paces an import's progress lines: one at INFO every
// SweeperConfig.ProgressEvery, with the accounts and pages so far, the
// pace of this process's share of the run and, when the lister estimates
// its progress, the time left at that pace.
type runProgress struct {
	begin     time.Time
	last      time.Time // the last line, or begin
	seenFrom  int       // customers the run had seen when this process took it
	progFrom  float64   // its progress then (-1 unknown)
	pagesDone int
}

func newRunProgress(run SweepRun, begin time.Time) *runProgress {
	return &runProgress{begin: begin, last: begin, seenFrom: run.Seen, progFrom: run.Progress}
}

// page counts an applied page of rep's run and logs the progress when a
// line is due.
func (p *runProgress) page(ctx context.Context, log *slog.Logger, every time.Duration, rep SweepReport) {
	p.pagesDone++
	now := time.Now()
	if now.Sub(p.last) < every {
		return
	}
	p.last = now
	elapsed := now.Sub(p.begin)
	attrs := []any{"run", rep.Run.ID, "accounts", rep.Run.Seen, "imported", rep.Run.Healed, "failed", rep.Run.Failed,
		"pages", p.pagesDone, "rate", perSecond(rep.Run.Seen-p.seenFrom, elapsed)}
	if left, ok := p.left(rep.Run.Progress, elapsed); ok {
		attrs = append(attrs, "progress", percent(rep.Run.Progress), "eta", left.Round(time.Second))
	}
	log.InfoContext(ctx, "import progress", attrs...)
}

// left estimates the time the run needs to finish: what remains of its
// progress at the pace this process made it; false when unknown.
func (p *runProgress) left(progress float64, elapsed time.Duration) (time.Duration, bool) {
	from := max(p.progFrom, 0)
	if progress <= from || progress >= 1 || elapsed <= 0 {
		return 0, false
	}
	return time.Duration(float64(elapsed) * (1 - progress) / (progress - from)), true
}

// perSecond is n a second over d, rounded for a log line.
func perSecond(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(int(float64(n)/d.Seconds()*10)) / 10
}

// percent renders a share as a whole percentage ("42%").
func percent(share float64) string {
	return fmt.Sprintf("%d%%", int(share*100))
}
