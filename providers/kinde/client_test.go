package kinde

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/mocks/inproc"
	kindemock "github.com/billsync/billsync/mocks/kinde"
	"github.com/billsync/billsync/reconcile"
)

// fakeKinde serves a fake Kinde and counts requests by path.
type fakeKinde struct {
	*kindemock.Server
	URL     string
	handler http.Handler // the fake behind the count, for in-process clients
	mu      sync.Mutex
	calls   map[string]int
}

func newFakeKinde(t *testing.T, opts kindemock.Options) *fakeKinde {
	t.Helper()
	s, err := kindemock.New(opts)
	require.NoError(t, err)
	f := &fakeKinde{Server: s, calls: map[string]int{}}
	f.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.calls[r.URL.Path]++
		f.mu.Unlock()
		s.ServeHTTP(w, r)
	})
	srv := httptest.NewServer(f.handler)
	t.Cleanup(func() { srv.Close(); s.Close() })
	f.URL = srv.URL
	return f
}

func (f *fakeKinde) count(path string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[path]
}

func testClient(t *testing.T, f *fakeKinde, cfg Config) *Client {
	t.Helper()
	c, err := NewClient(testConfig(f, cfg))
	require.NoError(t, err)
	return c
}

// bubbleClient is testClient reaching the fake in-process, for a test
// inside a testing/synctest bubble: there the client's limiter and
// backoff wait on the bubble's fake clock, so the time that passes is
// exactly the wait the client chose. Call it inside the bubble.
func bubbleClient(t *testing.T, f *fakeKinde, cfg Config) *Client {
	t.Helper()
	c, err := newClient(testConfig(f, cfg), inproc.Transport{Handler: f.handler})
	require.NoError(t, err)
	return c
}

// testConfig is cfg for the fake f with fast limits and retries.
func testConfig(f *fakeKinde, cfg Config) Config {
	cfg.Domain = f.URL
	if cfg.ClientID == "" {
		cfg.ClientID, cfg.ClientSecret = kindemock.DefaultClientID, kindemock.DefaultClientSecret
	}
	cfg.RateLimit = 1000
	cfg.RetryWaitMin, cfg.RetryWaitMax = time.Millisecond, 10*time.Millisecond
	return cfg
}

func TestAgreementsPageAndTokenIsCached(t *testing.T) {
	f := newFakeKinde(t, kindemock.Options{})
	var want []kindemock.Agreement
	for range 7 {
		want = append(want, kindemock.Agreement{PlanCode: "customer_pro_plan"})
	}
	stored := f.SetAgreements("customer_1", want)
	c := testClient(t, f, Config{PageSize: 3})
	got, err := c.agreements(context.Background(), "customer_1")
	require.NoError(t, err)
	require.Len(t, got, 7)
	for i, a := range got {
		require.Equal(t, stored[i].ID, a.ID)
		require.Equal(t, "customer_pro_plan", a.PlanCode)
		require.False(t, a.Created.IsZero())
		require.True(t, a.Expires.IsZero(), "open-ended")
	}
	require.Equal(t, 3, f.count("/api/v1/billing/agreements"), "7 agreements in pages of 3")
	_, err = c.agreements(context.Background(), "customer_1")
	require.NoError(t, err)
	require.Equal(t, 1, f.count("/oauth2/token"), "the token is cached")
}

func TestTokenRenewedWhenItExpires(t *testing.T) {
	var clock atomic.Int64
	clock.Store(time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC).Unix())
	now := func() time.Time { return time.Unix(clock.Load(), 0) }
	f := newFakeKinde(t, kindemock.Options{TokenTTL: 10 * time.Minute, Now: now})
	ctx := context.Background()
	c := testClient(t, f, Config{Now: now})
	_, err := c.agreements(ctx, "customer_1")
	require.NoError(t, err)
	clock.Add(int64((9*time.Minute + 30*time.Second).Seconds())) // within a minute of the end: renewed early
	_, err = c.agreements(ctx, "customer_1")
	require.NoError(t, err)
	require.Equal(t, 2, f.count("/oauth2/token"))

	// The fake's clock runs ahead of the client's: the token is refused,
	// renewed once, and the call succeeds.
	fakeAhead := func() time.Time { return now().Add(time.Hour) }
	f2 := newFakeKinde(t, kindemock.Options{TokenTTL: 10 * time.Minute, Now: fakeAhead})
	c2 := testClient(t, f2, Config{Now: now})
	c2.token, c2.expiry = "stale-token", now().Add(time.Hour)
	_, err = c2.agreements(ctx, "customer_1")
	require.NoError(t, err)
	require.Equal(t, 1, f2.count("/oauth2/token"))
	require.Equal(t, 2, f2.count("/api/v1/billing/agreements"), "refused once, then answered")
}

func TestRateLimitResetIsWaited(t *testing.T) {
	f := newFakeKinde(t, kindemock.Options{})
	// In a synctest bubble the client waits on the fake clock: the time
	// that passes is the wait the client chose, exactly.
	synctest.Test(t, func(t *testing.T) {
		c := bubbleClient(t, f, Config{})
		ctx := context.Background()
		_, err := c.accessToken(ctx, false)
		require.NoError(t, err)
		f.SetFaults(kindemock.Faults{RequestsPerSecond: 1, RetryAfter: time.Second})
		_, err = c.agreements(ctx, "customer_1") // takes the fake's one token
		require.NoError(t, err)
		start := time.Now()
		_, err = c.agreements(ctx, "customer_1")
		require.NoError(t, err)
		// RateLimit-Reset's second, plus the client's own 1/1000 s spacing.
		require.InDelta(t, time.Second, time.Since(start), float64(2*time.Millisecond), "the retry waited RateLimit-Reset, not the 1-10 ms backoff")
		require.Equal(t, 3, f.count("/api/v1/billing/agreements"), "one 429, then the retry")
	})
}

func TestWrongCredentialsAreAnOutage(t *testing.T) {
	f := newFakeKinde(t, kindemock.Options{})
	c := testClient(t, f, Config{ClientID: "someone", ClientSecret: "wrong"})
	_, err := c.agreements(context.Background(), "customer_1")
	require.ErrorContains(t, err, "refused")
	require.False(t, isPermanent(err), "a bad secret is fixed by the operator, then retried: never ignored")
}

func isPermanent(err error) bool { return reconcile.IsPermanent(err) }
