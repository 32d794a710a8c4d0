package server_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/server"
	"github.com/billsync/billsync/store/storetest"
)

// TestIntakeLyingClients: 200 unauthenticated clients announce a 1 MiB
// body and send a few bytes. They used to reserve 1 MiB each before a byte
// was checked (~200 MiB); now a body costs what has arrived. Meanwhile a
// real delivery is stored.
func TestIntakeLyingClients(t *testing.T) {
	const liars = 200
	st := storetest.NewStore(t)
	cfg := intakeConfig(t, st)
	cfg.BodyTimeout = time.Hour // they must still be connected when measured
	srv, s := startIntake(t, cfg)

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var conns []net.Conn
	t.Cleanup(func() { // before srv.Close, which waits for their handlers
		for _, c := range conns {
			c.Close()
		}
	})
	for range liars {
		c, err := net.Dial("tcp", srv.Listener.Addr().String())
		require.NoError(t, err)
		conns = append(conns, c)
		_, err = fmt.Fprintf(c, "POST /webhooks/stripe HTTP/1.1\r\nHost: billsync\r\nContent-Type: application/json\r\n"+
			"Stripe-Signature: t=1,v1=00\r\nContent-Length: %d\r\n\r\n{\"id\":", server.MaxBodyBytes)
		require.NoError(t, err)
	}
	storetest.WaitFor(t, "every liar is read", func() bool { return server.BodiesReading(s) == liars })
	runtime.GC()
	runtime.ReadMemStats(&after)
	growth := int64(after.HeapInuse) - int64(before.HeapInuse)
	t.Logf("heap in use grew by %.1f MiB with %d lying clients connected", float64(growth)/(1<<20), liars)
	require.Less(t, growth, int64(32<<20), "memory held for bodies that never came")

	body := eventBody("evt_real", "customer.subscription.updated", "cus_real", "2025-08-27.basil")
	a := deliver(t, srv.URL, body, sign(body, secretA, time.Now()))
	require.Equal(t, http.StatusOK, a.code, a.body)
	require.Equal(t, "stored", a.body["status"])
	counts := storetest.Counts(t, st)
	require.Equal(t, 1, counts["inbox_events"])
	require.Equal(t, 1, counts["receipts"])
}

// TestIntakeBodyMemoryBudget: bodies past their first chunk share
// BodyMemory. While a slow sender holds it all, another large body is
// refused at once with 503 and Retry-After (the provider retries), a small
// one is still stored, and once the slow sender is gone the large one is
// stored too.
func TestIntakeBodyMemoryBudget(t *testing.T) {
	st := storetest.NewStore(t)
	cfg := intakeConfig(t, st)
	cfg.BodyMemory = server.MaxBodyBytes // one maximum-size body at a time
	cfg.BodyTimeout = time.Hour
	srv, s := startIntake(t, cfg)

	slow, err := net.Dial("tcp", srv.Listener.Addr().String())
	require.NoError(t, err)
	defer slow.Close()
	_, err = fmt.Fprintf(slow, "POST /webhooks/stripe HTTP/1.1\r\nHost: billsync\r\nStripe-Signature: t=1,v1=00\r\n"+
		"Content-Length: %d\r\n\r\n%s", server.MaxBodyBytes, bytes.Repeat([]byte(" "), 600<<10))
	require.NoError(t, err)
	storetest.WaitFor(t, "the bodies hold over 512 KiB", func() bool { return server.BodyMemoryInUse(s) > 512<<10 })

	large := padded(eventBody("evt_large", "invoice.paid", "cus_large", "2025-08-27.basil"), 100<<10)
	a := deliver(t, srv.URL, large, sign(large, secretA, time.Now()))
	require.Equal(t, http.StatusServiceUnavailable, a.code, a.body)
	require.NotEmpty(t, a.header.Get("Retry-After"))
	small := eventBody("evt_small", "invoice.paid", "cus_small", "2025-08-27.basil")
	a = deliver(t, srv.URL, small, sign(small, secretA, time.Now()))
	require.Equal(t, http.StatusOK, a.code, a.body)
	require.Equal(t, 1, storetest.Counts(t, st)["inbox_events"])

	slow.Close()
	storetest.WaitFor(t, "the bodies' memory is given back", func() bool { return server.BodyMemoryInUse(s) == 0 })
	a = deliver(t, srv.URL, large, sign(large, secretA, time.Now()))
	require.Equal(t, http.StatusOK, a.code, a.body)
	require.Equal(t, "stored", a.body["status"])
	require.Equal(t, 2, storetest.Counts(t, st)["inbox_events"])
	require.Zero(t, server.BodyMemoryInUse(s), "every reservation is returned")
}

