package main

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/billsync/billsync/providers/stripe"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/server"
	"github.com/billsync/billsync/store"
)

// benchIntake1 is the intake at one sender count.
type benchIntake1 struct {
	Senders      int           `json:"senders"`
	Rounds       int           `json:"rounds"`
	Deliveries   int           `json:"deliveries"`    // per path and round, timed
	UniqueEvents int           `json:"unique_events"` // per path and round
	Copies       int           `json:"copies"`        // per path and round
	HTTP         benchLatency  `json:"http"`
	Ceiling      benchLatency  `json:"ceiling"`
	Ratio        float64       `json:"ratio"` // HTTP deliveries/s over ceiling deliveries/s
	RoundRatios  []float64     `json:"round_ratios"`
	Check        benchIntakeOK `json:"check"`
}

// benchIntakeOK compares what was sent with what the database holds, over
// every round and both paths (warm-up deliveries included).
type benchIntakeOK struct {
	SentDeliveries   int `json:"sent_deliveries"`
	SentUniqueEvents int `json:"sent_unique_events"`
	StoredEvents     int `json:"stored_events"`
	Receipts         int `json:"receipts"`
	SeenCountSum     int `json:"seen_count_sum"`
}

// benchLatency is one path's figures over all its rounds.
type benchLatency struct {
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

func latencyOf(lat []time.Duration, elapsed time.Duration, cpu benchCPU) benchLatency {
	slices.Sort(lat)
	pct := func(q float64) float64 {
		if len(lat) == 0 {
			return 0
		}
		i := int(math.Ceil(q*float64(len(lat)))) - 1
		return benchRound(float64(lat[max(i, 0)])/float64(time.Millisecond), 2)
	}
	l := benchLatency{Deliveries: len(lat), Seconds: benchRound(elapsed.Seconds(), 3), P50Ms: pct(0.5), P99Ms: pct(0.99), MaxMs: pct(1)}
	if elapsed > 0 {
		l.PerSec = benchRound(float64(len(lat))/elapsed.Seconds(), 1)
	}
	if len(lat) > 0 {
		l.ProcessCPUus = benchRound(float64(cpu.process)/float64(time.Microsecond)/float64(len(lat)), 1)
	}
	if cpu.total > 0 {
		l.MachineBusy = benchRound(float64(cpu.busy)/float64(cpu.total), 3)
	}
	return l
}

// benchCPU is CPU time spent: by this process, and by the whole machine
// (busy and total jiffies from /proc/stat).
type benchCPU struct {
	process     time.Duration
	busy, total uint64
}

func benchCPUNow() benchCPU {
	var c benchCPU
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
			return benchCPU{process: c.process}
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

func (c benchCPU) sub(o benchCPU) benchCPU {
	return benchCPU{c.process - o.process, c.busy - o.busy, c.total - o.total}
}

func (c benchCPU) add(o benchCPU) benchCPU {
	return benchCPU{c.process + o.process, c.busy + o.busy, c.total + o.total}
}

// benchDelivery is one delivery, ready for both paths: signed for HTTP and
// already verified for the direct call, so neither timed loop prepares
// anything.
type benchDelivery struct {
	body     []byte
	header   string
	delivery reconcile.Delivery
}

// benchPlan returns n deliveries with ids under prefix: 70% distinct events
// and 30% copies of one of them (Stripe re-signs every copy), shuffled, so a
// copy may race its original.
func benchPlan(prefix string, n int, seed uint64, verifier *stripe.Verifier) ([]benchDelivery, int, error) {
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	copies := int(math.Round(float64(n) * benchCopyShare))
	unique := n - copies
	bodies := make([][]byte, 0, n)
	for i := range unique {
		bodies = append(bodies, benchEventBody(fmt.Sprintf("evt_%s_%06d", prefix, i),
			fmt.Sprintf("cus_bench_%04d", rng.IntN(benchIntakeCustomers)), i))
	}
	for range copies {
		bodies = append(bodies, bodies[rng.IntN(unique)])
	}
	rng.Shuffle(len(bodies), func(i, j int) { bodies[i], bodies[j] = bodies[j], bodies[i] })
	out := make([]benchDelivery, len(bodies))
	now := time.Now()
	for i, body := range bodies {
		header := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: benchSecret, Timestamp: now}).Header
		d, err := verifier.Verify(http.Header{"Stripe-Signature": {header}}, body)
		if err != nil {
			return nil, 0, fmt.Errorf("bench delivery does not verify: %w", err)
		}
		d.RemoteAddr = "127.0.0.1:40000" // the intake stores the sender's address too
		out[i] = benchDelivery{body: body, header: header, delivery: d}
	}
	return out, unique, nil
}

