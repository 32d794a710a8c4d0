package reconcile_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/mocks/mock"
	"github.com/billsync/billsync/reconcile"
)

// spender is a reconcile.Spender whose reads the test adds.
type spender struct {
	mu       sync.Mutex
	reads    map[string]int64
	replicas int
}

func (c *spender) Name() string { return "stripe" }

func (c *spender) read(op string, n int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reads == nil {
		c.reads = map[string]int64{}
	}
	c.reads[op] += n
}

func (c *spender) TakeReads() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.reads
	c.reads = nil
	if r == nil {
		r = map[string]int64{}
	}
	return r
}

func (c *spender) SetReplicas(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.replicas = n
}

func (c *spender) Allocation(transactions int64) float64 {
	return max(10_000, 500*float64(transactions))
}

func (c *spender) ConnectAllocation(transactions int64) float64 {
	return max(10_000, 500*float64(transactions))
}

// TestSpendingSplitsConnectReads: reads on behalf of connected accounts
// (their operations' ConnectOperation names) and the connected accounts'
// transactions are a budget of their own, each projected and held against
// its own allocation: neither counts toward the platform's.
func TestSpendingSplitsConnectReads(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	st := &mock.SpendStore{ReportSpendFn: func(context.Context, string, string, map[string]int64, bool) (reconcile.Spend, error) {
		return reconcile.Spend{Now: now, Since: now.Add(-72 * time.Hour), Replicas: 1, Transactions: 4, ConnectTransactions: 40,
			Reads: map[string]int64{
				"GET /v1/events": 500, "GET /v1/customers/{id}": 100, // written before Connect: the platform's
				reconcile.ConnectOperation("GET /v1/events"):         1500,
				reconcile.ConnectOperation("GET /v1/customers/{id}"): 600,
			}}, nil
	}}
	c := &spender{}
	s, err := reconcile.NewSpending(reconcile.SpendingConfig{Store: st, Client: c})
	require.NoError(t, err)
	require.Equal(t, 10_000.0, s.ConnectAllocation(), "before a report: the allocation of no transaction")
	c.read(reconcile.ConnectOperation("GET /v1/events"), 10)
	c.read("GET /v1/events", 1)
	v, err := s.Report(context.Background())
	require.NoError(t, err)

	require.Equal(t, map[string]int64{"GET /v1/events": 501, "GET /v1/customers/{id}": 100}, v.Reads, "the platform's own reads")
	require.EqualValues(t, 601, v.Total)
	require.InDelta(t, 6010, v.Projected, 0.01, "three days of 30")
	require.EqualValues(t, 4, v.Transactions)
	require.Equal(t, 10_000.0, v.Allocation, "the platform's 4 transactions: the floor")
	require.False(t, v.Over())

	require.Equal(t, map[string]int64{"GET /v1/events": 1510, "GET /v1/customers/{id}": 600}, v.Connect.Reads,
		"the reads on behalf of connected accounts, by their operations' own names")
	require.EqualValues(t, 2110, v.Connect.Total)
	require.InDelta(t, 21100, v.Connect.Projected, 0.01)
	require.EqualValues(t, 40, v.Connect.Transactions)
	require.Equal(t, 20_000.0, v.Connect.Allocation, "500 × the connected accounts' 40 transactions")
	require.Equal(t, 20_000.0, s.ConnectAllocation())
	require.True(t, v.ConnectOver(), "21,100 projected over 20,000 allowed")
}

