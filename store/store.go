// Package store is billsync's PostgreSQL adapter: every SQL statement lives
// here. pgx types and errors never leave it; callers see reconcile's types and
// sentinels (reconcile.ErrUnavailable, reconcile.ErrNotFound).
package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/billsync/billsync/reconcile"
)

// Store reads and writes billsync's tables. It owns its connection pool:
// callers see billsync's types only.
type Store struct {
	pool       *pgxpool.Pool
	timeout    time.Duration
	lastNotify atomic.Int64 // unix nanos of the last NOTIFY sent
	// crashAfterAccountWrite, when set (tests only), runs between the
	// account write and the ledger write; an error aborts the transaction
	// as a crash there would.
	crashAfterAccountWrite func() error
}

// DefaultTimeout bounds a store call when Options.Timeout is zero.
const DefaultTimeout = 10 * time.Second

// Options tunes a Store. Zero values take the defaults.
type Options struct {
	// Timeout bounds every store call that its caller's context does not
	// bound sooner, so a hung database costs a caller at most this long and
	// can never hold a shutdown; default DefaultTimeout. Migrate and Listen
	// are long-running by nature and only follow their context.
	Timeout time.Duration
	// MaxConns caps the connection pool; default pgx's (at least 4).
	MaxConns int32
}

// Open connects to the PostgreSQL server at url and checks the connection.
func Open(ctx context.Context, url string, opts Options) (*Store, error) {
	if opts.Timeout < 0 || opts.MaxConns < 0 {
		return nil, errors.New("store: negative timeout or pool size")
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", err)
	}
	return openConfig(ctx, cfg, opts)
}

func openConfig(ctx context.Context, cfg *pgxpool.Config, opts Options) (*Store, error) {
	if opts.MaxConns > 0 {
		cfg.MaxConns = opts.MaxConns
	}
	// A call whose deadline passes is cancelled in PostgreSQL too, so a
	// delivery answered 503 after a lock wait is rolled back rather than
	// committed behind the caller's back. A server that cannot take the
	// cancel (frozen, gone) gets the connection cut a second later.
	cfg.ConnConfig.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{Conn: c, DeadlineDelay: time.Second}
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open database: %w", err)
	}
	s := &Store{pool: pool, timeout: cmp.Or(opts.Timeout, DefaultTimeout)}
	if err := s.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("ping database: %w", err)
	}
	return s, nil
}

// Close closes every connection. It waits at most the store's timeout:
// pgx gives a connection 15 s to say goodbye, which a hung database never
// answers, and a process shutting down must not wait for it.
func (s *Store) Close() {
	done := make(chan struct{})
	go func() { s.pool.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(s.timeout):
	}
}

// CrashAfterAccountWrite installs fault injection for tests and the demo:
// fn runs inside Apply between the account write and the ledger write, and
// an error from it aborts the transaction as a crash at that point would.
// Pass nil to remove it. Never set in production wiring.
func (s *Store) CrashAfterAccountWrite(fn func() error) { s.crashAfterAccountWrite = fn }

// Pool returns the underlying pool, for tests that inspect tables
// directly. Production code never calls it: every query lives in a Store
// method.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// URL returns a libpq URL of the store's database, without the password
// (for psql lines printed to people).
func (s *Store) URL() string {
	c := s.pool.Config().ConnConfig
	u := url.URL{Scheme: "postgres", User: url.User(c.User), Path: "/" + c.Database}
	u.RawQuery = url.Values{"host": {c.Host}, "port": {fmt.Sprint(c.Port)}}.Encode()
	return u.String()
}

// bound gives ctx the store's deadline unless it already has a sooner one.
func (s *Store) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.timeout)
}

// Ping reports whether the database answers.
func (s *Store) Ping(ctx context.Context) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
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
// url points at and returns a Store on it (for the demo and the bench,
// which must not touch the operator's data). drop closes the store and
// removes the database.
func CreateDatabase(ctx context.Context, url, name string, opts Options) (st *Store, drop func(context.Context) error, err error) {
	admin, err := Open(ctx, url, Options{MaxConns: 1})
	if err != nil {
		return nil, nil, err
	}
	ident := pgx.Identifier{name}.Sanitize()
	if _, err := admin.pool.Exec(ctx, `CREATE DATABASE `+ident); err != nil {
		admin.Close()
		return nil, nil, fmt.Errorf("create database %s: %w", name, classify(err))
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		admin.Close()
		return nil, nil, fmt.Errorf("parse database url: %w", err)
	}
	cfg.ConnConfig.Database = name
	st, err = openConfig(ctx, cfg, opts)
	if err != nil {
		admin.Close()
		return nil, nil, fmt.Errorf("open database %s: %w", name, err)
	}
	drop = func(ctx context.Context) error {
		st.Close()
		defer admin.Close()
		if _, err := admin.pool.Exec(ctx, `DROP DATABASE IF EXISTS `+ident+` WITH (FORCE)`); err != nil {
			return fmt.Errorf("drop database %s: %w", name, classify(err))
		}
		return nil
	}
	return st, drop, nil
}
