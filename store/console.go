package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// StartSession records a console session (by its hash) valid for ttl,
// and forgets the sessions that have expired.
func (s *Store) StartSession(ctx context.Context, hash []byte, ttl time.Duration) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	_, err := s.pool.Exec(ctx, `WITH gone AS (DELETE FROM console_sessions WHERE expires_at < now())
		INSERT INTO console_sessions (session_hash, expires_at) VALUES ($1, now() + make_interval(secs => $2))`, hash, ttl.Seconds())
	if err != nil {
		return fmt.Errorf("start console session: %w", classify(err))
	}
	return nil
}

// SessionActive reports whether the console session with this hash was
// started, has not ended and has not expired.
func (s *Store) SessionActive(ctx context.Context, hash []byte) (bool, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var one int
	err := s.pool.QueryRow(ctx, `SELECT 1 FROM console_sessions WHERE session_hash = $1 AND expires_at > now()`, hash).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("console session: %w", classify(err))
	}
	return true, nil
}

// EndSession ends the console session with this hash (signing out).
func (s *Store) EndSession(ctx context.Context, hash []byte) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if _, err := s.pool.Exec(ctx, `DELETE FROM console_sessions WHERE session_hash = $1`, hash); err != nil {
		return fmt.Errorf("end console session: %w", classify(err))
	}
	return nil
}
