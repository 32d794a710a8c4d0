package reconcile

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

func TestBudgetInFlight(t *testing.T) {
	for name, tc := range map[string]struct {
		b     Budget
		bound int
		want  int
	}{
		"RateUnknown_Bound":       {Budget{}, 40, 40},
		"NoLatencyYet_AssumesOne": {Budget{Rate: 10}, 128, 14}, // 10 × 1 s × 1.25 + 1
		"Stripe300ms":             {Budget{Rate: 100, Latency: 300 * time.Millisecond}, 128, 39},
		"Stripe50ms":              {Budget{Rate: 100, Latency: 50 * time.Millisecond}, 128, 8},
		"Stripe1s_Bound":          {Budget{Rate: 100, Latency: time.Second}, 128, 126},
		"Stripe1s_BoundBinds":     {Budget{Rate: 100, Latency: time.Second}, 64, 64},
		"Kinde":                   {Budget{Rate: 10, Latency: 200 * time.Millisecond}, 128, 4},
		"Tiny_AtLeastTwo":         {Budget{Rate: 1, Latency: time.Millisecond}, 128, 2},
		"Huge_NoOverflow":         {Budget{Rate: 1e300, Latency: time.Hour}, 128, 128},
		"ZeroBound_One":           {Budget{Rate: 100, Latency: time.Second}, 0, 1},
	} {
		t.Run(name, func(t *testing.T) {
			require.Equal(t, tc.want, tc.b.InFlight(tc.bound))
		})
	}
}

func TestLatencyMeterFollowsChanges(t *testing.T) {
	var m LatencyMeter
	require.Zero(t, m.Latency(), "nothing measured")
	m.Observe(300 * time.Millisecond)
	require.Equal(t, 300*time.Millisecond, m.Latency(), "the first answer is the average")
	for range 30 {
		m.Observe(time.Second)
	}
	require.InDelta(t, float64(time.Second), float64(m.Latency()), float64(40*time.Millisecond), "thirty answers follow a change")
	before := m.Latency()
	m.Observe(0)
	require.InDelta(t, float64(before)*0.9, float64(m.Latency()), 2, "one answer moves it a tenth of the way")
}

// fixedBudgets is a slots budget giving each provider the limit named:
// rate r at 0.8 s of latency is ceil(r × 0.8 × 1.25) + 1 = r + 1 in flight.
func fixedBudgets(limits map[string]float64) func(string) Budget {
	return func(p string) Budget {
		return Budget{Rate: limits[p] - 1, Latency: 800 * time.Millisecond}
	}
}

func TestSlotsHoldEachProviderToItsLimitAndAllToTheBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSlots(5, fixedBudgets(map[string]float64{"stripe": 3, "kinde": 2}))
		require.Equal(t, 5, s.capacity([]string{"stripe", "kinde"}))
		ctx := context.Background()
		var mu sync.Mutex
		var order []string
		take := func(p, name string) {
			go func() {
				if s.acquire(ctx, p) == nil {
					mu.Lock()
					order = append(order, name)
					mu.Unlock()
				}
			}()
			synctest.Wait()
		}
		got := func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), order...) }
		take("stripe", "s1")
		take("stripe", "s2")
		take("stripe", "s3")
		take("stripe", "s4") // stripe at its limit: waits
		take("kinde", "k1")  // not held up by stripe's waiter
		require.Equal(t, []string{"s1", "s2", "s3", "k1"}, got())
		take("kinde", "k2")
		take("kinde", "k3") // the bound (5) is reached
		require.Equal(t, []string{"s1", "s2", "s3", "k1", "k2"}, got())
		s.release("kinde")
		synctest.Wait()
		// A freed kinde slot goes to the first waiter that fits: stripe's
		// s4 is still at its provider's limit, so k3.
		require.Equal(t, []string{"s1", "s2", "s3", "k1", "k2", "k3"}, got())
		s.release("stripe")
		synctest.Wait()
		require.Equal(t, []string{"s1", "s2", "s3", "k1", "k2", "k3", "s4"}, got())
		require.Equal(t, 5, s.total)
	})
}

func TestSlotsWaiterGivesUpOnCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSlots(1, func(string) Budget { return Budget{} })
		ctx := context.Background()
		require.NoError(t, s.acquire(ctx, "stripe"))
		cctx, cancel := context.WithCancel(ctx)
		errc := make(chan error, 1)
		go func() { errc <- s.acquire(cctx, "stripe") }()
		synctest.Wait()
		cancel()
		require.ErrorIs(t, <-errc, context.Canceled)
		require.Empty(t, s.waiting, "the waiter left the line")
		s.release("stripe")
		require.Zero(t, s.total, "the cancelled waiter took nothing")
		require.NoError(t, s.acquire(ctx, "stripe"))
	})
}

// TestSlotsFollowTheLatency: the limit is read at every grant, so a
// provider that slows down gets more slots as soon as one is released.
func TestSlotsFollowTheLatency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		lat := 50 * time.Millisecond
		s := newSlots(128, func(string) Budget { mu.Lock(); defer mu.Unlock(); return Budget{Rate: 100, Latency: lat} })
		ctx := context.Background()
		var granted sync.WaitGroup
		for range 40 {
			granted.Go(func() { _ = s.acquire(ctx, "stripe") })
		}
		synctest.Wait()
		require.Equal(t, 8, s.total, "100/s at 50 ms")
		mu.Lock()
		lat = 300 * time.Millisecond
		mu.Unlock()
		s.release("stripe")
		granted.Wait()
		require.Equal(t, 39, s.total, "100/s at 300 ms: 39 slots, and the 40th waits")
	})
}

// TestConnectPoolSize: the Connect feed's pool is pinned when set; else
// it is the default until a poll's duration is known (or without a rate),
// then what the events list's rate can use at that duration, within the
// default and MaxConnectPool.
func TestConnectPoolSize(t *testing.T) {
	rate := func(r float64) func() float64 { return func() float64 { return r } }
	for _, tc := range []struct {
		name   string
		pinned int
		rate   func() float64
		poll   time.Duration
		want   int
	}{
		{"pinned", 3, rate(25), 430 * time.Millisecond, 3},
		{"no rate", 0, nil, 430 * time.Millisecond, DefaultConnectPool},
		{"no poll yet", 0, rate(25), 0, DefaultConnectPool},
		{"fast polls: the default", 0, rate(25), 50 * time.Millisecond, DefaultConnectPool},
		{"300 ms and its database work", 0, rate(25), 340 * time.Millisecond, 12}, // ceil(25 × 0.34 × 1.25) + 1
		{"430 ms", 0, rate(25), 430 * time.Millisecond, 15},
		{"bounded", 0, rate(1000), time.Second, MaxConnectPool},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, connectPoolSize(tc.pinned, tc.rate, tc.poll))
		})
	}
}
