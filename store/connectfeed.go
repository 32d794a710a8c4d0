package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/billsync/billsync/reconcile"
)

// ConnectFeedLock takes the lease that lets one replica schedule the
// feeds of provider's connected accounts at a time (see SweepLock).
func (s *Store) ConnectFeedLock(ctx context.Context, provider string) (held context.Context, release func(), err error) {
	return s.lease(ctx, "connect-feed."+provider)
}

// DueConnectFeeds returns the feeds of at most q.Limit of provider's
// connected accounts that are served (q.Policy) and authorise the
// platform, q.Skip left out, most overdue first: never polled first, then
// by last poll, a backed-off account by the end of its backoff less
// q.Round (the poll it stands for); and how many such accounts there are,
// q.Skip's left out. One sort over the served accounts (10,000 take a few
// milliseconds), made once a batch of polls.
func (s *Store) DueConnectFeeds(ctx context.Context, provider string, q reconcile.ConnectDueQuery) ([]reconcile.ConnectFeedDue, int, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	listed, skip := texts(q.Policy.Listed), texts(q.Skip)
	rows, _ := s.pool.Query(ctx, `
		SELECT c.account, f.polled_at, f.retry_at, coalesce(f.failures, 0), count(*) OVER ()
		FROM connected_accounts c
		LEFT JOIN events_feed f ON f.provider = c.provider AND f.account = c.account
		WHERE c.provider = $1 AND c.authorized AND ($2 OR c.account = ANY($3::text[]))
		  AND c.account <> ALL($4::text[])
		ORDER BY CASE WHEN f.retry_at IS NOT NULL THEN f.retry_at - make_interval(secs => $5) ELSE f.polled_at END
			NULLS FIRST, c.account
		LIMIT $6`,
		provider, q.Policy.Mode == reconcile.ConnectAll, listed, skip, q.Round.Seconds(), q.Limit)
	served := 0
	feeds, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (d reconcile.ConnectFeedDue, err error) {
		err = row.Scan(&d.Account, &d.PolledAt, &d.RetryAt, &d.Failures, &served)
		return d, err
	})
	if err != nil {
		return nil, 0, fmt.Errorf("read the %s connected accounts due: %w", provider, classify(err))
	}
	return feeds, served, nil
}

// texts is list as a text[] parameter: an empty array for nil, which
// pgx would send as NULL (and "<> ALL(NULL)" holds for no row).
func texts(list []string) []string {
	if list == nil {
		return []string{}
	}
	return list
}

// FailConnectFeed records a failed poll of a connected account's feed:
// one more failure in a row, and no poll before retry from now. An
// account whose feed was never opened (the poll failed before) has
// nothing to back off.
func (s *Store) FailConnectFeed(ctx context.Context, provider, account string, retry time.Duration) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	_, err := s.pool.Exec(ctx, `
		UPDATE events_feed SET failures = failures + 1, retry_at = now() + make_interval(secs => $3)
		WHERE provider = $1 AND account = $2`, provider, account, retry.Seconds())
	if err != nil {
		return fmt.Errorf("record a failed %s feed poll: %w", feedName(provider, account), classify(err))
	}
	return nil
}

