package store

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
)

// queueChannel is the LISTEN/NOTIFY channel that wakes workers.
const queueChannel = "billsync_queue"

// notifyEvery bounds NOTIFY traffic under a burst of webhooks: workers
// drain in batches, so one wake-up per interval is enough; the poll
// fallback covers anything in between.
const notifyEvery = 20 * time.Millisecond

// notify tells listening workers that work is due, at most once per
// notifyEvery: one suppressed within the interval is sent at its end, so
// work stored just after a worker's claim is not left to the workers'
// poll. Best effort: a lost notification costs one poll interval.
func (s *Store) notify(ctx context.Context) {
	now := time.Now().UnixNano()
	last := s.lastNotify.Load()
	if now-last < int64(notifyEvery) || !s.lastNotify.CompareAndSwap(last, now) {
		if s.trailing.CompareAndSwap(false, true) {
			time.AfterFunc(notifyEvery, func() {
				s.trailing.Store(false)
				s.notify(context.WithoutCancel(ctx))
			})
		}
		return
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if _, err := s.pool.Exec(ctx, `SELECT pg_notify($1, '')`, queueChannel); err != nil {
		s.lastNotify.Store(0) // let the next caller try
	}
}

// Listen calls wake whenever new work is announced, until ctx is done. It
// holds one connection of its own (on the direct URL when there is one)
// and reconnects after failures. Without a connection that can LISTEN
// (Connection().Listen false) it returns at once: callers poll.
func (s *Store) Listen(ctx context.Context, logger *slog.Logger, wake func()) {
	s.listen(ctx, logger, queueChannel, wake)
}

// ListenChanges calls wake whenever an account change commits (NOTIFY on
// ChangesChannel), until ctx is done; like Listen, it reconnects after
// failures, and callers poll as a fallback.
func (s *Store) ListenChanges(ctx context.Context, logger *slog.Logger, wake func()) {
	s.listen(ctx, logger, ChangesChannel, wake)
}

func (s *Store) listen(ctx context.Context, logger *slog.Logger, channel string, wake func()) {
	if s.listenCfg == nil {
		// A transaction pooler drops notifications (LISTEN lives on a
		// session it does not keep): callers poll every PollWithoutListen.
		return
	}
	for ctx.Err() == nil {
		err := s.listenOnce(ctx, channel, wake)
		if ctx.Err() != nil {
			return
		}
		logger.Warn("listener lost its connection; polling until it is back", slog.String("channel", channel), slog.Any("error", err))
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

func (s *Store) listenOnce(ctx context.Context, channel string, wake func()) error {
	// A connection of its own, never the pool's: it carries LISTEN state
	// for as long as it lives.
	conn, err := pgx.ConnectConfig(ctx, s.listenCfg)
	if err != nil {
		return classify(err)
	}
	defer conn.Close(context.WithoutCancel(ctx)) //nolint:errcheck // closing a dead listener
	if _, err := conn.Exec(ctx, `LISTEN `+pgx.Identifier{channel}.Sanitize()); err != nil {
		return classify(err)
	}
	wake() // work may have arrived while we were not listening
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return classify(err)
		}
		wake()
	}
}
