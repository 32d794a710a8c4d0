package store

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/billsync/billsync/store/internal/dburl"
)

// Pooling says what sits between billsync and PostgreSQL.
type Pooling string

const (
	// PoolingAuto detects it when the store opens (see detectPooling).
	PoolingAuto Pooling = ""
	// PoolingNone: a direct connection; a session is billsync's own.
	PoolingNone Pooling = "none"
	// PoolingSession: a pooler or proxy that gives each client connection
	// a server connection of its own for the client's whole session.
	PoolingSession Pooling = "session"
	// PoolingTransaction: a pooler (PgBouncer in transaction mode,
	// Supabase's port 6543, Neon's -pooler host) that hands a server
	// connection to a client for one transaction only: no LISTEN, no
	// session advisory locks, no SET, no named prepared statements.
	PoolingTransaction Pooling = "transaction"
)

// ParsePooling reads BILLSYNC_DATABASE_POOLER's values: transaction,
// session, none, or auto (or empty) to detect.
func ParsePooling(s string) (Pooling, error) {
	switch p := Pooling(strings.ToLower(strings.TrimSpace(s))); p {
	case "auto", PoolingAuto:
		return PoolingAuto, nil
	case PoolingNone, PoolingSession, PoolingTransaction:
		return p, nil
	}
	return "", fmt.Errorf("database pooler %q: want transaction, session, none or auto", s)
}

// PollWithoutListen is how often workers, the app deliverer and the change
// feed's long polls look for work when the store cannot LISTEN (a
// transaction pooler and no direct URL): a wake-up then costs at most this,
// instead of arriving with the commit.
const PollWithoutListen = 200 * time.Millisecond

// Connection is what the store found out about its database when it
// opened, for the start-up line and the console: never the password.
type Connection struct {
	Host, Database, User string
	Pooling              Pooling
	// Detected says how Pooling was learned: "configured", or the
	// evidence detection found.
	Detected string
	// QueryMode is pgx's default_query_exec_mode in use, and
	// QueryModeChosen whether billsync chose it (the URL named none).
	QueryMode       string
	QueryModeChosen bool
	// Listen: LISTEN wake-ups work (direct or session connection, or a
	// direct URL beside a transaction pooler); else PollWithoutListen.
	Listen bool
	// ListenVia is where LISTEN goes: "database url" or "direct url".
	ListenVia string
}

// queryModes names pgx's query exec modes as default_query_exec_mode does.
var queryModes = map[pgx.QueryExecMode]string{
	pgx.QueryExecModeCacheStatement: "cache_statement",
	pgx.QueryExecModeCacheDescribe:  "cache_describe",
	pgx.QueryExecModeDescribeExec:   "describe_exec",
	pgx.QueryExecModeExec:           "exec",
	pgx.QueryExecModeSimpleProtocol: "simple_protocol",
}

// configurePooling settles how the store talks through what sits in front
// of PostgreSQL, before the pool opens: it detects the pooling when not
// told, chooses a query mode a transaction pooler supports when the URL
// names none and refuses one that cannot work, and ends statements on
// deadline without a cancel request whenever a pooler is in between.
func configurePooling(ctx context.Context, cfg *pgxpool.Config, url string, pooling Pooling) (Connection, error) {
	cc := cfg.ConnConfig
	c := Connection{Host: cc.Host, Database: cc.Database, User: cc.User, Pooling: pooling, Detected: "configured"}
	if strings.HasPrefix(c.Host, "/") {
		c.Host = "socket " + c.Host
	} else {
		c.Host = net.JoinHostPort(c.Host, strconv.Itoa(int(cc.Port)))
	}
	if pooling == PoolingAuto {
		var err error
		if c.Pooling, c.Detected, err = detectPooling(ctx, cc); err != nil {
			return c, err
		}
	}
	named := dburl.Has(url, "default_query_exec_mode")
	if c.Pooling == PoolingTransaction {
		switch mode := cc.DefaultQueryExecMode; {
		case !named:
			// One round trip a statement, nothing prepared by name: what
			// pgx recommends for poolers that do not track prepared
			// statements (PgBouncer before 1.21, or max_prepared_statements
			// 0), and correct on those that do.
			cc.DefaultQueryExecMode = pgx.QueryExecModeExec
			c.QueryModeChosen = true
		case mode == pgx.QueryExecModeCacheStatement || mode == pgx.QueryExecModeDescribeExec:
			return c, fmt.Errorf("database url: default_query_exec_mode=%s prepares statements by name, which a transaction pooler "+
				"hands to other clients (prepared statement \"stmtcache_…\" already exists): set default_query_exec_mode=exec "+
				"(or remove it, and billsync chooses exec), or BILLSYNC_DATABASE_POOLER=session if the pooler keeps sessions", queryModes[mode])
		}
	}
	c.QueryMode = queryModes[cc.DefaultQueryExecMode]
	if c.Pooling == PoolingNone {
		// Direct: a call whose deadline passes is cancelled in PostgreSQL
		// too, so a delivery answered 503 after a lock wait is rolled back
		// rather than committed behind the caller's back. A server that
		// cannot take the cancel (frozen, gone) gets the connection cut a
		// second later.
		cc.BuildContextWatcherHandler = func(pc *pgconn.PgConn) ctxwatch.Handler {
			return &pgconn.CancelRequestContextWatcherHandler{Conn: pc, DeadlineDelay: time.Second}
		}
	} else {
		// Behind a pooler, a cancel request is a second connection the
		// pooler must match to the right server connection: PgBouncer 1.18
		// (Debian 12's) can crash on one (its issue #801), taking every
		// client with it, and a stopping serve sends many. A deadline on
		// the socket instead closes the client connection, which the
		// pooler answers by ending the server's transaction. What is lost:
		// a statement running outside a transaction may still commit after
		// its caller gave up. The intake dedupes a provider's retry, and
		// every other write is keyed or guarded, so that is safe here.
		cc.BuildContextWatcherHandler = func(pc *pgconn.PgConn) ctxwatch.Handler {
			return &pgconn.DeadlineContextWatcherHandler{Conn: pc.Conn()}
		}
	}
	return c, nil
}

