package mock

import (
	"context"

	"github.com/billsync/billsync/reconcile"
)

var _ reconcile.SampleStore = (*SampleStore)(nil)

// SampleStore is a reconcile.SampleStore whose methods call the matching
// function.
type SampleStore struct {
	SampleLockFn    func(ctx context.Context, provider string) (context.Context, func(), error)
	PickSampleFn    func(ctx context.Context, provider string, n, recent int) ([]reconcile.SampleAccount, error)
	RecordSamplesFn func(ctx context.Context, samples []reconcile.Sample) error
}

func (s *SampleStore) SampleLock(ctx context.Context, provider string) (context.Context, func(), error) {
	return s.SampleLockFn(ctx, provider)
}

func (s *SampleStore) PickSample(ctx context.Context, provider string, n, recent int) ([]reconcile.SampleAccount, error) {
	return s.PickSampleFn(ctx, provider, n, recent)
}

func (s *SampleStore) RecordSamples(ctx context.Context, samples []reconcile.Sample) error {
	return s.RecordSamplesFn(ctx, samples)
}
