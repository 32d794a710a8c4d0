// Package store is billsync's PostgreSQL adapter: every SQL statement of the
// product lives here. Driver types and errors never leave it; callers see
// reconcile's types and sentinels (reconcile.ErrStoreUnavailable,
// reconcile.ErrNotFound).
//
// Its exported API is what production calls, nothing else. The store's own
// test helpers (store/storetest) and workshop (store/scratch: the demo's and
// the bench's throwaway databases, whole-table counts, crash injection) reach
// its connection pool and fault hooks through store/internal/storehook,
// which nothing outside store/ can import.
package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store/internal/dburl"
	"github.com/billsync/billsync/store/internal/storehook"
)

// Store reads and writes billsync's tables. It owns its connection pool:
// callers see billsync's types only.
type Store struct {
	pool       *pgxpool.Pool
	timeout    time.Duration
	lastNotify atomic.Int64 // unix nanos of the last NOTIFY sent
	trailing   atomic.Bool  // a NOTIFY is scheduled for the end of the interval
	// faults are set only by tests and the demo, through storehook
	// (scratch.CrashAfterAccountWrite); production never sets one.
	faults   storehook.Faults
	leaseTTL time.Duration
	schema   string // Options.Schema: Migrate creates it when missing
	conn     Connection
	// listenCfg is where LISTEN connects: the pool's own configuration,
	// the direct URL's, or nil when neither can LISTEN (a transaction
	// pooler and no direct URL).
	listenCfg *pgx.ConnConfig
	// exactRowsUnder replaces defaultExactRowsUnder when set (tests).
	exactRowsUnder int64
	// fannedOut counts the changes fanned out since the last ANALYZE of
	// app_deliveries; analyzeEvery replaces defaultAnalyzeEvery when set
	// (tests).
	fannedOut    atomic.Int64
	analyzeEvery int64
}

func init() {
	storehook.Register(func(st any) storehook.Internals {
		s := st.(*Store)
		return storehook.Internals{Pool: s.pool, Faults: &s.faults}
	})
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
	// MaxConns caps the connection pool; default the URL's pool_max_conns,
	// else the driver's (max(4, CPUs)).
	MaxConns int32
	// Pooling is what sits between billsync and PostgreSQL
	// (BILLSYNC_DATABASE_POOLER); PoolingAuto detects it.
	Pooling Pooling
	// DirectURL (BILLSYNC_DATABASE_DIRECT_URL) reaches the same database
	// directly or through a session pooler: LISTEN goes there when the
	// main URL is a transaction pooler's. Unset: the store LISTENs on the
	// main URL, or, behind a transaction pooler, not at all (callers poll
	// every PollWithoutListen).
	DirectURL string
	// Schema (BILLSYNC_DATABASE_SCHEMA) puts billsync's tables in a schema
	// of their own: Migrate creates it when missing (and allowed), and
	// every connection puts it first on its search_path, as a startup
	// parameter (directly or through a session pooler) or, behind a
	// transaction pooler, which refuses that, by the role's own setting
	// (ALTER ROLE … SET search_path), which Open checks. Empty: the
	// search_path as it is (public, by default).
	Schema string
	// LeaseTTL is how long a duty's lease (a sweep, the events feed, a
	// prune) outlives its holder's last renewal; default DefaultLeaseTTL.
	LeaseTTL time.Duration
}

// DefaultServePoolSize is the connection pool serve opens when the
// database URL does not set pool_max_conns. The driver's own default,
// max(4, CPUs), is 4 on a small machine: at 100 reconciles a second each
// applies in its own transaction (a commit waiting for its WAL flush), and
// four connections then cap the drain below the provider's rate (measured
// at 300 ms latency, 2 CPUs: 82% of 100 req/s with 4, 93% with 8; see
// BENCHMARKS.md). 16 per replica leaves room for several replicas under
// PostgreSQL's default max_connections of 100.
const DefaultServePoolSize = 16

// ServePoolSize is the pool size serve asks for on url: 0 (the URL's own
// pool_max_conns) when the URL sets one, else DefaultServePoolSize.
func ServePoolSize(url string) int32 {
	if dburl.Has(url, "pool_max_conns") {
		return 0
	}
	return DefaultServePoolSize
}

