package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/billsync/billsync/app"
	stripemock "github.com/billsync/billsync/mocks/stripe"
	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store"
)

// The connect part (issue 29, "Say how long one round over 1,000 and
// 10,000 accounts takes within the budget, measured"): the Stripe Connect
// accounts' events feeds as serve runs them (app.New with -stripe-connect
// all and serve's defaults: a pool that adapts from 8, the client at the run's rates,
// the read allocation's floor), at a fake Stripe with Stripe's limits on
// a live key and a provider latency. Run only with -only connect.
//
// What is measured and what is computed:
//   - the round: every served account polled once, timed from the first
//     poll the fake answers to the last; at the first round every
//     account is due at once, so the pool runs flat out. Measured whole
//     when an account count is at most Config.ConnectPolls (1,000 by
//     default); past it, the first ConnectPolls polls are timed (each of
//     an account never polled, with every account served, so each
//     dispatch sorts them all) and the round is computed from their rate.
//   - the baseline, measured in the same run on the smallest account
//     count: the same feed polling one account at a time (a pool of 1,
//     as a single feed polls), its rate over ConnectBaselinePolls polls;
//     its round computed from that rate.
//   - the round the read budget allows (reconcile.ConnectRound, as
//     billsync reports it) at the allocation's floor and the allocation
//     at which the budget's round is the one measured: computed.
const (
	// connectPolls is how many polls are timed at an account count
	// larger than it (Config.ConnectPolls).
	connectPolls = 1000
	// connectBaselinePolls is how many polls the baseline times
	// (Config.ConnectBaselinePolls): 15 s at 300 ms.
	connectBaselinePolls = 50
)

// connectSizes are the account counts measured by default
// (Config.ConnectSizes).
var connectSizes = []int{1000, 10000}

// ConnectResult is the connect part at one provider latency.
type ConnectResult struct {
	LatencyMs     float64 `json:"provider_latency_ms"`
	Pool          int     `json:"pool"`
	RateLimit     float64 `json:"rate_limit"`
	OperationRate float64 `json:"operation_rate"` // the events list's, every account's polls together
	// Baseline is one poll at a time, measured.
	Baseline ConnectBaseline `json:"baseline"`
	Rounds   []ConnectRound  `json:"rounds"`
}

// ConnectBaseline is the feed at a pool of 1 over Accounts accounts.
type ConnectBaseline struct {
	Accounts    int     `json:"accounts"`
	Polls       int     `json:"polls"`
	Seconds     float64 `json:"seconds"`
	PollsPerSec float64 `json:"polls_per_sec"`
}

// ConnectRound is one round over Accounts accounts at serve's pool.
type ConnectRound struct {
	Accounts int `json:"accounts"`
	// StartSeconds is the leader's start (its listing of the connected
	// accounts, 100 a page) until the first poll answered: measured.
	StartSeconds float64 `json:"start_seconds"`
	Polls        int     `json:"polls"`   // polls timed (measured)
	Pool         int     `json:"pool"`    // the polls the feed ran at once at the round's end (it adapts)
	Seconds      float64 `json:"seconds"` // first poll to the last timed (measured)
	PollsPerSec  float64 `json:"polls_per_sec"`
	// RoundSeconds is every account polled once: measured when Polls is
	// Accounts (Measured), else Accounts ÷ PollsPerSec (computed).
	RoundSeconds float64 `json:"round_seconds"`
	Measured     bool    `json:"measured"`
	// LimitShare is PollsPerSec ÷ the events list's rate (the rate bound).
	LimitShare float64 `json:"limit_share"`
	// BaselineRoundSeconds is Accounts at the baseline's rate (computed),
	// Speedup the baseline's round ÷ RoundSeconds.
	BaselineRoundSeconds float64 `json:"baseline_round_seconds"`
	Speedup              float64 `json:"speedup"`
	// BudgetRoundSeconds is the round billsync reports at serve's
	// defaults (the allocation's floor); AllocationForRound the read
	// allocation whose round is RoundSeconds: the budget bounds the
	// round below it, the rate above it (computed).
	BudgetRoundSeconds float64 `json:"budget_round_seconds"`
	Allocation         float64 `json:"allocation"`
	AllocationForRound float64 `json:"allocation_for_round"`
	// Requests and RateLimited are billsync's at the fake during the run.
	Requests    int64 `json:"requests"`
	RateLimited int64 `json:"rate_limited"`
}

// pollClock records when the fake answered each first page of a
// connected account's events list, and whose.
type pollClock struct {
	mu       sync.Mutex
	at       []time.Time
	accounts []string
}

func (c *pollClock) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		account := r.Header.Get("Stripe-Account")
		if r.Method != http.MethodGet || r.URL.Path != "/v1/events" || account == "" || r.URL.Query().Has("starting_after") {
			next.ServeHTTP(w, r)
			return
		}
		if testenv.AnswerStatus(next, w, r) != http.StatusOK {
			return
		}
		c.mu.Lock()
		c.at = append(c.at, time.Now())
		c.accounts = append(c.accounts, account)
		c.mu.Unlock()
	})
}

