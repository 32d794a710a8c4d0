package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"

	"github.com/billsync/billsync/providers/stripe"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store"
	"github.com/billsync/billsync/store/storetest"
	"github.com/billsync/billsync/store/storetest/tb"
)

// limitedConnect is a Stripe of many connected accounts that limits like
// Stripe: a global rate over every request, and a rate per connected
// account (Stripe-Account); past either it answers 429 with
// Stripe-Rate-Limited-Reason (the global bucket holds a tenth of a
// second's requests, as a token bucket does). Each events list on behalf of an account
// takes latency and lists nothing. It records the order of the accounts'
// polls and counts the 429s.
type limitedConnect struct {
	accounts   []string
	latency    time.Duration
	global     *rate.Limiter
	perAccount rate.Limit
	hot        string // an account whose own limit is spent: every request of it answers 429

	mu         sync.Mutex
	limiters   map[string]*rate.Limiter
	polls      []string
	first      map[string]time.Time
	global429  int
	account429 int
}

func newLimitedConnect(n int, latency time.Duration, global float64, perAccount rate.Limit, hot string) *limitedConnect {
	s := &limitedConnect{latency: latency, global: rate.NewLimiter(rate.Limit(global), int(global/10)), perAccount: perAccount, hot: hot,
		limiters: map[string]*rate.Limiter{}, first: map[string]time.Time{}}
	for i := range n {
		s.accounts = append(s.accounts, fmt.Sprintf("acct_%05d", i))
	}
	if hot != "" {
		s.accounts = append(s.accounts, hot)
	}
	return s
}

func (s *limitedConnect) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	if r.URL.Path == "/v1/accounts" {
		s.listAccounts(w, r)
		return
	}
	account := r.Header.Get("Stripe-Account")
	if r.URL.Path != "/v1/events" || account == "" {
		http.NotFound(w, r)
		return
	}
	s.mu.Lock()
	lim, ok := s.limiters[account]
	if !ok {
		lim = rate.NewLimiter(s.perAccount, 1)
		s.limiters[account] = lim
	}
	reason := ""
	switch {
	case !s.global.Allow():
		reason = "global-rate"
		s.global429++
	case account == s.hot || !lim.Allow():
		// Stripe limits each account on its own: to it, the global rate.
		reason = "global-rate"
		s.account429++
	default:
		if r.URL.Query().Get("starting_after") == "" {
			s.polls = append(s.polls, account)
			if _, ok := s.first[account]; !ok {
				s.first[account] = time.Now()
			}
		}
	}
	s.mu.Unlock()
	if reason != "" {
		w.Header().Set("Stripe-Rate-Limited-Reason", reason)
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprint(w, `{"error":{"type":"invalid_request_error","code":"rate_limit","message":"Too many requests"}}`)
		return
	}
	time.Sleep(s.latency)
	fmt.Fprint(w, `{"object":"list","has_more":false,"data":[]}`)
}

// listAccounts pages the accounts, 100 a page, after starting_after.
func (s *limitedConnect) listAccounts(w http.ResponseWriter, r *http.Request) {
	i := 0
	if after := r.URL.Query().Get("starting_after"); after != "" {
		for i < len(s.accounts) && s.accounts[i] != after {
			i++
		}
		i++
	}
	end := min(i+100, len(s.accounts))
	fmt.Fprintf(w, `{"object":"list","has_more":%t,"data":[`, end < len(s.accounts))
	for j := i; j < end; j++ {
		if j > i {
			fmt.Fprint(w, ",")
		}
		fmt.Fprintf(w, `{"id":%q,"object":"account"}`, s.accounts[j])
	}
	fmt.Fprint(w, `]}`)
}

// pollCount is how many polls the fake answered, and how many accounts
// it answered at least once.
func (s *limitedConnect) pollCount() (polls, accounts int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.polls), len(s.first)
}

// connectRun runs a Connect feed over st against srv with the client's
// rates (global, per operation) until stop.
func connectRun(t tb.TB, st *store.Store, srv *httptest.Server, global, perOp float64, interval time.Duration) (stop func()) {
	client, err := stripe.NewClient(stripe.Config{APIKey: "sk_test_connect", BaseURL: srv.URL, RateLimit: global,
		OperationRateLimit: perOp, RetryMax: 2, RetryWaitMin: 10 * time.Millisecond, RetryWaitMax: 50 * time.Millisecond,
		Connect: reconcile.ConnectPolicy{Mode: reconcile.ConnectAll}})
	require.NoError(t, err)
	f, err := reconcile.NewConnectFeed(reconcile.ConnectFeedConfig{Provider: stripe.Provider, Source: client, Store: st,
		Policy: reconcile.ConnectPolicy{Mode: reconcile.ConnectAll}, Interval: interval})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.Run(ctx) }()
	return func() { cancel(); <-done }
}

