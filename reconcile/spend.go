package reconcile

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// A provider's budget is the whole account's, not a process's: every
// replica reads from one global rate, one rate per API operation and one
// monthly read allocation. Each replica's Spending reports what its client
// read to the store every few seconds and learns what all of them read
// and how many run workers: its client then takes its share of the rates
// (1/n of each with n replicas running workers), and the allocation, the
// reads and their projection are seen by every replica alike.
//
// Stripe Connect: a platform's reads on behalf of its connected accounts
// (those sent with Stripe-Account) draw from an allocation of their own,
// 500 a transaction of the connected accounts', apart from the platform's
// own reads and transactions. So the reads are counted in two budgets: a
// read on behalf of an account is reported under its operation's
// ConnectOperation name ("connect GET /v1/events"), in the same record as
// the platform's, and the payments of connected accounts' customers are
// counted apart. The records written before hold no such name: they read
// as the platform's, as they were.

// Spender is a provider client whose budget every replica shares.
type Spender interface {
	Name() string
	// TakeReads returns the reads (GETs answered) made since the last
	// call, by API operation; never nil.
	TakeReads() map[string]int64
	// SetReplicas shares the client's rates among n replicas.
	SetReplicas(n int)
	// Allocation is the reads the provider allows over SpendWindow,
	// given the transactions stored over it.
	Allocation(transactions int64) float64
	// ConnectAllocation is the reads on behalf of connected accounts the
	// provider allows over SpendWindow, given the connected accounts'
	// transactions stored over it.
	ConnectAllocation(transactions int64) float64
}

// connectReads starts the name of an operation read on behalf of a
// connected account.
const connectReads = "connect "

// ConnectOperation is the name op's reads on behalf of a connected account
// are counted under: apart from the platform's own reads of op.
func ConnectOperation(op string) string { return connectReads + op }

// splitReads splits reads by operation into the platform's own and those
// on behalf of connected accounts (by their operation's own name).
func splitReads(reads map[string]int64) (platform, connect map[string]int64) {
	platform, connect = map[string]int64{}, map[string]int64{}
	for op, n := range reads {
		if o, ok := strings.CutPrefix(op, connectReads); ok {
			connect[o] += n
			continue
		}
		platform[op] += n
	}
	return platform, connect
}

// SpendWindow is the window reads are allocated over (Stripe's rolling
// 30 days).
const SpendWindow = 30 * 24 * time.Hour

// Spend is what the store holds of a provider's budget.
type Spend struct {
	Now time.Time // the database's clock
	// Reads are the reads of every replica over the window, by operation,
	// and Since the start of the oldest day they cover.
	// The reads on behalf of connected accounts are under their
	// ConnectOperation names.
	Reads        map[string]int64
	Since        time.Time
	Transactions int64 // the platform's own payments stored over the window
	// ConnectTransactions are the connected accounts' customers'
	// payments stored over the window.
	ConnectTransactions int64
	Replicas            int // replicas running the provider's worker lately, this one included when it does
}

// SpendStore keeps the budget's record.
type SpendStore interface {
	// ReportSpend adds reads (by operation) to today's, marks holder as a
	// replica running the provider's worker when worker is set, and
	// returns the record as it stood before this report.
	ReportSpend(ctx context.Context, provider, holder string, reads map[string]int64, worker bool) (Spend, error)
	// LeaveSpend drops holder from the replicas: the others take its
	// share at their next report.
	LeaveSpend(ctx context.Context, provider, holder string) error
}

// SpendView is a provider's budget as a replica last read it: the
// platform's own (Spend's Reads and Transactions, Allocation, Total,
// Projected) and, apart, the reads on behalf of its connected accounts
// (Connect).
type SpendView struct {
	Provider string
	// Spend's Reads are the platform's own (no ConnectOperation name).
	Spend
	Allocation float64 // reads allowed over the window
	Total      int64   // the platform's own reads over the window, every operation
	// Projected is Total at the pace of the days recorded, over a whole
	// window: what the window will have read if the pace holds. With
	// fewer than 30 days recorded it is the days recorded scaled up
	// (at least an hour, so a first minute's reads do not project
	// wildly).
	Projected float64
	// Covered is how much of the window the record covers (at least an
	// hour): Projected is Total scaled from it to the whole window.
	Covered  time.Duration
	Reported bool // a report has succeeded
	// Connect is the budget of the reads on behalf of connected accounts,
	// over the same window.
	Connect ConnectSpend
}