// ConnectFeedStats sums the feeds of provider's connected accounts
// (metrics, the console): per provider, never per account.
func (s *Store) ConnectFeedStats(ctx context.Context, provider string) (reconcile.ConnectFeedStats, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	st := reconcile.ConnectFeedStats{Provider: provider}
	err := s.pool.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE c.authorized), count(*) FILTER (WHERE NOT c.authorized),
			count(*) FILTER (WHERE c.authorized AND f.retry_at > now()),
			min(f.polled_at) FILTER (WHERE c.authorized AND f.polls > 0),
			count(*) FILTER (WHERE c.authorized AND coalesce(f.polls, 0) = 0),
			coalesce(sum(f.caught), 0)
		FROM connected_accounts c
		LEFT JOIN events_feed f ON f.provider = c.provider AND f.account = c.account
		WHERE c.provider = $1`, provider).
		Scan(&st.Authorized, &st.Deauthorized, &st.BackedOff, &st.OldestPoll, &st.NeverPolled, &st.Caught)
	if err != nil {
		return reconcile.ConnectFeedStats{}, fmt.Errorf("sum the %s connected feeds: %w", provider, classify(err))
	}
	return st, nil
}

// ConnectSweepLock takes the lease that lets one replica schedule the
// sweeps of provider's connected accounts at a time (each sweep holds its
// account's SweepLock besides).
func (s *Store) ConnectSweepLock(ctx context.Context, provider string) (held context.Context, release func(), err error) {
	return s.lease(ctx, "connect-sweep."+provider)
}

// DueConnectSweeps returns at most q.Limit of provider's connected
// accounts that are served (q.Policy) and authorise the platform, q.Skip
// left out, each with its newest run, most overdue first (see
// reconcile.ConnectSweepDue.DueAt: never swept or left running first,
// then a failed run by its end plus q.Retry, else by its start plus
// q.Every), and how many such accounts there are, q.Skip's left out. One
// lookup of sweep_runs' (provider, account, id DESC) index per served
// account.
func (s *Store) DueConnectSweeps(ctx context.Context, provider string, q reconcile.ConnectSweepQuery) ([]reconcile.ConnectSweepDue, int, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	listed, skip := texts(q.Policy.Listed), texts(q.Skip)
	rows, _ := s.pool.Query(ctx, `
		SELECT c.account, r.id, r.status, r.started_at, r.finished_at, count(*) OVER ()
		FROM connected_accounts c
		LEFT JOIN LATERAL (
			SELECT id, status, started_at, finished_at FROM sweep_runs
			WHERE provider = c.provider AND account = c.account ORDER BY id DESC LIMIT 1) r ON true
		WHERE c.provider = $1 AND c.authorized AND ($2 OR c.account = ANY($3::text[]))
		  AND c.account <> ALL($4::text[])
		ORDER BY CASE WHEN r.id IS NULL OR r.status = 'running' THEN '-infinity'::timestamptz
		              WHEN r.status = 'failed' THEN r.finished_at + make_interval(secs => $6)
		              ELSE r.started_at + make_interval(secs => $5) END, c.account
		LIMIT $7`,
		provider, q.Policy.Mode == reconcile.ConnectAll, listed, skip, q.Every.Seconds(), q.Retry.Seconds(), q.Limit)
	served := 0
	due, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (reconcile.ConnectSweepDue, error) {
		var (
			d        reconcile.ConnectSweepDue
			id       *int64
			status   *string
			started  *time.Time
			finished *time.Time
		)
		if err := row.Scan(&d.Account, &id, &status, &started, &finished, &served); err != nil {
			return d, err
		}
		if id != nil {
			d.Last = &reconcile.SweepRecord{ID: *id, Provider: provider, Account: d.Account, Status: *status,
				StartedAt: *started, FinishedAt: finished}
		}
		return d, nil
	})
	if err != nil {
		return nil, 0, fmt.Errorf("read the %s connected accounts' sweeps due: %w", provider, classify(err))
	}
	return due, served, nil
}

var _ reconcile.ConnectSweepStore = (*Store)(nil)

// ConnectSweepStats sums the sweeps of provider's connected accounts that
// authorise the platform (metrics): per provider, never per account.
func (s *Store) ConnectSweepStats(ctx context.Context, provider string) (reconcile.ConnectSweepStats, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	st := reconcile.ConnectSweepStats{Provider: provider}
	err := s.pool.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE r.id IS NULL), count(*) FILTER (WHERE r.status = 'failed'), min(ok.started_at)
		FROM connected_accounts c
		LEFT JOIN LATERAL (SELECT id, status FROM sweep_runs
			WHERE provider = c.provider AND account = c.account ORDER BY id DESC LIMIT 1) r ON true
		LEFT JOIN LATERAL (SELECT started_at FROM sweep_runs
			WHERE provider = c.provider AND account = c.account AND status = 'succeeded' ORDER BY id DESC LIMIT 1) ok ON true
		WHERE c.provider = $1 AND c.authorized`, provider).
		Scan(&st.NeverSwept, &st.Failing, &st.OldestSuccess)
	if err != nil {
		return reconcile.ConnectSweepStats{}, fmt.Errorf("sum the %s connected sweeps: %w", provider, classify(err))
	}
	return st, nil
}