// TestIntakeClientFailuresAreNotServerErrors: a client that hangs up mid
// body, sends less than it announced, or is too slow is counted as
// answer="client_error", never as a 500, and never logged as an error:
// anyone could otherwise trip a 5xx alert.
func TestIntakeClientFailuresAreNotServerErrors(t *testing.T) {
	st := storetest.NewStore(t)
	logs := &recordingHandler{}
	cfg := intakeConfig(t, st)
	cfg.Logger = slog.New(logs)
	cfg.Metrics = server.NewMetrics(nil, nil)
	// Only TooSlow meets the short BodyTimeout: on a busy machine it could
	// otherwise expire before the server reads what the other clients sent.
	srv, _ := startIntake(t, cfg)
	cfg.BodyTimeout = 200 * time.Millisecond
	hasty, _ := startIntake(t, cfg) // the same metrics and logs
	body := eventBody("evt_half", "invoice.paid", "cus_half", "2025-08-27.basil")
	head := fmt.Sprintf("POST /webhooks/stripe HTTP/1.1\r\nHost: billsync\r\nStripe-Signature: %s\r\nContent-Length: %d\r\n\r\n",
		sign(body, secretA, time.Now()), len(body))
	half := body[:len(body)/2]

	tests := []struct {
		name string
		srv  *httptest.Server
		code int // 0: the client is gone
		send func(c *net.TCPConn)
	}{
		{"HalfBodyThenClose", srv, 0, func(c *net.TCPConn) { _, _ = c.Write(half); c.Close() }},
		{"ShorterThanContentLength", srv, http.StatusBadRequest, func(c *net.TCPConn) { _, _ = c.Write(half); _ = c.CloseWrite() }},
		{"TooSlow", hasty, http.StatusRequestTimeout, func(c *net.TCPConn) { _, _ = c.Write(half) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := net.Dial("tcp", tt.srv.Listener.Addr().String())
			require.NoError(t, err)
			defer c.Close()
			_, err = io.WriteString(c, head)
			require.NoError(t, err)
			tt.send(c.(*net.TCPConn))
			if tt.code != 0 {
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				require.NoError(t, err)
				resp.Body.Close()
				require.Equal(t, tt.code, resp.StatusCode)
			}
		})
	}
	// The server may finish with a client after the client is done.
	storetest.WaitFor(t, "every delivery is counted", func() bool {
		return metricValue(t, srv.URL, "billsync_webhook_receipts_total") == len(tests)
	})
	require.Equal(t, len(tests), metricValue(t, srv.URL, `billsync_webhook_receipts_total{answer="client_error",provider="stripe"}`))
	require.Equal(t, 0, metricValue(t, srv.URL, `billsync_webhook_receipts_total{answer="500",provider="stripe"}`))
	require.Empty(t, logs.atLeast(slog.LevelError))
	for table, n := range storetest.Counts(t, st) {
		require.Zero(t, n, "table %s", table)
	}
}

// padded returns body with spaces inserted before its last byte, n bytes in
// all: still the same JSON.
func padded(body []byte, n int) []byte {
	out := append([]byte{}, body[:len(body)-1]...)
	out = append(out, bytes.Repeat([]byte(" "), n-len(body))...)
	return append(out, body[len(body)-1])
}

// metricValue scrapes GET /metrics and sums the samples of series: a
// metric name (every label set) or one exposed series (name{labels}).
func metricValue(t *testing.T, url, series string) int {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	text, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var sum float64
	for _, line := range strings.Split(string(text), "\n") {
		name, value, ok := strings.Cut(line, " ")
		if !ok || strings.HasPrefix(line, "#") || (name != series && !strings.HasPrefix(name, series+"{")) {
			continue
		}
		n, err := strconv.ParseFloat(value, 64)
		require.NoError(t, err)
		sum += n
	}
	return int(sum)
}

// recordingHandler keeps every log record.
type recordingHandler struct {
	mu      sync.Mutex
	records []slog.Record
}

func (h *recordingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordingHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *recordingHandler) WithGroup(string) slog.Handler            { return h }
func (h *recordingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, r.Clone())
	return nil
}

// atLeast returns the messages of records at level or above.
func (h *recordingHandler) atLeast(level slog.Level) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var msgs []string
	for _, r := range h.records {
		if r.Level >= level {
			msgs = append(msgs, r.Message)
		}
	}
	return msgs
}

// TestIntakeBodyLimit: without a Content-Length (chunked), a body of
// exactly MaxBodyBytes is read and stored; one byte more is refused with
// 413 and nothing is stored.
func TestIntakeBodyLimit(t *testing.T) {
	st := storetest.NewStore(t)
	srv := newIntake(t, st)
	post := func(body []byte) int {
		// A reader of unknown length makes the client send it chunked.
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/webhooks/stripe", io.MultiReader(bytes.NewReader(body)))
		require.NoError(t, err)
		req.Header.Set("Stripe-Signature", sign(body, secretA, time.Now()))
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	over := padded(eventBody("evt_over", "invoice.paid", "cus_1", "2025-08-27.basil"), server.MaxBodyBytes+1)
	require.Equal(t, http.StatusRequestEntityTooLarge, post(over))
	exact := padded(eventBody("evt_exact", "invoice.paid", "cus_1", "2025-08-27.basil"), server.MaxBodyBytes)
	require.Equal(t, http.StatusOK, post(exact))
	var stored []string
	for _, e := range storetest.Events(t, st) {
		stored = append(stored, e.DedupeKey)
	}
	require.Equal(t, []string{"evt_exact"}, stored)
}
