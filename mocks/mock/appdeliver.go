package mock

import (
	"context"
	"time"

	"github.com/billsync/billsync/reconcile"
)

var _ reconcile.AppDeliveryStore = (*AppDeliveryStore)(nil)

// AppDeliveryStore is a reconcile.AppDeliveryStore whose methods call the
// matching function.
type AppDeliveryStore struct {
	RegisterEndpointsFn func(ctx context.Context, endpoints []string) error
	FanOutFn            func(ctx context.Context, endpoints []string, limit int, imports bool) (more bool, err error)
	ClaimDeliveriesFn   func(ctx context.Context, holder string, endpoints []string, limit, imports int, lease time.Duration) ([]reconcile.AppDelivery, error)
	RecordDeliveryFn    func(ctx context.Context, holder string, d reconcile.AppDelivery, a reconcile.AppDeliveryAttempt, status string, retryIn time.Duration) error
}

func (s *AppDeliveryStore) RegisterEndpoints(ctx context.Context, endpoints []string) error {
	return s.RegisterEndpointsFn(ctx, endpoints)
}

func (s *AppDeliveryStore) FanOut(ctx context.Context, endpoints []string, limit int, imports bool) (bool, error) {
	return s.FanOutFn(ctx, endpoints, limit, imports)
}

func (s *AppDeliveryStore) ClaimDeliveries(ctx context.Context, holder string, endpoints []string, limit, imports int, lease time.Duration) ([]reconcile.AppDelivery, error) {
	return s.ClaimDeliveriesFn(ctx, holder, endpoints, limit, imports, lease)
}

func (s *AppDeliveryStore) RecordDelivery(ctx context.Context, holder string, d reconcile.AppDelivery, a reconcile.AppDeliveryAttempt, status string, retryIn time.Duration) error {
	return s.RecordDeliveryFn(ctx, holder, d, a, status, retryIn)
}

var _ reconcile.AppSender = (*AppSender)(nil)

// AppSender is a reconcile.AppSender whose Send calls SendFn.
type AppSender struct {
	SendFn func(ctx context.Context, d reconcile.AppDelivery) reconcile.AppDeliveryAttempt
}

func (s *AppSender) Send(ctx context.Context, d reconcile.AppDelivery) reconcile.AppDeliveryAttempt {
	return s.SendFn(ctx, d)
}
