// Package mock holds function-field fakes of every interface reconcile
// defines (TestEveryInterfaceHasAFake keeps it so): Store, OnDemandStore,
// SweepStore, Inbox, Provider, Lister and Splitter here; FeedStore,
// EventSource and EndpointChecker in eventsfeed.go; SpendStore and Spender in
// spend.go; DeliveryStore and AppSender in appdeliver.go. They test the
// loop logic of reconcile's worker, sweeper, feed, spending and deliverer
// in milliseconds without PostgreSQL or a provider (the store's own
// behaviour is tested against a real database in package store, and the
// whole path in mocks/e2e). A method whose function is nil panics: a test
// states every call it expects.
//
// It is for tests only: nothing in billsync's product path may import it.
package mock

import (
	"context"
	"time"

	"github.com/billsync/billsync/reconcile"
)

var _ reconcile.Store = (*Store)(nil)

// Store is a reconcile.Store whose methods call the matching function.
type Store struct {
	ClaimFn   func(ctx context.Context, worker string, limit int, lease time.Duration) ([]reconcile.Job, error)
	ExtendFn  func(ctx context.Context, worker string, jobs []reconcile.Job, lease time.Duration) (int, error)
	NowFn     func(ctx context.Context) (time.Time, error)
	ApplyFn   func(ctx context.Context, job reconcile.Job, observedAt time.Time, d reconcile.Decider) (reconcile.Outcome, error)
	IgnoreFn  func(ctx context.Context, job reconcile.Job, observedAt time.Time, out reconcile.Outcome) (reconcile.Outcome, error)
	RetryFn   func(ctx context.Context, job reconcile.Job, observedAt time.Time, out reconcile.Outcome, delay time.Duration) (reconcile.Outcome, error)
	ReleaseFn func(ctx context.Context, worker string, jobs []reconcile.Job) error
	ResolveFn func(ctx context.Context, job reconcile.Job, customerID string) (reconcile.Job, bool, error)
}

func (s *Store) Claim(ctx context.Context, worker string, limit int, lease time.Duration) ([]reconcile.Job, error) {
	return s.ClaimFn(ctx, worker, limit, lease)
}

func (s *Store) Extend(ctx context.Context, worker string, jobs []reconcile.Job, lease time.Duration) (int, error) {
	return s.ExtendFn(ctx, worker, jobs, lease)
}

func (s *Store) Now(ctx context.Context) (time.Time, error) { return s.NowFn(ctx) }

func (s *Store) Apply(ctx context.Context, job reconcile.Job, observedAt time.Time, d reconcile.Decider) (reconcile.Outcome, error) {
	return s.ApplyFn(ctx, job, observedAt, d)
}

func (s *Store) Ignore(ctx context.Context, job reconcile.Job, observedAt time.Time, out reconcile.Outcome) (reconcile.Outcome, error) {
	return s.IgnoreFn(ctx, job, observedAt, out)
}

func (s *Store) Retry(ctx context.Context, job reconcile.Job, observedAt time.Time, out reconcile.Outcome, delay time.Duration) (reconcile.Outcome, error) {
	return s.RetryFn(ctx, job, observedAt, out, delay)
}

func (s *Store) Release(ctx context.Context, worker string, jobs []reconcile.Job) error {
	return s.ReleaseFn(ctx, worker, jobs)
}

func (s *Store) Resolve(ctx context.Context, job reconcile.Job, customerID string) (reconcile.Job, bool, error) {
	return s.ResolveFn(ctx, job, customerID)
}

var _ reconcile.Provider = (*Provider)(nil)

// Provider is a reconcile.Provider named ProviderName whose Fetch calls
// FetchFn. Its Budget is BudgetFn's, or unknown (the zero Budget) when
// BudgetFn is nil: a worker then keeps its bound in flight.
type Provider struct {
	ProviderName string
	FetchFn      func(ctx context.Context, customerID string) (reconcile.Snapshot, error)
	BudgetFn     func() reconcile.Budget
	CustomerOfFn func(ctx context.Context, obj reconcile.Related) (string, error)
}

