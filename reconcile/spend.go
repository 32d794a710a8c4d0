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
}

// SpendWindow is the window reads are allocated over (Stripe's rolling
// 30 days).
const SpendWindow = 30 * 24 * time.Hour

// Spend is what the store holds of a provider's budget.
type Spend struct {
	Now time.Time // the database's clock
	// Reads are the reads of every replica over the window, by operation,
	// and Since the start of the oldest day they cover.
	Reads        map[string]int64
	Since        time.Time
	Transactions int64 // payments stored over the window
	Replicas     int   // replicas running the provider's worker lately, this one included when it does
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

// SpendView is a provider's budget as a replica last read it.
type SpendView struct {
	Provider string
	Spend
	Allocation float64 // reads allowed over the window
	Total      int64   // reads over the window, every operation
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
}

// Days is Covered in days.
func (v SpendView) Days() float64 { return v.Covered.Hours() / 24 }

// Over reports whether the projection exceeds the allocation.
func (v SpendView) Over() bool { return v.Reported && v.Projected > v.Allocation }

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
		last: SpendView{Provider: cfg.Client.Name(), Allocation: cfg.Client.Allocation(0)}}, nil
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
	v := viewOf(c.Name(), sp, c.Allocation(sp.Transactions))
	s.mu.Lock()
	s.last = v
	warn := v.Over() && !s.over
	s.over = v.Over()
	s.mu.Unlock()
	if warn {
		s.log.WarnContext(ctx, "budget: at this pace the reads of 30 days exceed the provider's allocation",
			slog.Float64("projected", v.Projected), slog.Float64("allocation", v.Allocation))
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

// Allocation is the last view's allocation: the events feed sizes its
// interval by it.
func (s *Spending) Allocation() float64 { return s.View().Allocation }

// viewOf computes a view from the record.
func viewOf(provider string, sp Spend, allocation float64) SpendView {
	v := SpendView{Provider: provider, Spend: sp, Allocation: allocation, Reported: true}
	for _, n := range sp.Reads {
		v.Total += n
	}
	v.Covered = SpendWindow
	if !sp.Since.IsZero() {
		v.Covered = min(SpendWindow, max(sp.Now.Sub(sp.Since), time.Hour))
	}
	v.Projected = float64(v.Total) * float64(SpendWindow) / float64(v.Covered)
	return v
}