// Open connects to the PostgreSQL server at url and checks the connection.
func Open(ctx context.Context, url string, opts Options) (*Store, error) {
	if opts.Timeout < 0 || opts.MaxConns < 0 || opts.LeaseTTL < 0 {
		return nil, errors.New("store: negative timeout, pool size or lease TTL")
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", err)
	}
	return openConfig(ctx, cfg, url, opts)
}

func openConfig(ctx context.Context, cfg *pgxpool.Config, url string, opts Options) (*Store, error) {
	if opts.MaxConns > 0 {
		cfg.MaxConns = opts.MaxConns
	}
	conn, err := configurePooling(ctx, cfg, url, opts.Pooling)
	if err != nil {
		return nil, err
	}
	if opts.Schema != "" {
		if !schemaName.MatchString(opts.Schema) {
			return nil, fmt.Errorf("database schema %q: use lower-case letters, digits and _, starting with a letter or _", opts.Schema)
		}
		if conn.Pooling != PoolingTransaction {
			cfg.ConnConfig.RuntimeParams["search_path"] = opts.Schema
		}
	}
	s := &Store{timeout: cmp.Or(opts.Timeout, DefaultTimeout), leaseTTL: cmp.Or(opts.LeaseTTL, DefaultLeaseTTL),
		conn: conn, schema: opts.Schema}
	switch {
	case opts.DirectURL != "":
		direct, err := pgx.ParseConfig(opts.DirectURL)
		if err != nil {
			return nil, fmt.Errorf("parse direct database url: %w", err)
		}
		s.listenCfg, s.conn.Listen, s.conn.ListenVia = direct, true, "direct url"
	case conn.Pooling != PoolingTransaction:
		s.listenCfg, s.conn.Listen, s.conn.ListenVia = cfg.ConnConfig.Copy(), true, "database url"
	}
	if s.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return nil, fmt.Errorf("open database: %w", err)
	}
	if err := s.Ping(ctx); err != nil {
		s.pool.Close()
		return nil, fmt.Errorf("ping database: %w", err)
	}
	if err := s.checkSchema(ctx, opts.Schema); err != nil {
		s.pool.Close()
		return nil, err
	}
	return s, nil
}

// schemaName is what BILLSYNC_DATABASE_SCHEMA may be: a name that needs no
// quoting, so a search_path set anywhere names it the same way.
var schemaName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// checkSchema refuses a connection whose search_path does not put schema
// first: billsync would read and write another schema's tables.
func (s *Store) checkSchema(ctx context.Context, schema string) error {
	if schema == "" {
		return nil
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var first string
	if err := s.pool.QueryRow(ctx, `SELECT trim(split_part(current_setting('search_path'), ',', 1))`).Scan(&first); err != nil {
		return fmt.Errorf("read search_path: %w", classify(err))
	}
	if strings.Trim(first, `"`) != schema {
		return fmt.Errorf("BILLSYNC_DATABASE_SCHEMA is %s but the connection's search_path starts with %s: behind a transaction pooler, "+
			"set it for billsync's role (ALTER ROLE %s SET search_path = %s), see docs/database.md", schema, first, s.conn.User, schema)
	}
	return nil
}

// Connection says what the store found when it opened: where the database
// is (never the password), the pooling, the query mode and whether LISTEN
// works.
func (s *Store) Connection() Connection { return s.conn }

// Close closes every connection. It waits at most the store's timeout:
// the driver gives a connection 15 s to say goodbye, which a hung database
// never answers, and a process shutting down must not wait for it.
func (s *Store) Close() {
	done := make(chan struct{})
	go func() { s.pool.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(s.timeout):
	}
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
// commit" with reconcile.ErrStoreUnavailable, so callers can tell an outage (retry
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
			return fmt.Errorf("%w: %w", reconcile.ErrStoreUnavailable, err)
		}
		return err
	}
	var netErr net.Error
	var connErr *pgconn.ConnectError
	if errors.As(err, &connErr) || errors.As(err, &netErr) || pgconn.SafeToRetry(err) || pgconn.Timeout(err) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) || errors.Is(err, pgconn.ErrConnClosed) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("%w: %w", reconcile.ErrStoreUnavailable, err)
	}
	return err
}

func isUndefinedTable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42P01"
}