func (p *Provider) Name() string { return p.ProviderName }

func (p *Provider) Budget() reconcile.Budget {
	if p.BudgetFn == nil {
		return reconcile.Budget{}
	}
	return p.BudgetFn()
}

func (p *Provider) Fetch(ctx context.Context, customerID string) (reconcile.Snapshot, error) {
	return p.FetchFn(ctx, customerID)
}

func (p *Provider) CustomerOf(ctx context.Context, obj reconcile.Related) (string, error) {
	return p.CustomerOfFn(ctx, obj)
}

var (
	_ reconcile.Store         = (*OnDemandStore)(nil)
	_ reconcile.OnDemandStore = (*OnDemandStore)(nil)
)

// OnDemandStore is a Store that also reconciles one customer on demand
// (resync, replay): the worker finds OnDemandStore on its Store.
type OnDemandStore struct {
	Store
	HoldFn    func(ctx context.Context, provider, customerID, trigger, holder string, lease time.Duration) (reconcile.Job, error)
	PreviewFn func(ctx context.Context, job reconcile.Job, observedAt time.Time, d reconcile.Decider) (reconcile.Outcome, error)
}

func (s *OnDemandStore) Hold(ctx context.Context, provider, customerID, trigger, holder string, lease time.Duration) (reconcile.Job, error) {
	return s.HoldFn(ctx, provider, customerID, trigger, holder, lease)
}

func (s *OnDemandStore) Preview(ctx context.Context, job reconcile.Job, observedAt time.Time, d reconcile.Decider) (reconcile.Outcome, error) {
	return s.PreviewFn(ctx, job, observedAt, d)
}

var _ reconcile.SweepStore = (*SweepStore)(nil)

// SweepStore is a reconcile.SweepStore whose methods call the matching
// function.
type SweepStore struct {
	NowFn            func(ctx context.Context) (time.Time, error)
	SweepLockFn      func(ctx context.Context, provider, account string) (held context.Context, release func(), err error)
	StartSweepFn     func(ctx context.Context, provider, account, kind string) (reconcile.SweepRun, error)
	ImportedFn       func(ctx context.Context, provider, account string) (bool, error)
	SweepPageFn      func(ctx context.Context, run reconcile.SweepRun, customers []string) (int, error)
	FinishSweepFn    func(ctx context.Context, run reconcile.SweepRun, failure error) error
	ApplySweptPageFn func(ctx context.Context, jobs []reconcile.Job, observedAt time.Time, deciders []reconcile.Decider) ([]reconcile.SweptOutcome, error)
	EnqueueUnsweptFn func(ctx context.Context, runID int64, provider, account string, from time.Time, pace time.Duration) (int, error)
	EnqueueFoundFn   func(ctx context.Context, provider, trigger string, found []reconcile.Found, from time.Time, pace time.Duration) (int, time.Time, error)
	SweptAccountsFn  func(ctx context.Context, provider string, customers []string) (map[string]reconcile.Account, error)
	GrantedFn        func(ctx context.Context, accountIDs []int64, grants []reconcile.Grant) ([]int64, error)
}

func (s *SweepStore) Now(ctx context.Context) (time.Time, error) { return s.NowFn(ctx) }

func (s *SweepStore) SweepLock(ctx context.Context, provider, account string) (context.Context, func(), error) {
	return s.SweepLockFn(ctx, provider, account)
}

func (s *SweepStore) StartSweep(ctx context.Context, provider, account, kind string) (reconcile.SweepRun, error) {
	return s.StartSweepFn(ctx, provider, account, kind)
}

func (s *SweepStore) Imported(ctx context.Context, provider, account string) (bool, error) {
	return s.ImportedFn(ctx, provider, account)
}

func (s *SweepStore) SweepPage(ctx context.Context, run reconcile.SweepRun, customers []string) (int, error) {
	return s.SweepPageFn(ctx, run, customers)
}

