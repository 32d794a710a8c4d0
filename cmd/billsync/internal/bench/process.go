package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/billsync/billsync/store"
	"github.com/billsync/billsync/store/scratch"
)

// ProcessSweep is a sweep by `billsync sweep` in a process of its own, on
// the same accounts after a second drift: its peak RSS is billsync's own
// footprint, without the in-process fake (the fake and PostgreSQL are other
// processes to it).
type ProcessSweep struct {
	Drifted int `json:"drifted"`
	Healed  int `json:"healed"`
	Seen    int `json:"seen"`
	// Seconds is the process's whole life (start, database checks,
	// sweep); WallRatio is it against ListCalls ÷ rate.
	Seconds    float64 `json:"seconds"`
	ListCalls  int64   `json:"list_calls"`
	WallRatio  float64 `json:"wall_ratio"`
	PeakRSSMiB float64 `json:"peak_rss_mib"`
	// Projected1MSeconds is the process's wall time projected for a
	// million accounts (project1M).
	Projected1MSeconds float64 `json:"projected_1m_seconds"`
	// Timeline is how many list calls the fake answered in each second of
	// the process's life.
	Timeline []int `json:"list_calls_per_second"`
}

// sweepProcess runs cfg.SweepCommand (billsync sweep) on the bench's
// database and the fake at fakeURL, at cfg's rates (the sweep lists at its
// share, as serve gives it) with cfg.SweepParallel list calls in flight,
// and reads its run from the database and its peak RSS from the kernel.
func sweepProcess(ctx context.Context, cfg Config, st *store.Store, fakeURL string) (ProcessSweep, error) {
	argv := cfg.SweepCommand
	args := append(argv[1:len(argv):len(argv)], "-provider", "stripe", "-sweep-parallel", strconv.Itoa(cfg.SweepParallel),
		"-stripe-rate", strconv.FormatFloat(cfg.RateLimit, 'f', -1, 64),
		"-stripe-operation-rate", strconv.FormatFloat(cfg.OperationRate, 'f', -1, 64))
	cmd := exec.CommandContext(ctx, argv[0], args...)
	cmd.Env = append(withoutProviders(os.Environ()), "DATABASE_URL="+scratch.URL(st), "STRIPE_API_KEY="+benchKey,
		"STRIPE_API_URL="+fakeURL, "BILLSYNC_LOG_LEVEL=warn")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return ProcessSweep{}, fmt.Errorf("billsync sweep in a process of its own: %w", err)
	}
	// The kernel's maxrss of a child counts the bench's own size at the
	// fork, so the child's peak is read from its /proc status while it
	// runs (VmHWM: the peak since its exec).
	var peak atomic.Int64
	stop := sample(20*time.Millisecond, func() {
		if kb := statusKiB(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid), "VmHWM:"); kb > peak.Load() {
			peak.Store(kb)
		}
	})
	err := cmd.Wait()
	took := time.Since(t0)
	stop()
	if err != nil {
		return ProcessSweep{}, fmt.Errorf("billsync sweep in a process of its own: %w: %s", err, lastLines(out.String(), 5))
	}
	p := ProcessSweep{Seconds: round(took.Seconds(), 2), PeakRSSMiB: round(float64(peak.Load())/1024, 1)}
	runs, err := st.SweepRuns(ctx, 1)
	if err != nil {
		return p, err
	}
	if len(runs) != 1 || runs[0].Status != "succeeded" {
		return p, errors.New("billsync sweep in a process of its own: no succeeded run recorded")
	}
	p.Seen, p.Healed = runs[0].Seen, runs[0].Healed
	return p, nil
}

// withoutProviders drops the provider settings of the bench's own
// environment, so the child sweeps the fake and nothing else.
func withoutProviders(env []string) []string {
	kept := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, "STRIPE_") && !strings.HasPrefix(kv, "KINDE_") && !strings.HasPrefix(kv, "DATABASE_URL=") {
			kept = append(kept, kv)
		}
	}
	return kept
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
