// Package store is billsync's PostgreSQL adapter: every SQL statement lives
// here. pgx types and errors never leave it; callers see reconcile's types and
// sentinels (reconcile.ErrUnavailable, reconcile.ErrNotFound).
package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"syscall"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/billsync/billsync/reconcile"
)

// Store reads and writes billsync's tables.
type Store struct {
	pool       *pgxpool.Pool
	lastNotify atomic.Int64 // unix nanos of the last NOTIFY sent
	// crashAfterAccountWrite, when set (tests only), runs between the
	// account write and the ledger write; an error aborts the transaction
	// as a crash there would.
	crashAfterAccountWrite func() error
}

// New returns a Store on pool.
func New(pool *pgxpool.Pool) *Store { return &Store{pool: pool} }

// CrashAfterAccountWrite installs fault injection for tests and the demo:
// fn runs inside Apply between the account write and the ledger write, and
// an error from it aborts the transaction as a crash at that point would.
// Pass nil to remove it. Never set in production wiring.
func (s *Store) CrashAfterAccountWrite(fn func() error) { s.crashAfterAccountWrite = fn }

// Pool returns the underlying pool (for wiring and tests).
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Open connects to url and checks the connection.
func Open(ctx context.Context, url string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open database: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("ping database: %w", classify(err))
	}
	return pool, nil
}

// Ping reports whether the database answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return classify(err)
	}
	return nil
}

// classify wraps errors that mean "the database is not there or did not
// commit" with reconcile.ErrUnavailable, so callers can tell an outage (retry
// later) from a bug. A connection that ends mid-statement (the server crashed
// or was killed: io.ErrUnexpectedEOF, a reset, a closed conn) is an outage
// too; whether the statement committed is unknown, and a retry of a delivery
// then finds it stored (a duplicate) or stores it.
func classify(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return reconcile.ErrNotFound
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code[:2] {
		case "08", // connection exception
			"57", // operator intervention: admin shutdown, cannot connect now
			"53", // insufficient resources
			"40": // serialization failure, deadlock: safe to retry
			return fmt.Errorf("%w: %w", reconcile.ErrUnavailable, err)
		}
		return err
	}
	var netErr net.Error
	var connErr *pgconn.ConnectError
	if errors.As(err, &connErr) || errors.As(err, &netErr) || pgconn.SafeToRetry(err) || pgconn.Timeout(err) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) || errors.Is(err, pgconn.ErrConnClosed) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("%w: %w", reconcile.ErrUnavailable, err)
	}
	return err
}

func isUndefinedTable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42P01"
}

// CreateDatabase creates a new, empty database called name on the server
// url points at and returns a pool on it (for the demo and the bench, which
// must not touch the operator's data). drop closes the pool and removes the
// database.
func CreateDatabase(ctx context.Context, url, name string) (pool *pgxpool.Pool, drop func(context.Context) error, err error) {
	admin, err := Open(ctx, url)
	if err != nil {
		return nil, nil, err
	}
	ident := pgx.Identifier{name}.Sanitize()
	if _, err := admin.Exec(ctx, `CREATE DATABASE `+ident); err != nil {
		admin.Close()
		return nil, nil, fmt.Errorf("create database %s: %w", name, classify(err))
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		admin.Close()
		return nil, nil, fmt.Errorf("parse database url: %w", err)
	}
	cfg.ConnConfig.Database = name
	cfg.MaxConns = max(cfg.MaxConns, 40)
	pool, err = pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		admin.Close()
		return nil, nil, fmt.Errorf("open database %s: %w", name, err)
	}
	drop = func(ctx context.Context) error {
		pool.Close()
		defer admin.Close()
		if _, err := admin.Exec(ctx, `DROP DATABASE IF EXISTS `+ident+` WITH (FORCE)`); err != nil {
			return fmt.Errorf("drop database %s: %w", name, classify(err))
		}
		return nil
	}
	return pool, drop, nil
}
