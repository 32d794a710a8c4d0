package kinde

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	kindemock "github.com/billsync/billsync/mocks/kinde"
	"github.com/billsync/billsync/reconcile"
)

// fakeKinde serves a fake Kinde and counts requests by path.
type fakeKinde struct {
	*kindemock.Server
	URL   string
	mu    sync.Mutex
	calls map[string]int
}

func newFakeKinde(t *testing.T, opts kindemock.Options) *fakeKinde {
	t.Helper()
	s, err := kindemock.New(opts)
	require.NoError(t, err)
	f := &fakeKinde{Server: s, calls: map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.calls[r.URL.Path]++
		f.mu.Unlock()
		s.ServeHTTP(w, r)
	}))
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
	cfg.Domain = f.URL
	if cfg.ClientID == "" {
		cfg.ClientID, cfg.ClientSecret = kindemock.DefaultClientID, kindemock.DefaultClientSecret
	}
	cfg.RateLimit = 1000
	cfg.RetryWaitMin, cfg.RetryWaitMax = time.Millisecond, 10*time.Millisecond
	c, err := NewClient(cfg)
	require.NoError(t, err)
	return c
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
	c := testClient(t, f, Config{})
	ctx := context.Background()
	_, err := c.accessToken(ctx, false)
	require.NoError(t, err)
	f.SetFaults(kindemock.Faults{RequestsPerSecond: 1, RetryAfter: time.Second})
	start := time.Now()
	for range 2 {
		_, err = c.agreements(ctx, "customer_1")
		require.NoError(t, err)
	}
	require.GreaterOrEqual(t, time.Since(start), 900*time.Millisecond, "the second call waited RateLimit-Reset")
	require.Equal(t, 3, f.count("/api/v1/billing/agreements"), "one 429, then the retry")
}

func TestWrongCredentialsAreAnOutage(t *testing.T) {
	f := newFakeKinde(t, kindemock.Options{})
	c := testClient(t, f, Config{ClientID: "someone", ClientSecret: "wrong"})
	_, err := c.agreements(context.Background(), "customer_1")
	require.ErrorContains(t, err, "refused")
	require.False(t, isPermanent(err), "a bad secret is fixed by the operator, then retried: never ignored")
}

func isPermanent(err error) bool { return reconcile.IsPermanent(err) }