func TestSpendingReports(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	var sent []map[string]int64
	record := map[string]int64{"GET /v1/events": 1000}
	fail := true
	st := &mock.SpendStore{ReportSpendFn: func(_ context.Context, provider, holder string, reads map[string]int64, worker bool) (reconcile.Spend, error) {
		require.Equal(t, "stripe", provider)
		require.Equal(t, "replica-a", holder)
		require.True(t, worker)
		if fail {
			fail = false
			return reconcile.Spend{}, errors.New("database down")
		}
		sent = append(sent, reads)
		// Three days recorded: 1,000 reads before this report.
		return reconcile.Spend{Now: now, Reads: map[string]int64{"GET /v1/events": record["GET /v1/events"]},
			Since: now.Add(-72 * time.Hour), Transactions: 30, Replicas: 3}, nil
	}}
	c := &spender{}
	var views []reconcile.SpendView
	s, err := reconcile.NewSpending(reconcile.SpendingConfig{Store: st, Client: c, Worker: true, Holder: "replica-a",
		OnReport: func(v reconcile.SpendView) { views = append(views, v) }})
	require.NoError(t, err)
	require.Equal(t, 10_000.0, s.Allocation(), "before a report: the allocation of no transaction")

	c.read("GET /v1/customers/{id}", 4)
	_, err = s.Report(context.Background())
	require.ErrorContains(t, err, "database down")
	require.Zero(t, c.replicas, "no share learnt")

	c.read("GET /v1/customers/{id}", 1)
	c.read("GET /v1/events", 2)
	v, err := s.Report(context.Background())
	require.NoError(t, err)
	require.Equal(t, []map[string]int64{{"GET /v1/customers/{id}": 5, "GET /v1/events": 2}}, sent,
		"the failed report's reads go with the next")
	require.Equal(t, 3, c.replicas, "the client shares its rates among three")
	require.Equal(t, map[string]int64{"GET /v1/events": 1002, "GET /v1/customers/{id}": 5}, v.Reads, "the record plus this report")
	require.EqualValues(t, 1007, v.Total)
	require.InDelta(t, 1007*10, v.Projected, 0.01, "three days of 30")
	require.Equal(t, 15_000.0, v.Allocation, "500 × 30 transactions")
	require.False(t, v.Over())
	require.Equal(t, []reconcile.SpendView{v}, views)
	require.Equal(t, v, s.View())

	record["GET /v1/events"] = 1600
	v, err = s.Report(context.Background())
	require.NoError(t, err)
	require.True(t, v.Over(), "16,000 projected over 15,000 allowed")
}

func TestSpendProjection(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name  string
		since time.Time
		want  float64
	}{
		{"a whole window recorded", now.Add(-29*24*time.Hour - 12*time.Hour), 600 * 30 / 29.5},
		{"older than the window", now.Add(-40 * 24 * time.Hour), 600},
		{"ten minutes: at least an hour", now.Add(-10 * time.Minute), 600 * 30 * 24},
		{"nothing recorded", time.Time{}, 600},
	} {
		st := &mock.SpendStore{ReportSpendFn: func(context.Context, string, string, map[string]int64, bool) (reconcile.Spend, error) {
			return reconcile.Spend{Now: now, Since: tc.since, Reads: map[string]int64{"GET /v1/events": 600}, Replicas: 1}, nil
		}}
		s, err := reconcile.NewSpending(reconcile.SpendingConfig{Store: st, Client: &spender{}})
		require.NoError(t, err)
		v, err := s.Report(context.Background())
		require.NoError(t, err)
		require.InDelta(t, tc.want, v.Projected, 0.01, tc.name)
	}
}

// TestSpendingLeavesWhenItStops: Run reports every period and, when it
// stops, sends the last reads and leaves the shares.
func TestSpendingLeavesWhenItStops(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var reports, last []bool
		var total int64
		left := false
		st := &mock.SpendStore{
			ReportSpendFn: func(_ context.Context, _, _ string, reads map[string]int64, worker bool) (reconcile.Spend, error) {
				mu.Lock()
				defer mu.Unlock()
				reports = append(reports, worker)
				for _, n := range reads {
					total += n
				}
				return reconcile.Spend{Reads: map[string]int64{}, Replicas: 1}, nil
			},
			LeaveSpendFn: func(context.Context, string, string) error {
				mu.Lock()
				defer mu.Unlock()
				last, left = reports, true
				return nil
			},
		}
		c := &spender{}
		s, err := reconcile.NewSpending(reconcile.SpendingConfig{Store: st, Client: c, Worker: true, Period: time.Second})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { s.Run(ctx); close(done) }()
		c.read("GET /v1/events", 1)
		time.Sleep(3500 * time.Millisecond)
		c.read("GET /v1/events", 1)
		cancel()
		<-done
		require.True(t, left)
		require.Equal(t, []bool{true, true, true, false}, last, "three periods, then the last report, without a worker's share")
		require.EqualValues(t, 2, total, "no read lost")
	})
}