// TestConnectFeedThousandAccounts: 1,000 connected accounts (and one whose
// own limit is spent) at a Stripe with a global and a per-account limit,
// polled by the default pool at a round shorter than the rate allows, so
// the pool never rests. Every account is polled once before any is polled
// twice (oldest first: none starves), the client's limiter keeps every
// request under the global limit (no 429 from it at all), and the account
// that answers 429 costs its retries once and is then backed off alone.
func TestConnectFeedThousandAccounts(t *testing.T) {
	const n, pool = 1000, reconcile.DefaultConnectPool
	st := storetest.NewStore(t)
	fake := newLimitedConnect(n, 10*time.Millisecond, 250, 5, "acct_hot")
	srv := httptest.NewServer(fake)
	defer srv.Close()
	began := time.Now()
	stop := connectRun(t, st, srv, 200, 200, time.Second)
	defer stop()

	var round time.Duration
	tb.WaitFor(t, "every account polled, and a second round begun", func() bool {
		polls, accounts := fake.pollCount()
		if accounts == n && round == 0 {
			round = time.Since(began)
		}
		return accounts == n && polls >= n+n/5
	})
	stop()
	fake.mu.Lock()
	defer fake.mu.Unlock()
	seen := map[string]bool{}
	for i, a := range fake.polls {
		if seen[a] {
			// A poll may start a few places out of order (the pool's
			// polls race to the fake), never a round early.
			require.GreaterOrEqual(t, i, n-pool, "%s polled a second time before every account was polled once", a)
			break
		}
		seen[a] = true
	}
	require.Zero(t, fake.global429, "requests beyond the global limit")
	require.LessOrEqual(t, fake.account429, 3, "the account that answered 429 was not backed off (its first poll: 1 attempt and 2 retries)")
	stats, err := st.ConnectFeedStats(context.Background(), stripe.Provider)
	require.NoError(t, err)
	require.Equal(t, n+1, stats.Authorized)
	require.Equal(t, 1, stats.BackedOff)
	t.Logf("first round over %d accounts: %s (%d polls/s)", n, round.Round(time.Millisecond), int(float64(n)/round.Seconds()))
}

// BenchmarkConnectRound measures how fast the Connect feed gets through
// its accounts at Stripe's default limits as the client keeps them (25
// requests a second for the events list, 100 global) and a Stripe
// latency, with 1,000 and 10,000 accounts authorised: it times the first
// 1,000 polls (a whole round of 1,000 accounts; a tenth of 10,000: a
// round's polls, each of an account never polled, until the round ends)
// and reports the polls a second and the round over every account at
// that pace. Each run takes about 40 s:
//
//	go test -run '^$' -bench ConnectRound -benchtime 1x ./mocks/e2e/
func BenchmarkConnectRound(b *testing.B) {
	for _, accounts := range []int{1000, 10_000} {
		for _, latency := range []time.Duration{50 * time.Millisecond, 300 * time.Millisecond} {
			b.Run("accounts="+strconv.Itoa(accounts)+"/latency="+latency.String(), func(b *testing.B) {
				for range b.N {
					st := storetest.NewStore(b)
					fake := newLimitedConnect(accounts, latency, stripe.LiveRate, stripe.OperationRate, "")
					srv := httptest.NewServer(fake)
					stop := connectRun(b, st, srv, stripe.LiveRate, stripe.OperationRate, time.Minute)
					const measured = 1000
					var start time.Time
					tb.WaitUpTo(b, 5*time.Minute, "the polls measured", func() bool {
						polls, _ := fake.pollCount()
						if polls >= 1 && start.IsZero() {
							start = time.Now()
						}
						return polls >= measured
					})
					took := time.Since(start)
					stop()
					srv.Close()
					// measured polls, measured-1 intervals between them.
					perSec := float64(measured-1) / took.Seconds()
					b.ReportMetric(perSec, "polls/s")
					b.ReportMetric(float64(accounts)/perSec, "s/round")
				}
			})
		}
	}
}