var benchEventTypes = []struct{ typ, object string }{
	{"customer.subscription.updated", "subscription"},
	{"invoice.paid", "invoice"},
	{"customer.subscription.created", "subscription"},
	{"invoice.payment_succeeded", "invoice"},
	{"customer.updated", "customer"},
}

// benchEventBody is a Stripe-shaped event of about 1.3 KB (real ones are
// 1-5 KB; the body is stored byte for byte).
func benchEventBody(id, customer string, n int) []byte {
	et := benchEventTypes[n%len(benchEventTypes)]
	objID, cust := fmt.Sprintf("%s_%s", et.object[:3], id[4:]), fmt.Sprintf("%q", customer)
	if et.object == "customer" {
		objID = customer
		cust = "null"
	}
	now := time.Now().Unix()
	return fmt.Appendf(nil, `{"id":%q,"object":"event","api_version":"2025-08-27.basil","created":%d,"type":%q,`+
		`"livemode":false,"pending_webhooks":1,"request":{"id":"req_%s","idempotency_key":"%s-idem"},`+
		`"data":{"object":{"id":%q,"object":%q,"customer":%s,"status":"active","cancel_at_period_end":false,`+
		`"collection_method":"charge_automatically","currency":"usd","created":%d,"livemode":false,`+
		`"items":{"object":"list","data":[{"id":"si_%s","object":"subscription_item","quantity":1,`+
		`"current_period_start":%d,"current_period_end":%d,"price":{"id":"price_pro","object":"price",`+
		`"lookup_key":"pro","unit_amount":2000,"currency":"usd","type":"recurring","active":true,`+
		`"recurring":{"interval":"month","interval_count":1,"usage_type":"licensed"}}}],"has_more":false,"total_count":1},`+
		`"metadata":{"user_id":"user_%s","source":"billsync bench"}},`+
		`"previous_attributes":{"items":{"data":[{"price":{"id":"price_free","lookup_key":"free","unit_amount":0}}]}}}}`,
		id, now, et.typ, id[4:], id[4:], objID, et.object, cust, now, id[4:], now, now+30*86400, customer)
}

// benchIntake measures, at each sender count, the HTTP intake against the
// same store transaction called directly, in alternating rounds.
func benchIntake(ctx context.Context, st *store.Store, o benchOptions, logger *slog.Logger) ([]benchIntake1, error) {
	verifier, err := stripe.NewVerifier([]string{benchSecret}, 0)
	if err != nil {
		return nil, err
	}
	post, stopHTTP, err := benchHTTPIntake(st, verifier)
	if err != nil {
		return nil, err
	}
	defer stopHTTP()
	direct := func(ctx context.Context, d benchDelivery) error {
		_, err := st.StoreDelivery(ctx, d.delivery)
		return err
	}
	paths := map[string]func(context.Context, benchDelivery) error{"ceiling": direct, "http": post}

	var results []benchIntake1
	phase := 0
	for _, senders := range o.Senders {
		res := benchIntake1{Senders: senders, Rounds: o.Rounds, Deliveries: o.IntakeDeliveries}
		before, err := st.Stats(ctx)
		if err != nil {
			return nil, err
		}
		lat := map[string][]time.Duration{}
		elapsed := map[string]time.Duration{}
		cpu := map[string]benchCPU{}
		for r := range o.Rounds {
			order := []string{"ceiling", "http"}
			if r%2 == 1 {
				order = []string{"http", "ceiling"}
			}
			perSec := map[string]float64{}
			for _, path := range order {
				phase++
				prefix := fmt.Sprintf("%s%d", path[:1], phase)
				// Warm-up: connections (HTTP and pool) opened, caches
				// filled; stored but not timed.
				warm, warmUnique, err := benchPlan(prefix+"w", max(4*senders, 20), uint64(phase)<<1, verifier)
				if err != nil {
					return nil, err
				}
				if _, _, err := benchSend(ctx, senders, len(warm), func(ctx context.Context, i int) error { return paths[path](ctx, warm[i]) }); err != nil {
					return nil, fmt.Errorf("intake warm-up (%s, %d senders): %w", path, senders, err)
				}
				plan, unique, err := benchPlan(prefix, o.IntakeDeliveries, uint64(phase)<<1|1, verifier)
				if err != nil {
					return nil, err
				}
				cpu0 := benchCPUNow()
				l, took, err := benchSend(ctx, senders, len(plan), func(ctx context.Context, i int) error { return paths[path](ctx, plan[i]) })
				if err != nil {
					return nil, fmt.Errorf("intake (%s, %d senders): %w", path, senders, err)
				}
				cpu[path] = cpu[path].add(benchCPUNow().sub(cpu0))
				lat[path] = append(lat[path], l...)
				elapsed[path] += took
				perSec[path] = float64(len(l)) / took.Seconds()
				res.UniqueEvents, res.Copies = unique, len(plan)-unique
				res.Check.SentDeliveries += len(warm) + len(plan)
				res.Check.SentUniqueEvents += warmUnique + unique
				logger.Info("bench intake", slog.Int("senders", senders), slog.Int("round", r+1), slog.String("path", path),
					slog.Float64("deliveries_per_sec", benchRound(perSec[path], 1)))
			}
			res.RoundRatios = append(res.RoundRatios, benchRound(perSec["http"]/perSec["ceiling"], 3))
		}
		res.HTTP = latencyOf(lat["http"], elapsed["http"], cpu["http"])
		res.Ceiling = latencyOf(lat["ceiling"], elapsed["ceiling"], cpu["ceiling"])
		res.Ratio = benchRound(res.HTTP.PerSec/res.Ceiling.PerSec, 3)

		after, err := st.Stats(ctx)
		if err != nil {
			return nil, err
		}
		res.Check.StoredEvents = after.Events - before.Events
		res.Check.Receipts = after.Receipts - before.Receipts
		res.Check.SeenCountSum = after.SeenCountSum - before.SeenCountSum
		if c := res.Check; c.StoredEvents != c.SentUniqueEvents || c.Receipts != c.SentDeliveries || c.SeenCountSum != c.SentDeliveries {
			return nil, fmt.Errorf("intake at %d senders lost work: sent %d deliveries of %d events, stored %d events, %d receipts, seen_count sum %d",
				senders, c.SentDeliveries, c.SentUniqueEvents, c.StoredEvents, c.Receipts, c.SeenCountSum)
		}
		results = append(results, res)
	}
	return results, nil
}

