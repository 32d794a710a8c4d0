package mock

import (
	"context"
	"time"

	"github.com/billsync/billsync/reconcile"
)

var _ reconcile.FeedStore = (*FeedStore)(nil)

// FeedStore is a reconcile.FeedStore whose methods call the matching
// function (StoreDelivery: the embedded Inbox's).
type FeedStore struct {
	Inbox
	NowFn          func(ctx context.Context) (time.Time, error)
	FeedLockFn     func(ctx context.Context, provider string) (held context.Context, release func(), err error)
	OpenFeedFn     func(ctx context.Context, provider string, start time.Time) (reconcile.FeedState, error)
	FeedStoredFn   func(ctx context.Context, provider string, keys []string) (map[string]bool, error)
	SaveFeedPollFn func(ctx context.Context, provider string, p reconcile.FeedPoll) error
}

func (s *FeedStore) Now(ctx context.Context) (time.Time, error) { return s.NowFn(ctx) }

func (s *FeedStore) FeedLock(ctx context.Context, provider string) (context.Context, func(), error) {
	return s.FeedLockFn(ctx, provider)
}

func (s *FeedStore) OpenFeed(ctx context.Context, provider string, start time.Time) (reconcile.FeedState, error) {
	return s.OpenFeedFn(ctx, provider, start)
}

func (s *FeedStore) FeedStored(ctx context.Context, provider string, keys []string) (map[string]bool, error) {
	return s.FeedStoredFn(ctx, provider, keys)
}

func (s *FeedStore) SaveFeedPoll(ctx context.Context, provider string, p reconcile.FeedPoll) error {
	return s.SaveFeedPollFn(ctx, provider, p)
}

var _ reconcile.EventSource = (*EventSource)(nil)

// EventSource is a reconcile.EventSource whose ListEvents calls
// ListEventsFn.
type EventSource struct {
	ListEventsFn func(ctx context.Context, since time.Time, after string) (reconcile.FeedPage, error)
}

func (s *EventSource) ListEvents(ctx context.Context, since time.Time, after string) (reconcile.FeedPage, error) {
	return s.ListEventsFn(ctx, since, after)
}

var _ reconcile.EndpointChecker = (*EndpointChecker)(nil)

// EndpointChecker is a reconcile.EndpointChecker whose WebhookEndpoint
// calls WebhookEndpointFn.
type EndpointChecker struct {
	WebhookEndpointFn func(ctx context.Context) (id string, enabled bool, err error)
}

func (c *EndpointChecker) WebhookEndpoint(ctx context.Context) (string, bool, error) {
	return c.WebhookEndpointFn(ctx)
}
