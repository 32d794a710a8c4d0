package store

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/billsync/billsync/reconcile"
)

// DefaultLeaseTTL is how long a lease outlives its holder's last renewal:
// a leader killed -9 hands over within it. The holder renews every third of
// it, so two renewals in a row may fail (a database restart, a pooler's
// reconnect) before the lease is in danger.
const DefaultLeaseTTL = 15 * time.Second

// holderName says who holds a lease, for an operator reading the leases
// table: the host and the process.
var holderName = func() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s:%d", host, os.Getpid())
}()

// lease takes the lease name for the caller until release is called. Every
// step is one statement on whatever connection the pool gives (nothing is
// held between them), so it works through a transaction pooler, unlike a
// session advisory lock. held ends with cause reconcile.ErrLeaseLost when
// the lease is lost while held (and with context.Canceled at release): a renewal finds
// a successor, or none has succeeded for the whole TTL (so a successor may
// be running). err is reconcile.ErrLeaseHeld when another holder's lease
// has not run out.
func (s *Store) lease(ctx context.Context, name string) (held context.Context, release func(), err error) {
	token := rand.Text()
	bctx, cancel := s.bound(ctx)
	defer cancel()
	var got string
	err = s.pool.QueryRow(bctx, `
		INSERT INTO leases AS l (name, token, holder, expires_at)
		VALUES ($1, $2, $3, now() + make_interval(secs => $4))
		ON CONFLICT (name) DO UPDATE SET token = excluded.token, holder = excluded.holder,
			acquired_at = now(), renewed_at = now(), expires_at = excluded.expires_at
		WHERE l.expires_at <= now()
		RETURNING token`, name, token, holderName, s.leaseTTL.Seconds()).Scan(&got)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil, fmt.Errorf("lease %s: %w", name, reconcile.ErrLeaseHeld)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("lease %s: %w", name, classify(err))
	}
	// The lease is ours from before the statement was sent: count its TTL
	// from then, so the holder never believes it holds a lease the
	// database has already let go.
	taken := time.Now()
	// held follows the lease, not the caller's ctx: a sweep started by a
	// request outlives it.
	held, lose := context.WithCancelCause(context.WithoutCancel(ctx))
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.renewLease(held, lose, stop, name, token, taken)
	}()
	release = func() {
		close(stop)
		<-done
		lose(context.Canceled)
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.timeout)
		defer cancel()
		// Best effort: a release that fails leaves the lease to run out.
		_, _ = s.pool.Exec(ctx, `DELETE FROM leases WHERE name = $1 AND token = $2`, name, token)
	}
	return held, release, nil
}

// renewLease extends the lease every third of its TTL until stop closes,
// and ends held once the lease is lost. sent is when the last successful
// renewal (or the take) was sent: the lease runs out TTL after it at the
// earliest, so the holder gives up once renewals have failed for half of
// that (each is bounded by a sixth), before a successor can take it.
func (s *Store) renewLease(held context.Context, lose context.CancelCauseFunc, stop <-chan struct{}, name, token string, sent time.Time) {
	t := time.NewTicker(s.leaseTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-held.Done():
			return
		case <-t.C:
		}
		at := time.Now()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(held), s.leaseTTL/6)
		tag, err := s.pool.Exec(ctx, `
			UPDATE leases SET renewed_at = now(), expires_at = now() + make_interval(secs => $3)
			WHERE name = $1 AND token = $2`, name, token, s.leaseTTL.Seconds())
		cancel()
		switch {
		case err == nil && tag.RowsAffected() == 1:
			sent = at
		case err == nil:
			lose(fmt.Errorf("lease %s: a successor holds it: %w", name, reconcile.ErrLeaseLost))
			return
		case time.Since(sent) >= s.leaseTTL/2:
			// Given up with half the TTL to spare: the next renewal
			// could only start as the lease runs out.
			lose(fmt.Errorf("lease %s: not renewed for %s (%w): %w", name, s.leaseTTL, classify(err), reconcile.ErrLeaseLost))
			return
		}
	}
}
