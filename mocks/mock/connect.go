package mock

import (
	"context"

	"github.com/billsync/billsync/reconcile"
)

// ConnectedAccountStore is a reconcile.ConnectedAccountStore.
type ConnectedAccountStore struct {
	SaveAuthorizationsFn func(ctx context.Context, provider string, words []reconcile.Authorization) error
	ConnectedAccountsFn  func(ctx context.Context, provider string) ([]reconcile.ConnectedAccount, error)
}

func (s *ConnectedAccountStore) SaveAuthorizations(ctx context.Context, provider string, words []reconcile.Authorization) error {
	return s.SaveAuthorizationsFn(ctx, provider, words)
}

func (s *ConnectedAccountStore) ConnectedAccounts(ctx context.Context, provider string) ([]reconcile.ConnectedAccount, error) {
	return s.ConnectedAccountsFn(ctx, provider)
}

var _ reconcile.ConnectedAccountStore = (*ConnectedAccountStore)(nil)
