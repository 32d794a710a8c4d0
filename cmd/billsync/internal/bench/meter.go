package bench

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// sendAll calls send for 0..n-1 from senders goroutines (a closed loop:
// each waits for its answer) and returns each call's latency and the time
// from the first start to the last answer, both read from now. Any failure
// fails the run: a bench that loses deliveries measures nothing.
func sendAll(ctx context.Context, now func() time.Time, senders, n int, send func(ctx context.Context, i int) error) ([]time.Duration, time.Duration, error) {
	var (
		next     atomic.Int64
		mu       sync.Mutex
		all      = make([]time.Duration, 0, n)
		failed   int
		firstErr error
		wg       sync.WaitGroup
	)
	start := now()
	for range senders {
		wg.Go(func() {
			mine := make([]time.Duration, 0, n/senders+1)
			var errs int
			var err1 error
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					break
				}
				t0 := now()
				if err := send(ctx, i); err != nil {
					errs++
					err1 = cmp.Or(err1, err)
					continue
				}
				mine = append(mine, now().Sub(t0))
			}
			mu.Lock()
			all = append(all, mine...)
			failed += errs
			if firstErr == nil {
				firstErr = err1
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	took := now().Sub(start)
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	if failed > 0 {
		return nil, 0, fmt.Errorf("%d of %d calls failed, first: %w", failed, n, firstErr)
	}
	return all, took, nil
}

// Latency is one path's figures over all its rounds.
type Latency struct {
	Deliveries int     `json:"deliveries"`
	Seconds    float64 `json:"seconds"`
	PerSec     float64 `json:"deliveries_per_sec"`
	P50Ms      float64 `json:"p50_ms"`
	P99Ms      float64 `json:"p99_ms"`
	MaxMs      float64 `json:"max_ms"`
	// ProcessCPUus is this process's CPU time (user+system: senders,
	// HTTP server, pgx) per delivery, in microseconds.
	ProcessCPUus float64 `json:"process_cpu_us_per_delivery"`
	// MachineBusy is the share of all CPUs busy during the timed runs
	// (PostgreSQL included); 0 where /proc/stat is unreadable.
	MachineBusy float64 `json:"machine_busy"`
}

// latencyOf summarises the latencies of deliveries sent in elapsed.
func latencyOf(lat []time.Duration, elapsed time.Duration, cpu cpuTime) Latency {
	slices.Sort(lat)
	ms := func(q float64) float64 { return round(float64(percentile(lat, q))/float64(time.Millisecond), 2) }
	l := Latency{Deliveries: len(lat), Seconds: round(elapsed.Seconds(), 3), P50Ms: ms(0.5), P99Ms: ms(0.99), MaxMs: ms(1)}
	if elapsed > 0 {
		l.PerSec = round(float64(len(lat))/elapsed.Seconds(), 1)
	}
	if len(lat) > 0 {
		l.ProcessCPUus = round(float64(cpu.process)/float64(time.Microsecond)/float64(len(lat)), 1)
	}
	if cpu.total > 0 {
		l.MachineBusy = round(float64(cpu.busy)/float64(cpu.total), 3)
	}
	return l
}

// percentile is the nearest-rank q-quantile of sorted (0 when empty): the
// smallest latency that at least q of the deliveries did not exceed.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(i, 0)]
}

// cpuTime is CPU time spent: by this process, and by the whole machine
// (busy and total jiffies from /proc/stat).
type cpuTime struct {
	process     time.Duration
	busy, total uint64
}

func cpuNow() cpuTime {
	var c cpuTime
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		c.process = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return c
	}
	line, _, _ := strings.Cut(string(b), "\n")
	fields := strings.Fields(line)
	if len(fields) < 5 || fields[0] != "cpu" {
		return c
	}
	for i, f := range fields[1:] {
		n, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return cpuTime{process: c.process}
		}
		if i >= 8 { // guest time is already counted in user time
			break
		}
		c.total += n
		if i != 3 && i != 4 { // idle, iowait
			c.busy += n
		}
	}
	return c
}

func (c cpuTime) sub(o cpuTime) cpuTime {
	return cpuTime{c.process - o.process, c.busy - o.busy, c.total - o.total}
}

func (c cpuTime) add(o cpuTime) cpuTime {
	return cpuTime{c.process + o.process, c.busy + o.busy, c.total + o.total}
}

func round(v float64, places int) float64 {
	p := math.Pow(10, float64(places))
	return math.Round(v*p) / p
}

// peakRSSMiB is this process's peak resident set size (VmHWM), or 0 where
// /proc does not say.
func peakRSSMiB() float64 { return float64(statusKiB("/proc/self/status", "VmHWM:")) / 1024 }

// statusKiB reads a "Name:   123 kB" line of a /proc status file; 0 when
// it cannot (not Linux, the process is gone).
func statusKiB(path, name string) int64 {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, name); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return 0
			}
			return kb
		}
	}
	return 0
}
