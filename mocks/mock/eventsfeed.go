package mock

import (
	"context"
	"time"

	"github.com/billsync/billsync/reconcile"
)

var _ reconcile.EventsFeedStore = (*EventsFeedStore)(nil)

// EventsFeedStore is a reconcile.EventsFeedStore whose methods call the matching
// function (StoreDelivery: the embedded Inbox's).
type EventsFeedStore struct {
	Inbox
	NowFn                func(ctx context.Context) (time.Time, error)
	EventsFeedLockFn     func(ctx context.Context, provider string) (held context.Context, release func(), err error)
	OpenEventsFeedFn     func(ctx context.Context, provider, account string, start time.Time) (reconcile.EventsFeedState, error)
	EventsFeedStoredFn   func(ctx context.Context, provider string, keys []string) (map[string]bool, error)
	SaveEventsFeedPollFn func(ctx context.Context, provider string, p reconcile.EventsFeedPoll) error
}

func (s *EventsFeedStore) Now(ctx context.Context) (time.Time, error) { return s.NowFn(ctx) }

func (s *EventsFeedStore) EventsFeedLock(ctx context.Context, provider string) (context.Context, func(), error) {
	return s.EventsFeedLockFn(ctx, provider)
}

func (s *EventsFeedStore) OpenEventsFeed(ctx context.Context, provider, account string, start time.Time) (reconcile.EventsFeedState, error) {
	return s.OpenEventsFeedFn(ctx, provider, account, start)
}

func (s *EventsFeedStore) EventsFeedStored(ctx context.Context, provider string, keys []string) (map[string]bool, error) {
	return s.EventsFeedStoredFn(ctx, provider, keys)
}

func (s *EventsFeedStore) SaveEventsFeedPoll(ctx context.Context, provider string, p reconcile.EventsFeedPoll) error {
	return s.SaveEventsFeedPollFn(ctx, provider, p)
}

var _ reconcile.EventSource = (*EventSource)(nil)

// EventSource is a reconcile.EventSource whose ListEvents calls
// ListEventsFn.
type EventSource struct {
	ListEventsFn func(ctx context.Context, since time.Time, after string) (reconcile.EventsFeedPage, error)
}

func (s *EventSource) ListEvents(ctx context.Context, since time.Time, after string) (reconcile.EventsFeedPage, error) {
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
