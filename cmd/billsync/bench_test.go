package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestBenchQuick runs the bench at toy sizes on an embedded cluster of its
// own (or DATABASE_URL's server, in a database of its own) and checks that
// what it reports adds up. It asserts no timing: figures are measurements.
func TestBenchQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL")
	}
	root, err := os.MkdirTemp("", "billsync-bench-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(root) })
	require.NoError(t, os.Chmod(root, 0o755)) // PostgreSQL's user must reach it when we are root

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var out, logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	err = runBench(ctx, []string{"--json", "-data-dir", filepath.Join(root, "data"),
		"-senders", "1,4", "-intake-deliveries", "100", "-rounds", "2",
		"-drain-events", "60", "-customers", "6", "-workers", "3", "-latency", "2ms", "-rate", "500",
	}, &out, logger)
	require.NoError(t, err, "logs:\n%s", logs.String())

	var rep benchReport
	require.NoError(t, json.Unmarshal(out.Bytes(), &rep), out.String())
	require.Equal(t, "quick", rep.Mode)

	require.Len(t, rep.Intake, 2)
	for i, senders := range []int{1, 4} {
		in := rep.Intake[i]
		require.Equal(t, senders, in.Senders)
		require.Equal(t, 100, in.Deliveries)
		require.Equal(t, 70, in.UniqueEvents, "30% of the deliveries are copies")
		require.Equal(t, 30, in.Copies)
		for _, l := range []benchLatency{in.HTTP, in.Ceiling} {
			require.Equal(t, 2*100, l.Deliveries, "both rounds are counted")
			require.Positive(t, l.PerSec)
			require.Positive(t, l.P50Ms)
			require.GreaterOrEqual(t, l.P99Ms, l.P50Ms)
			require.GreaterOrEqual(t, l.MaxMs, l.P99Ms)
		}
		require.Positive(t, in.Ratio)
		require.Len(t, in.RoundRatios, 2)
		c := in.Check
		require.Equal(t, c.SentUniqueEvents, c.StoredEvents, "every distinct event stored once")
		require.Equal(t, c.SentDeliveries, c.Receipts, "every delivery has its receipt")
		require.Equal(t, c.SentDeliveries, c.SeenCountSum)
		require.Greater(t, c.SentDeliveries, 2*2*100, "warm-up deliveries are stored too")
	}

	d := rep.Drain
	require.Equal(t, 60, d.Events)
	require.Equal(t, 6, d.Customers)
	require.Equal(t, 6, d.CustomersFetched, "every customer is fetched")
	require.GreaterOrEqual(t, d.Fetches, int64(6))
	require.InDelta(t, float64(d.Fetches)/6, d.FetchesPerCustomer, 0.001)
	require.GreaterOrEqual(t, d.APIRequests, 2*d.Fetches, "a fetch is a customer retrieve and a subscription list")
	require.Equal(t, 60, d.EventsApplied)
	require.Zero(t, d.EventsPending)
	require.GreaterOrEqual(t, d.Reconciles, 6)
	require.Positive(t, d.Seconds)
	require.InDelta(t, float64(d.APIRequests)/d.Seconds/500, d.LimitShare, 0.01)

	l := d.Live
	require.Equal(t, 60, l.Events)
	require.Equal(t, 6, l.Customers)
	require.Equal(t, 6, l.CustomersFetched, "every customer is fetched again for its live burst")
	require.GreaterOrEqual(t, l.Fetches, int64(6))
	require.LessOrEqual(t, l.Refetched, 6)
	require.Zero(t, l.EventsPending)

	require.Len(t, rep.Targets, 5)
	missed := 0
	for _, tg := range rep.Targets {
		require.Contains(t, []string{"PASS", "MISS"}, tg.Verdict)
		require.Equal(t, tg.Verdict == "PASS", tg.Pass)
		if !tg.Pass {
			missed++
		}
	}
	require.Equal(t, missed, rep.Missed)
	require.True(t, strings.HasPrefix(rep.Targets[0].Name, "intake throughput / ceiling, 4 senders"),
		"without 32 senders the intake is judged at the largest count: %s", rep.Targets[0].Name)
}

// TestBenchTablePrintsMiss: the table names each target and says MISS
// plainly when one is missed.
func TestBenchTablePrintsMiss(t *testing.T) {
	rep := benchReport{
		Mode: "quick",
		Intake: []benchIntake1{{Senders: 32, Ratio: 0.5,
			HTTP: benchLatency{PerSec: 500, P99Ms: 40}, Ceiling: benchLatency{PerSec: 1000, P99Ms: 10}}},
		Drain: benchDrainRes{Events: 20, Customers: 2, LimitShare: 0.99, RateLimit: 100, FetchesPerCustomer: 1,
			Live: benchLiveRes{FetchesPerCustomer: 1.5, Refetched: 1}},
	}
	rep.evaluate()
	require.Equal(t, 3, rep.Missed)
	var out bytes.Buffer
	rep.print(&out)
	verdicts := map[string]string{}
	for _, line := range strings.Split(out.String(), "\n") {
		for _, tg := range rep.Targets {
			if strings.HasPrefix(line, tg.Name+" ") {
				for _, v := range []string{"PASS", "MISS"} {
					if strings.Contains(line, " "+v+" ") {
						verdicts[tg.Name] = v
					}
				}
			}
		}
	}
	require.Equal(t, map[string]string{
		"intake throughput / ceiling, 32 senders":         "MISS",
		"intake p99, 32 senders":                          "MISS",
		"drain API requests/s / client limit":             "PASS",
		"drain fetches per customer, burst stored first":  "PASS",
		"drain fetches per customer, burst arriving live": "MISS",
	}, verdicts, out.String())
	require.Contains(t, out.String(), "MISS: 3 of 5 targets missed")
}