// ConnectSpend is the budget of a platform's reads on behalf of its
// connected accounts: the fields mean what SpendView's do for the
// platform's own, with the connected accounts' reads (by operation) and
// transactions.
type ConnectSpend struct {
	Reads        map[string]int64
	Transactions int64
	Allocation   float64
	Total        int64
	Projected    float64
}

// Days is Covered in days.
func (v SpendView) Days() float64 { return v.Covered.Hours() / 24 }

// Over reports whether the projection exceeds the allocation.
func (v SpendView) Over() bool { return v.Reported && v.Projected > v.Allocation }

// ConnectOver reports whether the connected accounts' projection exceeds
// their allocation.
func (v SpendView) ConnectOver() bool {
	return v.Reported && v.Connect.Projected > v.Connect.Allocation
}

// DefaultSpendPeriod is how often a replica reports its reads and learns
// the others': the longest a new replica's share overlaps the old ones'
// (until each has seen it), and the most reads a kill -9 loses.
const DefaultSpendPeriod = 5 * time.Second

// SpendingConfig configures a Spending.
type SpendingConfig struct {
	Store  SpendStore
	Client Spender
	// Worker: this process runs the provider's worker, so it takes a
	// share of the rates (a CLI that only sweeps or resyncs does not).
	Worker bool
	// Holder names this replica in the store; default host:pid:random.
	Holder string
	Period time.Duration // default DefaultSpendPeriod
	// OnReport, when set, sees each view (metrics).
	OnReport func(SpendView)
	Logger   *slog.Logger
}

// Spending reports a client's reads and shares its budget.
type Spending struct {
	cfg  SpendingConfig
	log  *slog.Logger
	mu   sync.Mutex
	last SpendView
	over bool // the last view's projection exceeded the allocation (warned once)
	// connectOver: the same for the reads on behalf of connected accounts.
	connectOver bool
	// unsent are reads a failed report could not send: the next sends them.
	unsent map[string]int64
}

// NewSpending checks cfg and returns a Spending.
func NewSpending(cfg SpendingConfig) (*Spending, error) {
	if cfg.Store == nil || cfg.Client == nil {
		return nil, errors.New("spending: store and client are required")
	}
	if cfg.Period < 0 {
		return nil, errors.New("spending: period must not be negative")
	}
	cfg.Period = cmp.Or(cfg.Period, DefaultSpendPeriod)
	if cfg.Holder == "" {
		host, _ := os.Hostname()
		cfg.Holder = host + ":" + strconv.Itoa(os.Getpid()) + ":" + strconv.FormatUint(rand.Uint64()%1e6, 10)
	}
	log := cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	return &Spending{cfg: cfg, log: log.With(slog.String("provider", cfg.Client.Name())),
		last: SpendView{Provider: cfg.Client.Name(), Allocation: cfg.Client.Allocation(0),
			Connect: ConnectSpend{Allocation: cfg.Client.ConnectAllocation(0)}}}, nil
}

// Run reports every period until ctx ends, then once more (the reads of
// the last period) and leaves the replicas, so the others take its share
// at once. A failed report is logged and its reads kept for the next.
func (s *Spending) Run(ctx context.Context) {
	t := time.NewTicker(s.cfg.Period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			s.leave(context.WithoutCancel(ctx))
			return
		case <-t.C:
		}
		if _, err := s.Report(ctx); err != nil && ctx.Err() == nil {
			s.log.WarnContext(ctx, "budget: report failed; its reads go with the next", slog.Any("error", err))
		}
	}
}

