package mock

import (
	"context"
	"time"

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

var _ reconcile.ConnectFeedStore = (*ConnectFeedStore)(nil)

// ConnectFeedStore is a reconcile.ConnectFeedStore whose methods call the
// matching function (the embedded fakes' for theirs).
type ConnectFeedStore struct {
	EventsFeedStore
	ConnectedAccountStore
	ConnectFeedLockFn func(ctx context.Context, provider string) (held context.Context, release func(), err error)
	DueConnectFeedsFn func(ctx context.Context, provider string, q reconcile.ConnectDueQuery) ([]reconcile.ConnectFeedDue, int, error)
	FailConnectFeedFn func(ctx context.Context, provider, account string, retry time.Duration) error
}

func (s *ConnectFeedStore) ConnectFeedLock(ctx context.Context, provider string) (context.Context, func(), error) {
	return s.ConnectFeedLockFn(ctx, provider)
}

func (s *ConnectFeedStore) DueConnectFeeds(ctx context.Context, provider string, q reconcile.ConnectDueQuery) ([]reconcile.ConnectFeedDue, int, error) {
	return s.DueConnectFeedsFn(ctx, provider, q)
}

func (s *ConnectFeedStore) FailConnectFeed(ctx context.Context, provider, account string, retry time.Duration) error {
	return s.FailConnectFeedFn(ctx, provider, account, retry)
}

var _ reconcile.ConnectSource = (*ConnectSource)(nil)

// ConnectSource is a reconcile.ConnectSource whose methods call the
// matching function.
type ConnectSource struct {
	ListAccountsFn        func(ctx context.Context, after string) (accounts []string, next string, err error)
	ListConnectedEventsFn func(ctx context.Context, account string, since time.Time, after string) (reconcile.EventsFeedPage, error)
}

func (s *ConnectSource) ListAccounts(ctx context.Context, after string) ([]string, string, error) {
	return s.ListAccountsFn(ctx, after)
}

func (s *ConnectSource) ListConnectedEvents(ctx context.Context, account string, since time.Time, after string) (reconcile.EventsFeedPage, error) {
	return s.ListConnectedEventsFn(ctx, account, since, after)
}

var _ reconcile.ConnectSweepStore = (*ConnectSweepStore)(nil)

// ConnectSweepStore is a reconcile.ConnectSweepStore whose methods call the
// matching function.
type ConnectSweepStore struct {
	NowFn              func(ctx context.Context) (time.Time, error)
	ConnectSweepLockFn func(ctx context.Context, provider string) (held context.Context, release func(), err error)
	DueConnectSweepsFn func(ctx context.Context, provider string, q reconcile.ConnectSweepQuery) ([]reconcile.ConnectSweepDue, int, error)
}

func (s *ConnectSweepStore) Now(ctx context.Context) (time.Time, error) { return s.NowFn(ctx) }

func (s *ConnectSweepStore) ConnectSweepLock(ctx context.Context, provider string) (context.Context, func(), error) {
	return s.ConnectSweepLockFn(ctx, provider)
}

func (s *ConnectSweepStore) DueConnectSweeps(ctx context.Context, provider string, q reconcile.ConnectSweepQuery) ([]reconcile.ConnectSweepDue, int, error) {
	return s.DueConnectSweepsFn(ctx, provider, q)
}
