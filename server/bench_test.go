package server_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/billsync/billsync/providers/stripe"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/server"
	"github.com/billsync/billsync/store"
	"github.com/billsync/billsync/store/storetest"
)

// benchSenders is how many goroutines per GOMAXPROCS post at once:
// 16 × 2 CPUs = the 32 senders `billsync bench` judges the intake at.
const benchSenders = 16

// benchStore returns a store on a fresh migrated database, with serve's
// pool size (pgx's default, max(4, CPUs)), so both benchmarks wait for
// connections the way production does.
func benchStore(b *testing.B) *store.Store { return storetest.NewStore(b) }

// benchBody is event n: 70% new events, 30% copies of a recent one (n/10*7
// + n%10 maps ten deliveries onto seven events), spread over 1000 customers.
func benchBody(n int64) []byte {
	id := n/10*7 + min(n%10, 6)
	return eventBody(fmt.Sprintf("evt_bench_%d", id), "customer.subscription.updated",
		fmt.Sprintf("cus_bench_%d", id%1000), "2025-08-27.basil")
}

// reportLatency adds p50 and p99 of lat, in milliseconds, to b's output.
func reportLatency(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2])/1e6, "p50-ms")
	b.ReportMetric(float64(lat[(len(lat)*99+99)/100-1])/1e6, "p99-ms")
}

// runParallel runs op from benchSenders×GOMAXPROCS goroutines with a fresh
// delivery number each time and reports the latency percentiles.
func runParallel(b *testing.B, op func(n int64) error) {
	var (
		next atomic.Int64
		mu   sync.Mutex
		lat  []time.Duration
	)
	b.SetParallelism(benchSenders)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		var mine []time.Duration
		for pb.Next() {
			t0 := time.Now()
			if err := op(next.Add(1)); err != nil {
				b.Error(err)
				return
			}
			mine = append(mine, time.Since(t0))
		}
		mu.Lock()
		lat = append(lat, mine...)
		mu.Unlock()
	})
	b.StopTimer()
	reportLatency(b, lat)
}

// BenchmarkIntake posts signed deliveries through billsync's HTTP handler
// (a real listener, keep-alive connections) into a real database. Compare
// with BenchmarkStoreDeliveryDirect:
//
//	go test -bench 'Intake|StoreDeliveryDirect' -run '^$' ./server
func BenchmarkIntake(b *testing.B) {
	st := benchStore(b)
	v, err := stripe.NewVerifier([]string{secretA}, stripe.DefaultTolerance)
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(server.New(server.Config{Inbox: st, Verifiers: []server.Verifier{v}}))
	b.Cleanup(srv.Close)
	transport := &http.Transport{MaxIdleConnsPerHost: 1024}
	b.Cleanup(transport.CloseIdleConnections)
	client := &http.Client{Transport: transport}

	runParallel(b, func(n int64) error {
		body := benchBody(n)
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/webhooks/stripe", bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Stripe-Signature", sign(body, secretA, time.Now()))
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		answer, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("delivery %d: %d %s", n, resp.StatusCode, answer)
		}
		return nil
	})
}

// BenchmarkStoreDeliveryDirect is BenchmarkIntake's ceiling: the same
// store transaction at the same concurrency, without HTTP or the signature
// check (the body is still parsed, as the verifier would).
func BenchmarkStoreDeliveryDirect(b *testing.B) {
	st := benchStore(b)
	ctx := context.Background()
	runParallel(b, func(n int64) error {
		_, err := st.StoreDelivery(ctx, reconcile.Delivery{Event: stripe.ParseEvent(benchBody(n)), RemoteAddr: "127.0.0.1:40000"})
		return err
	})
}