// detectPooling tells a transaction pooler, a session pooler or proxy and
// a direct connection apart, from what the server says on two connections
// held open at once: only a transaction pooler serves two live client
// sessions from one backend (PgBouncer hands the server connection one
// client just released to the next, last in first out) or one client
// session from several backends (when other clients take the backend in
// between, as they do on a busy pooler); and only something in between
// makes the server listen on another port than the client dialled, or on a
// Unix socket when the client dialled TCP. A known pooled address
// (Supabase's port 6543 or pooler.supabase.com, a Neon -pooler host) is
// taken at its word.
func detectPooling(ctx context.Context, cc *pgx.ConnConfig) (Pooling, string, error) {
	host := strings.ToLower(cc.Host)
	switch {
	case strings.HasSuffix(host, ".pooler.supabase.com") || cc.Port == 6543:
		return PoolingTransaction, "detected: Supabase's pooled address (port 6543 or pooler.supabase.com)", nil
	case strings.Contains(host, "-pooler."):
		return PoolingTransaction, "detected: a Neon -pooler host", nil
	}
	probe := cc.Copy()
	probe.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol // prepares nothing, whatever the pooler
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	a, err := pgx.ConnectConfig(ctx, probe)
	if err != nil {
		return "", "", fmt.Errorf("detect pooling: %w", classify(err))
	}
	defer a.Close(context.WithoutCancel(ctx)) //nolint:errcheck // a probe
	b, err := pgx.ConnectConfig(ctx, probe)
	if err != nil {
		return "", "", fmt.Errorf("detect pooling: %w", classify(err))
	}
	defer b.Close(context.WithoutCancel(ctx)) //nolint:errcheck // a probe
	var serverPort *int
	var firstA, firstB int
	for i := range 5 {
		var pidA, pidB int
		if err := a.QueryRow(ctx, `SELECT pg_backend_pid(), inet_server_port()`).Scan(&pidA, &serverPort); err != nil {
			return "", "", fmt.Errorf("detect pooling: %w", classify(err))
		}
		if err := b.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pidB); err != nil {
			return "", "", fmt.Errorf("detect pooling: %w", classify(err))
		}
		if i == 0 {
			firstA, firstB = pidA, pidB
		}
		switch {
		case pidA == pidB:
			return PoolingTransaction, "detected: two open connections were served by one backend", nil
		case pidA != firstA || pidB != firstB:
			return PoolingTransaction, "detected: one open connection was served by several backends", nil
		}
	}
	tcp := !strings.HasPrefix(cc.Host, "/")
	switch {
	case tcp && serverPort == nil:
		return PoolingSession, "detected: the client dialled TCP and the server sees a Unix socket (a pooler or proxy keeping sessions)", nil
	case tcp && *serverPort != int(cc.Port):
		return PoolingSession, fmt.Sprintf("detected: the server listens on port %d, not the %d dialled (a pooler or proxy keeping sessions)",
			*serverPort, cc.Port), nil
	}
	return PoolingNone, "detected: each connection its own backend on the port dialled", nil
}
