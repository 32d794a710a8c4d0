package store

import (
	"context"
	"fmt"
	"time"

	"github.com/billsync/billsync/reconcile"
)

// EventsFeedLock takes the lease that lets one events feed of provider poll at a
// time across every replica (see SweepLock): the platform's own feed.
func (s *Store) EventsFeedLock(ctx context.Context, provider string) (held context.Context, release func(), err error) {
	return s.lease(ctx, "feed."+provider)
}

// OpenEventsFeed returns the feed state of provider's account ("" the
// platform's own, else a connected account), first recording start as
// the cursor of a feed that has never polled: a poller that dies before
// its first poll is saved starts again from the same point, and the
// events it stores are counted as caught from the first (StoreReceipt
// counts them in the feed's row).
func (s *Store) OpenEventsFeed(ctx context.Context, provider, account string, start time.Time) (reconcile.EventsFeedState, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	_, err := s.pool.Exec(ctx, `
		INSERT INTO events_feed (provider, account, cursor_at) VALUES ($1, $2, $3)
		ON CONFLICT (provider, account) DO NOTHING`, provider, account, start)
	if err != nil {
		return reconcile.EventsFeedState{}, fmt.Errorf("open %s feed: %w", feedName(provider, account), classify(err))
	}
	return s.feedState(ctx, provider, account)
}

// feedName names a feed in errors: the provider, and the connected account.
func feedName(provider, account string) string {
	if account == "" {
		return provider
	}
	return provider + " " + account
}

// EventsFeedState returns the state of provider's own feed (the
// platform's); reconcile.ErrNotFound before its first poll.
func (s *Store) EventsFeedState(ctx context.Context, provider string) (reconcile.EventsFeedState, error) {
	return s.feedState(ctx, provider, "")
}

// ConnectedFeedState returns the state of a connected account's feed;
// reconcile.ErrNotFound before its first poll.
func (s *Store) ConnectedFeedState(ctx context.Context, provider, account string) (reconcile.EventsFeedState, error) {
	return s.feedState(ctx, provider, account)
}

func (s *Store) feedState(ctx context.Context, provider, account string) (reconcile.EventsFeedState, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	st := reconcile.EventsFeedState{Provider: provider, Account: account}
	var endpoint *string
	err := s.pool.QueryRow(ctx, `
		SELECT cursor_at, newest_event_at, polled_at, polls, caught, undelivered, endpoint_id, endpoint_enabled
		FROM events_feed WHERE provider = $1 AND account = $2`, provider, account).
		Scan(&st.Cursor, &st.NewestEventAt, &st.PolledAt, &st.Polls, &st.Caught, &st.Undelivered, &endpoint, &st.EndpointEnabled)
	if err != nil {
		return reconcile.EventsFeedState{}, fmt.Errorf("read %s feed state: %w", feedName(provider, account), classify(err))
	}
	if endpoint != nil {
		st.EndpointID = *endpoint
	}
	return st, nil
}

// EventsFeedStates returns every provider's own feed state (metrics,
// console); connected accounts' feeds are not listed one by one.
func (s *Store) EventsFeedStates(ctx context.Context) ([]reconcile.EventsFeedState, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, `
		SELECT provider, cursor_at, newest_event_at, polled_at, polls, caught, undelivered, coalesce(endpoint_id, ''), endpoint_enabled
		FROM events_feed WHERE account = '' ORDER BY provider`)
	if err != nil {
		return nil, fmt.Errorf("read feed states: %w", classify(err))
	}
	defer rows.Close()
	var out []reconcile.EventsFeedState
	for rows.Next() {
		var st reconcile.EventsFeedState
		if err := rows.Scan(&st.Provider, &st.Cursor, &st.NewestEventAt, &st.PolledAt, &st.Polls, &st.Caught,
			&st.Undelivered, &st.EndpointID, &st.EndpointEnabled); err != nil {
			return nil, fmt.Errorf("read feed states: %w", classify(err))
		}
		out = append(out, st)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read feed states: %w", classify(err))
	}
	return out, nil
}

// EventsFeedStored returns which of keys (dedupe keys of provider's events) the
// feed has stored already: the event has a receipt from the feed.
func (s *Store) EventsFeedStored(ctx context.Context, provider string, keys []string) (map[string]bool, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	stored := make(map[string]bool, len(keys))
	if len(keys) == 0 {
		return stored, nil
	}
	rows, err := s.pool.Query(ctx, `
		SELECT e.dedupe_key FROM inbox_events e
		WHERE e.provider = $1 AND e.dedupe_key = ANY($2)
		  AND EXISTS (SELECT 1 FROM receipts r WHERE r.event_id = e.id AND r.source = 'feed')`, provider, keys)
	if err != nil {
		return nil, fmt.Errorf("read events the %s feed stored: %w", provider, classify(err))
	}
	defer rows.Close()
	for rows.Next() {
		var key string
		if err := rows.Scan(&key); err != nil {
			return nil, fmt.Errorf("read events the %s feed stored: %w", provider, classify(err))
		}
		stored[key] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read events the %s feed stored: %w", provider, classify(err))
	}
	return stored, nil
}

// SaveEventsFeedPoll records a finished poll of the feed of provider's
// p.Account: its cursor, its health (the webhook endpoint's status only
// when it was read), and the end of any backoff.
func (s *Store) SaveEventsFeedPoll(ctx context.Context, provider string, p reconcile.EventsFeedPoll) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	_, err := s.pool.Exec(ctx, `
		INSERT INTO events_feed AS f (provider, account, cursor_at, newest_event_at, polls, undelivered, endpoint_id, endpoint_enabled)
		VALUES ($1, $8, $2, $3, 1, $4, CASE WHEN $5 THEN NULLIF($6, '') END, CASE WHEN $5 THEN $7::boolean END)
		ON CONFLICT (provider, account) DO UPDATE SET
			cursor_at        = greatest(f.cursor_at, excluded.cursor_at),
			newest_event_at  = greatest(f.newest_event_at, excluded.newest_event_at),
			polled_at        = now(),
			polls            = f.polls + 1,
			undelivered      = excluded.undelivered,
			endpoint_id      = CASE WHEN $5 THEN excluded.endpoint_id ELSE f.endpoint_id END,
			endpoint_enabled = CASE WHEN $5 THEN excluded.endpoint_enabled ELSE f.endpoint_enabled END,
			failures         = 0,
			retry_at         = NULL`,
		provider, p.Cursor, nullTime(p.NewestEventAt), p.Undelivered, p.EndpointChecked, p.EndpointID, p.EndpointEnabled, p.Account)
	if err != nil {
		return fmt.Errorf("record %s feed poll: %w", feedName(provider, p.Account), classify(err))
	}
	return nil
}