// first returns the times of the first n polls, and whether there were n.
func (c *pollClock) first(n int) ([]time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.at) < n {
		return nil, false
	}
	return append([]time.Time(nil), c.at[:n]...), true
}

// distinct is how many accounts the first n polls were of.
func (c *pollClock) distinct(n int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	seen := map[string]bool{}
	for _, a := range c.accounts[:min(n, len(c.accounts))] {
		seen[a] = true
	}
	return len(seen)
}

// connectFake starts a fake Stripe with n connected accounts, its polls
// clocked, limited as Stripe limits a live key and slowed by the run's
// latency. The caller closes it.
func connectFake(st *store.Store, cfg Config, n int, clock *pollClock) (*testenv.Env, error) {
	h, err := testenv.New(testenv.Stripe, testenv.Options{Store: st, NoIntake: true, Wrap: clock.wrap,
		Stripe: testenv.StripeOptions{Fake: stripemock.Options{APIKey: benchKey}, Client: cfg.client(),
			Connect: reconcile.ConnectPolicy{Mode: reconcile.ConnectAll}},
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, err
	}
	for i := range n {
		if _, err := h.Stripe.Fake.AddAccount(stripemock.AccountOptions{ID: fmt.Sprintf("acct_%06d", i)}); err != nil {
			h.Close()
			return nil, err
		}
	}
	h.Stripe.Fake.SetFaults(stripemock.Faults{Latency: cfg.Latency})
	if err := h.Stripe.Fake.SetLimits(cfg.limits()); err != nil {
		h.Close()
		return nil, err
	}
	h.Stripe.Fake.ResetUsage()
	return h, nil
}

// timePolls waits until the clock has polls polls, up to within, and
// returns the first's time and the time from it to the last.
func timePolls(ctx context.Context, clock *pollClock, polls int, within time.Duration) (first time.Time, took time.Duration, err error) {
	deadline := time.Now().Add(within)
	for {
		if at, ok := clock.first(polls); ok {
			return at[0], at[polls-1].Sub(at[0]), nil
		}
		if time.Now().After(deadline) {
			return time.Time{}, 0, fmt.Errorf("connect bench: %d polls not answered within %s", polls, within)
		}
		select {
		case <-ctx.Done():
			return time.Time{}, 0, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// connectWithin bounds a timing: every poll at a tenth of the rate
// allowed, and a minute to start.
func connectWithin(cfg Config, polls int) time.Duration {
	return time.Minute + time.Duration(float64(polls)/cfg.connectRate()*10*float64(time.Second))
}

// connectRate is the rate the pool's polls may take: the events list's,
// within the global one.
func (c Config) connectRate() float64 { return min(c.RateLimit, c.OperationRate) }

// runConnectBaseline measures the feed polling one account at a time
// over n accounts.
func runConnectBaseline(ctx context.Context, st *store.Store, cfg Config, n int) (ConnectBaseline, error) {
	out := ConnectBaseline{Accounts: n, Polls: min(n, cfg.ConnectBaselinePolls)}
	clock := &pollClock{}
	h, err := connectFake(st, cfg, n, clock)
	if err != nil {
		return out, err
	}
	defer h.Close()
	feed, err := reconcile.NewConnectFeed(reconcile.ConnectFeedConfig{Provider: h.Stripe.Client.Name(), Source: h.Stripe.Client,
		Store: st, Policy: reconcile.ConnectPolicy{Mode: reconcile.ConnectAll}, Pool: 1,
		Allocation: func() float64 { return h.Stripe.Client.Allocation(0) }})
	if err != nil {
		return out, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); feed.Run(runCtx) }()
	defer func() { cancel(); <-done }()
	_, took, err := timePolls(ctx, clock, out.Polls, connectWithin(cfg, out.Polls)*10)
	if err != nil {
		return out, err
	}
	out.Seconds = round(took.Seconds(), 2)
	out.PollsPerSec = round(float64(out.Polls-1)/took.Seconds(), 2)
	cfg.Logger.Info("bench connect: one poll at a time", slog.Int("accounts", n), slog.Float64("polls_per_sec", out.PollsPerSec))
	return out, nil
}

// runConnectRound measures one round over n accounts with serve's
// assembly and defaults; base is the baseline measured at this latency.
func runConnectRound(ctx context.Context, st *store.Store, cfg Config, n int, base ConnectBaseline) (ConnectRound, error) {
	out := ConnectRound{Accounts: n, Polls: min(n, cfg.ConnectPolls)}
	clock := &pollClock{}
	h, err := connectFake(st, cfg, n, clock)
	if err != nil {
		return out, err
	}
	defer h.Close()
	// serve -stripe-connect all, its other settings its defaults, its
	// Stripe client built from them on the fake's URL.
	a, err := app.New(ctx, app.Config{StripeAPIKey: benchKey, StripeAPIURL: h.URL, StripeRateLimit: cfg.RateLimit,
		StripeOperationRate: cfg.OperationRate, EventsPoll: reconcile.DefaultFeedInterval,
		StripeConnect: reconcile.ConnectPolicy{Mode: reconcile.ConnectAll}},
		app.Parts{Store: st, Plans: testenv.Plans(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return out, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	began := time.Now()
	stop := a.Start(runCtx)
	first, took, err := timePolls(ctx, clock, out.Polls, connectWithin(cfg, n))
	view := a.ConnectFeed().View()
	cancel()
	if serr := stop(context.WithoutCancel(ctx)); err == nil {
		err = serr
	}
	if err != nil {
		return out, err
	}
	usage := h.Stripe.Fake.KeyUsage(benchKey)
	out.Requests, out.RateLimited = usage.Requests, usage.RateLimited
	out.StartSeconds = round(first.Sub(began).Seconds(), 2)
	out.Seconds = round(took.Seconds(), 2)
	// polls timed, polls-1 intervals between them.
	perSec := float64(out.Polls-1) / took.Seconds()
	out.PollsPerSec = round(perSec, 2)
	out.Measured = out.Polls == n
	out.RoundSeconds = out.Seconds
	if !out.Measured {
		out.RoundSeconds = round(float64(n)/perSec, 2)
	}
	out.LimitShare = round(perSec/cfg.connectRate(), 3)
	if base.PollsPerSec > 0 {
		out.BaselineRoundSeconds = round(float64(n)/base.PollsPerSec, 1)
		out.Speedup = round(out.BaselineRoundSeconds/out.RoundSeconds, 2)
	}
	if view.Served != n {
		return out, fmt.Errorf("connect bench: the feed served %d accounts of %d", view.Served, n)
	}
	// The first round: every account due at once, each polled once.
	if d := clock.distinct(out.Polls); d != out.Polls {
		return out, fmt.Errorf("connect bench: the first %d polls were of %d accounts: an account was polled twice in the first round", out.Polls, d)
	}
	out.Pool = view.Pool
	out.Allocation = h.Stripe.Client.Allocation(0)
	out.BudgetRoundSeconds = view.Round.Seconds()
	out.AllocationForRound = round(float64(n)*reconcile.ReadWindow.Seconds()/(reconcile.DefaultFeedShare*out.RoundSeconds), 0)
	cfg.Logger.Info("bench connect: round", slog.Int("accounts", n), slog.Int("pool", out.Pool), slog.Float64("polls_per_sec", out.PollsPerSec),
		slog.Float64("round_seconds", out.RoundSeconds))
	return out, nil
}

// printConnect writes the connect part, each figure marked measured or
// computed.
func printConnect(w io.Writer, c ConnectResult) {
	pools := make([]string, len(c.Rounds))
	for i, r := range c.Rounds {
		pools[i] = fmt.Sprint(r.Pool)
	}
	fmt.Fprintf(w, "CONNECT: every connected account's events feed as serve runs it (-stripe-connect all, a pool from %d adapting to the rate, at the rounds' ends %s; oldest first); fake Stripe latency %.0f ms, limits %.0f req/s global and %.0f req/s each operation (the events list: every account's polls together)\n",
		c.Pool, strings.Join(pools, ", "), c.LatencyMs, c.RateLimit, c.OperationRate)
	b := c.Baseline
	fmt.Fprintf(w, "  baseline, one poll at a time (a pool of 1) over %d accounts: %d polls in %.2f s = %.2f polls/s (measured)\n",
		b.Accounts, b.Polls, b.Seconds, b.PollsPerSec)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "  accounts\tstart s\tpolls timed\tpolls/s\tof the rate\tround s\t\tone at a time s\tspeedup\tbudget's round (floor)\tallocation for this round\t429s\t")
	for _, r := range c.Rounds {
		how := "measured"
		if !r.Measured {
			how = fmt.Sprintf("computed from %d polls", r.Polls)
		}
		fmt.Fprintf(tw, "  %d\t%.1f\t%d\t%.2f\t%.1f%%\t%.1f\t%s\t%.1f\t%.1f×\t%s\t%.0fM reads/30 d\t%d of %d\t\n",
			r.Accounts, r.StartSeconds, r.Polls, r.PollsPerSec, r.LimitShare*100, r.RoundSeconds, how, r.BaselineRoundSeconds,
			r.Speedup, time.Duration(r.BudgetRoundSeconds*float64(time.Second)), r.AllocationForRound/1e6, r.RateLimited, r.Requests)
	}
	tw.Flush()
	fmt.Fprintln(w, "  start: the leader's listing of the accounts (100 a page) to the first poll; one at a time, the budget's round and the allocation: computed")
	fmt.Fprintln(w)
}