// benchHTTPIntake serves billsync's intake on a loopback port and returns
// a function that posts a delivery to it as Stripe would (its own
// keep-alive connection per sender) and fails on any answer but 200.
func benchHTTPIntake(st *store.Store, verifier *stripe.Verifier) (post func(context.Context, benchDelivery) error, stop func(), err error) {
	// The server logs every delivery at info, as in production; the
	// formatting is part of the cost, the output is not wanted.
	srvLogger := slog.New(slog.NewTextHandler(io.Discard, nil))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, fmt.Errorf("bench intake listener: %w", err)
	}
	hs := &http.Server{
		Handler:           server.New(server.Config{Logger: srvLogger, Inbox: st, Verifiers: []server.Verifier{verifier}}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	go hs.Serve(ln) //nolint:errcheck // ends with Close
	endpoint := "http://" + ln.Addr().String() + "/webhooks/stripe"
	transport := &http.Transport{MaxIdleConns: 512, MaxIdleConnsPerHost: 512, IdleConnTimeout: time.Minute, DisableCompression: true}
	client := &http.Client{Transport: transport, Timeout: time.Minute}
	post = func(ctx context.Context, d benchDelivery) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(d.body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Stripe-Signature", d.header)
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("intake answered %d: %s", resp.StatusCode, bytes.TrimSpace(body))
		}
		return nil
	}
	stop = func() {
		transport.CloseIdleConnections()
		hs.Close() //nolint:errcheck // bench teardown: every request has been answered
	}
	return post, stop, nil
}

// benchSend calls send for 0..n-1 from senders goroutines and returns each
// call's latency and the wall time from the first start to the last answer.
// Any failure fails the run: a bench that loses deliveries measures nothing.
func benchSend(ctx context.Context, senders, n int, send func(ctx context.Context, i int) error) ([]time.Duration, time.Duration, error) {
	var (
		next     atomic.Int64
		mu       sync.Mutex
		all      = make([]time.Duration, 0, n)
		failed   int
		firstErr error
		wg       sync.WaitGroup
	)
	start := time.Now()
	for range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := make([]time.Duration, 0, n/senders+1)
			var errs int
			var err1 error
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					break
				}
				t0 := time.Now()
				if err := send(ctx, i); err != nil {
					errs++
					err1 = cmp.Or(err1, err)
					continue
				}
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			all = append(all, mine...)
			failed += errs
			if firstErr == nil {
				firstErr = err1
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	took := time.Since(start)
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	if failed > 0 {
		return nil, 0, fmt.Errorf("%d of %d calls failed, first: %w", failed, n, firstErr)
	}
	return all, took, nil
}

// ---- drain ----
