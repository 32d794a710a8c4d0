// Package mock holds function-field fakes of reconcile's interfaces, for
// testing the worker's loop logic in milliseconds without PostgreSQL or a
// provider (the store's own behaviour is tested against a real database in
// package store). A method whose function is nil panics: a test states
// every call it expects.
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
	ApplyFn   func(ctx context.Context, job reconcile.Job, observedAt time.Time, decide func(reconcile.Account) reconcile.Change) (reconcile.Outcome, error)
	IgnoreFn  func(ctx context.Context, job reconcile.Job, observedAt time.Time, out reconcile.Outcome) (reconcile.Outcome, error)
	RetryFn   func(ctx context.Context, job reconcile.Job, observedAt time.Time, out reconcile.Outcome, delay time.Duration) (reconcile.Outcome, error)
	ReleaseFn func(ctx context.Context, worker string, jobs []reconcile.Job) error
}

func (s *Store) Claim(ctx context.Context, worker string, limit int, lease time.Duration) ([]reconcile.Job, error) {
	return s.ClaimFn(ctx, worker, limit, lease)
}

func (s *Store) Extend(ctx context.Context, worker string, jobs []reconcile.Job, lease time.Duration) (int, error) {
	return s.ExtendFn(ctx, worker, jobs, lease)
}

func (s *Store) Now(ctx context.Context) (time.Time, error) { return s.NowFn(ctx) }

func (s *Store) Apply(ctx context.Context, job reconcile.Job, observedAt time.Time, decide func(reconcile.Account) reconcile.Change) (reconcile.Outcome, error) {
	return s.ApplyFn(ctx, job, observedAt, decide)
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

var _ reconcile.Provider = (*Provider)(nil)

// Provider is a reconcile.Provider named ProviderName whose Fetch calls
// FetchFn.
type Provider struct {
	ProviderName string
	FetchFn      func(ctx context.Context, customerID string) (reconcile.Snapshot, error)
}

func (p *Provider) Name() string { return p.ProviderName }

func (p *Provider) Fetch(ctx context.Context, customerID string) (reconcile.Snapshot, error) {
	return p.FetchFn(ctx, customerID)
}