// leave reports the last reads and drops this replica from the shares,
// within a few seconds.
func (s *Spending) leave(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := s.report(ctx, false); err != nil {
		s.log.WarnContext(ctx, "budget: last report failed", slog.Any("error", err))
	}
	if err := s.cfg.Store.LeaveSpend(ctx, s.cfg.Client.Name(), s.cfg.Holder); err != nil {
		s.log.WarnContext(ctx, "budget: leaving the shares failed; the others take this replica's share once it is not seen", slog.Any("error", err))
	}
}

// Report sends the reads made since the last report, shares the rates
// among the replicas it learns of, and returns the view. Call it once
// before the worker starts, so the first fetches already take this
// replica's share.
func (s *Spending) Report(ctx context.Context) (SpendView, error) {
	return s.report(ctx, s.cfg.Worker)
}

func (s *Spending) report(ctx context.Context, worker bool) (SpendView, error) {
	c := s.cfg.Client
	reads := c.TakeReads()
	s.mu.Lock()
	for op, n := range s.unsent {
		reads[op] += n
	}
	s.unsent = nil
	s.mu.Unlock()
	sp, err := s.cfg.Store.ReportSpend(ctx, c.Name(), s.cfg.Holder, reads, worker)
	if err != nil {
		s.mu.Lock()
		s.unsent = reads
		s.mu.Unlock()
		return s.View(), fmt.Errorf("report %s reads: %w", c.Name(), err)
	}
	// The record read is from before this report: add it.
	for op, n := range reads {
		sp.Reads[op] += n
	}
	if worker {
		c.SetReplicas(sp.Replicas)
	}
	v := viewOf(c.Name(), sp, c.Allocation(sp.Transactions), c.ConnectAllocation(sp.ConnectTransactions))
	s.mu.Lock()
	s.last = v
	warn, warnConnect := v.Over() && !s.over, v.ConnectOver() && !s.connectOver
	s.over, s.connectOver = v.Over(), v.ConnectOver()
	s.mu.Unlock()
	if warn {
		s.log.WarnContext(ctx, "budget: at this pace the reads of 30 days exceed the provider's allocation",
			slog.Float64("projected", v.Projected), slog.Float64("allocation", v.Allocation))
	}
	if warnConnect {
		s.log.WarnContext(ctx, "budget: at this pace the reads on behalf of connected accounts over 30 days exceed their allocation",
			slog.Float64("projected", v.Connect.Projected), slog.Float64("allocation", v.Connect.Allocation))
	}
	if s.cfg.OnReport != nil {
		s.cfg.OnReport(v)
	}
	return v, nil
}

// View returns the last view (before the first report: no reads, the
// allocation of no transaction).
func (s *Spending) View() SpendView {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

// Allocation is the last view's allocation of the platform's own reads:
// the events feed sizes its interval by it.
func (s *Spending) Allocation() float64 { return s.View().Allocation }

// ConnectAllocation is the last view's allocation of the reads on behalf
// of connected accounts: the Connect feed sizes its round by it.
func (s *Spending) ConnectAllocation() float64 { return s.View().Connect.Allocation }

// viewOf computes a view from the record: the platform's reads and those
// on behalf of connected accounts apart, each against its allocation.
func viewOf(provider string, sp Spend, allocation, connectAllocation float64) SpendView {
	platform, connect := splitReads(sp.Reads)
	sp.Reads = platform
	v := SpendView{Provider: provider, Spend: sp, Allocation: allocation, Reported: true,
		Connect: ConnectSpend{Reads: connect, Transactions: sp.ConnectTransactions, Allocation: connectAllocation}}
	v.Total, v.Connect.Total = totalReads(platform), totalReads(connect)
	v.Covered = SpendWindow
	if !sp.Since.IsZero() {
		v.Covered = min(SpendWindow, max(sp.Now.Sub(sp.Since), time.Hour))
	}
	v.Projected = float64(v.Total) * float64(SpendWindow) / float64(v.Covered)
	v.Connect.Projected = float64(v.Connect.Total) * float64(SpendWindow) / float64(v.Covered)
	return v
}

func totalReads(reads map[string]int64) int64 {
	var n int64
	for _, r := range reads {
		n += r
	}
	return n
}