func (s *SweepStore) FinishSweep(ctx context.Context, run reconcile.SweepRun, failure error) error {
	return s.FinishSweepFn(ctx, run, failure)
}

func (s *SweepStore) ApplySweptPage(ctx context.Context, jobs []reconcile.Job, observedAt time.Time, deciders []reconcile.Decider) ([]reconcile.SweptOutcome, error) {
	return s.ApplySweptPageFn(ctx, jobs, observedAt, deciders)
}

func (s *SweepStore) EnqueueUnswept(ctx context.Context, runID int64, provider, account string, from time.Time, pace time.Duration) (int, error) {
	return s.EnqueueUnsweptFn(ctx, runID, provider, account, from, pace)
}

func (s *SweepStore) EnqueueFound(ctx context.Context, provider, trigger string, found []reconcile.Found, from time.Time,
	pace time.Duration) (int, time.Time, error) {
	return s.EnqueueFoundFn(ctx, provider, trigger, found, from, pace)
}

func (s *SweepStore) SweptAccounts(ctx context.Context, provider string, customers []string) (map[string]reconcile.Account, error) {
	return s.SweptAccountsFn(ctx, provider, customers)
}

func (s *SweepStore) Granted(ctx context.Context, accountIDs []int64, grants []reconcile.Grant) ([]int64, error) {
	return s.GrantedFn(ctx, accountIDs, grants)
}

var _ reconcile.Inbox = (*Inbox)(nil)

// Inbox is a reconcile.Inbox whose StoreDelivery calls StoreDeliveryFn.
type Inbox struct {
	StoreReceiptFn func(ctx context.Context, d reconcile.Receipt) (reconcile.Stored, error)
}

func (i *Inbox) StoreReceipt(ctx context.Context, d reconcile.Receipt) (reconcile.Stored, error) {
	return i.StoreReceiptFn(ctx, d)
}

var _ reconcile.Lister = (*Lister)(nil)

// Lister is a reconcile.Lister (one that does not split: its sweep lists
// one page at a time) whose ListPage calls ListPageFn.
type Lister struct {
	ListPageFn func(ctx context.Context, cursor string) ([]reconcile.Snapshot, string, bool, error)
}

func (l *Lister) ListPage(ctx context.Context, cursor string) ([]reconcile.Snapshot, string, bool, error) {
	return l.ListPageFn(ctx, cursor)
}

// Finder is a reconcile.Finder.
type Finder struct {
	FindPageFn func(ctx context.Context, cursor string) ([]reconcile.Found, string, bool, error)
}

func (f *Finder) FindPage(ctx context.Context, cursor string) ([]reconcile.Found, string, bool, error) {
	return f.FindPageFn(ctx, cursor)
}

var (
	_ reconcile.Finder   = (*Finder)(nil)
	_ reconcile.Lister   = (*Splitter)(nil)
	_ reconcile.Splitter = (*Splitter)(nil)
)

// Progresser is a reconcile.Progresser whose Progress calls ProgressFn.
type Progresser struct {
	ProgressFn func(cursors []string) float64
}

func (p *Progresser) Progress(cursors []string) float64 { return p.ProgressFn(cursors) }

var _ reconcile.Progresser = (*Progresser)(nil)

// Splitter is a reconcile.Lister that is a reconcile.Splitter too: the
// sweep lists its parts at once. Its ListBudget is ListBudgetFn's, or
// unknown when nil (an adapting sweep then lists
// reconcile.DefaultSweepParallel parts at once).
type Splitter struct {
	Lister
	SplitFn      func(ctx context.Context, next string) (kept, given string, err error)
	ListBudgetFn func() reconcile.Budget
}

func (s *Splitter) ListBudget() reconcile.Budget {
	if s.ListBudgetFn == nil {
		return reconcile.Budget{}
	}
	return s.ListBudgetFn()
}

func (s *Splitter) Split(ctx context.Context, next string) (string, string, error) {
	return s.SplitFn(ctx, next)
}
