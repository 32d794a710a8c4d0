package mock

import (
	"context"

	"github.com/billsync/billsync/reconcile"
)

var _ reconcile.SpendStore = (*SpendStore)(nil)

// SpendStore is a reconcile.SpendStore whose methods call the matching
// function.
type SpendStore struct {
	ReportSpendFn func(ctx context.Context, provider, holder string, reads map[string]int64, worker bool) (reconcile.Spend, error)
	LeaveSpendFn  func(ctx context.Context, provider, holder string) error
}

func (s *SpendStore) ReportSpend(ctx context.Context, provider, holder string, reads map[string]int64, worker bool) (reconcile.Spend, error) {
	return s.ReportSpendFn(ctx, provider, holder, reads, worker)
}

func (s *SpendStore) LeaveSpend(ctx context.Context, provider, holder string) error {
	return s.LeaveSpendFn(ctx, provider, holder)
}

var _ reconcile.Spender = (*Spender)(nil)

// Spender is a reconcile.Spender named SpenderName whose methods call the
// matching function.
type Spender struct {
	SpenderName   string
	TakeReadsFn   func() map[string]int64
	SetReplicasFn func(n int)
	AllocationFn  func(transactions int64) float64
	// ConnectAllocationFn: nil allows the reads on behalf of connected
	// accounts what AllocationFn allows the platform's.
	ConnectAllocationFn func(transactions int64) float64
}

func (s *Spender) Name() string { return s.SpenderName }

func (s *Spender) TakeReads() map[string]int64 { return s.TakeReadsFn() }

func (s *Spender) SetReplicas(n int) { s.SetReplicasFn(n) }

func (s *Spender) Allocation(transactions int64) float64 { return s.AllocationFn(transactions) }

func (s *Spender) ConnectAllocation(transactions int64) float64 {
	if s.ConnectAllocationFn == nil {
		return s.AllocationFn(transactions)
	}
	return s.ConnectAllocationFn(transactions)
}
