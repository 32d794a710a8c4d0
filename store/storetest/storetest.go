// Package storetest gives each test a fresh, fully migrated PostgreSQL
// database of its own: on DATABASE_URL's server when it is set, otherwise on
// one embedded cluster (pgembed) per test process.
//
// It is for tests only. It never touches databases it did not create: it
// only creates and drops billsync_test_* databases and billsync_tmpl_*
// templates. The migrations run once per schema version into a template;
// each test's database is a copy of it, which is much faster than migrating.
package storetest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/billsync/billsync/migrations"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store"
	"github.com/billsync/billsync/store/internal/dburl"
	"github.com/billsync/billsync/store/pgembed"
)

// QueryModeEnv names the environment variable that sets pgx's query mode
// (default_query_exec_mode) on every database URL storetest hands out, so
// the whole suite can run as a pooler (PgBouncer: exec, simple_protocol,
// cache_describe) makes billsync run. Unset or empty: the URL sets none,
// and pgx uses cache_statement.
const QueryModeEnv = "BILLSYNC_TEST_QUERY_MODE"

// QueryModes are pgx v5's query modes, as default_query_exec_mode names
// them.
var QueryModes = []string{"cache_statement", "cache_describe", "describe_exec", "exec", "simple_protocol"}

// queryMode returns QueryModeEnv's mode, "" when unset; an unknown name is
// an error, so a typo never runs the suite in the default mode unnoticed.
func queryMode() (string, error) {
	m := os.Getenv(QueryModeEnv)
	if m == "" || slices.Contains(QueryModes, m) {
		return m, nil
	}
	return "", fmt.Errorf("%s=%q: want one of %s", QueryModeEnv, m, strings.Join(QueryModes, ", "))
}

// WithQueryMode returns url (a URL or a keyword/value string) with pgx's
// query mode set to mode.
func WithQueryMode(url, mode string) string {
	return dburl.WithParam(url, "default_query_exec_mode", mode)
}

// inMode returns url in QueryModeEnv's mode, unchanged when it is unset.
func inMode(url string) (string, error) {
	m, err := queryMode()
	if err != nil || m == "" {
		return url, err
	}
	return WithQueryMode(url, m), nil
}

// templateLockKey serialises template builds among test processes sharing
// one server (several packages' test binaries run at once).
const templateLockKey = 0x62737465737474 // "bstestt"

// server is the per-process database server and template.
type server struct {
	adminURL string
	admin    *pgxpool.Pool
	template string
	cluster  *pgembed.Cluster // nil when DATABASE_URL is set
	dir      string           // the embedded cluster's temp dir
	lock     *os.File         // flock held while the process lives
}

var (
	mainCalled atomic.Bool
	setupOnce  sync.Once
	srv        *server
	setupErr   error
)

// Main wraps testing.M: call it from TestMain as os.Exit(storetest.Main(m)).
// It stops the package's embedded cluster, if one was started, after the
// tests.
func Main(m *testing.M) int {
	mainCalled.Store(true)
	code := m.Run()
	if srv != nil {
		if err := srv.close(); err != nil {
			fmt.Fprintln(os.Stderr, "storetest:", err)
			if code == 0 {
				code = 1
			}
		}
	}
	return code
}

// NewStore returns a Store on a fresh, fully migrated database of its own;
// it is closed and the database dropped at t.Cleanup.
func NewStore(t testing.TB) *store.Store {
	t.Helper()
	return OpenStore(t, URL(t), store.Options{})
}

// OpenStore opens a Store on url with opts, closed at t.Cleanup.
func OpenStore(t testing.TB, url string, opts store.Options) *store.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// A store with a short Timeout (a test of hangs) pings within it too:
	// on a busy machine that first ping may miss it, so it is tried again
	// until the minute is up.
	st, err := store.Open(ctx, url, opts)
	for errors.Is(err, reconcile.ErrStoreUnavailable) && ctx.Err() == nil {
		st, err = store.Open(ctx, url, opts)
	}
	if err != nil {
		t.Fatalf("storetest: %v", err)
	}
	t.Cleanup(st.Close) // runs before URL's cleanup drops the database
	return st
}

// URL returns a connection URL for a fresh, fully migrated database (for tests
// that open their own pool or run a subprocess); it is dropped at t.Cleanup.
func URL(t testing.TB) string {
	t.Helper()
	return newDatabase(t, "")
}

// EmptyURL returns a connection URL for a fresh database with no schema at
// all (for testing migrations themselves).
func EmptyURL(t testing.TB) string {
	t.Helper()
	return newDatabase(t, "template0")
}

// newDatabase creates a database from template (the migrated template when
// empty), dropped at cleanup.
func newDatabase(t testing.TB, template string) string {
	t.Helper()
	if !mainCalled.Load() {
		t.Fatal("storetest: add func TestMain(m *testing.M) { os.Exit(storetest.Main(m)) } to the package, " +
			"so the embedded PostgreSQL is stopped after the tests")
	}
	setupOnce.Do(func() { srv, setupErr = setup() })
	if setupErr != nil {
		t.Fatalf("storetest: %v", setupErr)
	}
	if template == "" {
		template = srv.template
	}
	name := "billsync_test_" + strings.ToLower(rand.Text()[:16])
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := srv.admin.Exec(ctx, "CREATE DATABASE "+name+" TEMPLATE "+template); err != nil {
		t.Fatalf("storetest: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := srv.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("storetest: drop database %s: %v", name, err)
		}
	})
	url, err := inMode(dbURL(srv.adminURL, name))
	if err != nil {
		t.Fatalf("storetest: %v", err)
	}
	return url
}

func setup() (_ *server, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The template and the admin pool stay in the default mode: only
	// the databases tests get run in QueryModeEnv's.
	if _, err := queryMode(); err != nil {
		return nil, err
	}
	s := &server{adminURL: os.Getenv("DATABASE_URL")}
	defer func() {
		if err != nil {
			s.close() //nolint:errcheck // the setup error is the one to report
		}
	}()
	if s.adminURL == "" {
		if err := s.startCluster(ctx); err != nil {
			return nil, err
		}
	}
	if s.admin, err = pgxpool.New(ctx, s.adminURL); err != nil {
		return nil, err
	}
	if err := s.admin.Ping(ctx); err != nil {
		return nil, err
	}
	if s.template, err = ensureTemplate(ctx, s.admin, s.adminURL); err != nil {
		return nil, err
	}
	return s, nil
}

// startCluster starts the process's embedded cluster in a temp dir, after
// reaping clusters left behind by test processes that died (panic, timeout,
// ^C) before Main could stop them. A process holds an flock on its dir's
// lock file while it lives, so a lock we can take marks an orphan.
func (s *server) startCluster(ctx context.Context) error {
	reapOrphans(ctx)
	dir, err := os.MkdirTemp(tempRoot(), "billsync-storetest-")
	if err != nil {
		return fmt.Errorf("temp dir: %w", err)
	}
	s.dir = dir
	if s.lock, err = lockDir(dir); err != nil {
		return err
	}
	// Let the unprivileged server user through when we run as root.
	if err := os.Chmod(dir, 0o755); err != nil {
		return fmt.Errorf("temp dir: %w", err)
	}
	if s.cluster, err = pgembed.Start(ctx, pgembed.Config{DataDir: filepath.Join(dir, "pg"), Fast: true}); err != nil {
		return err
	}
	s.adminURL = s.cluster.URL("postgres")
	return nil
}

func (s *server) close() error {
	if s.admin != nil {
		s.admin.Close()
	}
	if s.dir == "" {
		return nil
	}
	if s.cluster != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := s.cluster.Stop(ctx); err != nil {
			return err // keep the dir: the server may still be using it
		}
	}
	if err := os.RemoveAll(s.dir); err != nil {
		return fmt.Errorf("remove %s: %w", s.dir, err)
	}
	if s.lock != nil {
		s.lock.Close()
	}
	return nil
}

// lockDir takes the lock that marks dir as in use by this process.
// tempRoot is where test clusters live: memory-backed /dev/shm when there is
// a roomy one (a fresh database per test is a copy of the template's files),
// else the system temp dir. Containers often mount a 64 MB /dev/shm: too
// small for clusters and PostgreSQL's own shared memory together.
func tempRoot() string {
	const roomy = 2 << 30
	var fs syscall.Statfs_t
	if os.Getenv("TMPDIR") == "" && syscall.Statfs("/dev/shm", &fs) == nil && fs.Bavail*uint64(fs.Bsize) >= roomy {
		return "/dev/shm"
	}
	return os.TempDir()
}

// PrivateCluster starts a cluster of the test's own (for tests that stop
// and restart the database), stopped at cleanup. Start it again with
// pgembed.Start(ctx, cfg).
func PrivateCluster(t testing.TB) (*pgembed.Cluster, pgembed.Config) {
	t.Helper()
	dir, err := os.MkdirTemp(tempRoot(), "billsync-private-")
	if err != nil {
		t.Fatalf("storetest: temp dir: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// Let the unprivileged server user through when we run as root.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatalf("storetest: %v", err)
	}
	cfg := pgembed.Config{DataDir: filepath.Join(dir, "pg"), Fast: true}
	c, err := pgembed.Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("storetest: private cluster: %v", err)
	}
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	return c, cfg
}

func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	return f, nil
}

func reapOrphans(ctx context.Context) {
	dirs, _ := filepath.Glob(filepath.Join(tempRoot(), "billsync-storetest-*"))
	for _, dir := range dirs {
		fi, err := os.Stat(dir)
		if err != nil || time.Since(fi.ModTime()) < 10*time.Second {
			continue // missing, or so new its owner may not hold the lock yet
		}
		lock, err := lockDir(dir)
		if err != nil {
			continue // alive, or not ours to judge
		}
		s := &server{dir: dir, lock: lock}
		if _, err := os.Stat(filepath.Join(dir, "pg", "pgdata", "PG_VERSION")); err == nil {
			// Start adopts a server still running there; close stops it.
			if s.cluster, err = pgembed.Start(ctx, pgembed.Config{DataDir: filepath.Join(dir, "pg"), Fast: true, Adopt: true}); err != nil {
				lock.Close() // never delete a dir a server may still be using
				continue
			}
		}
		s.close() //nolint:errcheck // best effort: the next run tries again
	}
}

// ensureTemplate returns the template database holding the current
// migrations, building it unless a process already did. Its name carries a
// hash of the migrations, so a schema change gets a new template.
func ensureTemplate(ctx context.Context, admin *pgxpool.Pool, adminURL string) (string, error) {
	names, err := fs.Glob(migrations.FS, "*.sql") // in order: NNN_name.sql
	if err != nil {
		return "", fmt.Errorf("template: list migrations: %w", err)
	}
	h := sha256.New()
	for _, n := range names {
		sql, err := fs.ReadFile(migrations.FS, n)
		if err != nil {
			return "", fmt.Errorf("template: %w", err)
		}
		fmt.Fprintf(h, "%s\x00%s\x00", n, sql)
	}
	name := "billsync_tmpl_" + hex.EncodeToString(h.Sum(nil))[:16]

	conn, err := admin.Acquire(ctx)
	if err != nil {
		return "", fmt.Errorf("template: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, int64(templateLockKey)); err != nil {
		return "", fmt.Errorf("template: lock: %w", err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, int64(templateLockKey)) //nolint:errcheck // ends with the session anyway

	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return "", fmt.Errorf("template: look up %s: %w", name, err)
	}
	if exists {
		return name, nil
	}
	// Build under another name and rename when done, so a process that dies
	// half way leaves no half-migrated template behind.
	build := name + "_build"
	for _, sql := range []string{
		"DROP DATABASE IF EXISTS " + build + " WITH (FORCE)",
		"CREATE DATABASE " + build,
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			return "", fmt.Errorf("template: %s: %w", sql, err)
		}
	}
	st, err := store.Open(ctx, dbURL(adminURL, build), store.Options{})
	if err != nil {
		return "", fmt.Errorf("template: %w", err)
	}
	_, err = st.Migrate(ctx)
	st.Close()
	if err != nil {
		return "", fmt.Errorf("template: %w", err)
	}
	if _, err := conn.Exec(ctx, "ALTER DATABASE "+build+" RENAME TO "+name); err != nil {
		return "", fmt.Errorf("template: rename %s: %w", build, err)
	}
	return name, nil
}

// dbURL returns base (a URL or keyword/value string) pointed at database db.
func dbURL(base, db string) string { return dburl.WithDatabase(base, db) }

// PrivateStore is PrivateCluster with a migrated Store on its "billsync"
// database, closed at cleanup.
func PrivateStore(t testing.TB) (*store.Store, *pgembed.Cluster, pgembed.Config) {
	t.Helper()
	c, cfg := PrivateCluster(t)
	url, err := inMode(c.URL("billsync"))
	if err != nil {
		t.Fatalf("storetest: %v", err)
	}
	st := OpenStore(t, url, store.Options{})
	if _, err := st.Migrate(context.Background()); err != nil {
		t.Fatalf("storetest: migrate: %v", err)
	}
	return st, c, cfg
}

// ServerPIDs returns the postmaster of the cluster under dataDir and its
// children (the backends), for tests that kill or freeze the database.
func ServerPIDs(t testing.TB, dataDir string) []int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dataDir, "pgdata", "postmaster.pid"))
	if err != nil {
		t.Fatalf("storetest: %v", err)
	}
	postmaster, err := strconv.Atoi(strings.SplitN(string(b), "\n", 2)[0])
	if err != nil {
		t.Fatalf("storetest: postmaster.pid: %v", err)
	}
	pids := []int{postmaster}
	out, err := exec.Command("pgrep", "-P", strconv.Itoa(postmaster)).Output()
	if err != nil {
		t.Fatalf("storetest: pgrep: %v", err)
	}
	for _, f := range strings.Fields(string(out)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("storetest: pgrep: %v", err)
		}
		pids = append(pids, pid)
	}
	return pids
}

// Freeze stops the cluster under dataDir and its backends with SIGSTOP, as
// a hung database host would be; thaw (also run at cleanup) lets them go on.
func Freeze(t testing.TB, dataDir string) (thaw func()) {
	t.Helper()
	pids := ServerPIDs(t, dataDir)
	signal := func(sig syscall.Signal) {
		for _, pid := range pids {
			_ = syscall.Kill(pid, sig)
		}
	}
	signal(syscall.SIGSTOP)
	thaw = sync.OnceFunc(func() { signal(syscall.SIGCONT) })
	t.Cleanup(thaw)
	return thaw
}

// Tables returns every table of st's database with its row count and a
// digest of its rows, to show that something (a dry run, a refused
// request) wrote nothing at all.
func Tables(t testing.TB, st *store.Store) map[string]string {
	t.Helper()
	ctx := context.Background()
	rows, err := dbOf(st).Query(ctx, `SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1`)
	if err != nil {
		t.Fatalf("storetest: tables: %v", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(names) == 0 {
		t.Fatalf("storetest: tables: %v (%d found)", err, len(names))
	}
	out := make(map[string]string, len(names))
	for _, n := range names {
		var digest string
		if err := dbOf(st).QueryRow(ctx, `SELECT count(*) || ' ' || coalesce(md5(string_agg(t::text, '|' ORDER BY t::text)), '') FROM `+
			pgx.Identifier{n}.Sanitize()+` t`).Scan(&digest); err != nil {
			t.Fatalf("storetest: digest %s: %v", n, err)
		}
		out[n] = digest
	}
	return out
}

// OpenStoreWithEndpoints is OpenStore with the app's endpoints registered
// from now, as serve does before its workers start: every change written
// after it gets a delivery to each, once FanOut runs.
func OpenStoreWithEndpoints(t testing.TB, url string, opts store.Options, endpoints ...string) *store.Store {
	t.Helper()
	st := OpenStore(t, url, opts)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := st.RegisterEndpoints(ctx, endpoints); err != nil {
		t.Fatalf("storetest: %v", err)
	}
	return st
}

// FanOut creates the deliveries of every change written so far (and
// committed) to the endpoints, as serve's deliverer does before it claims.
func FanOut(t testing.TB, st *store.Store, endpoints ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for more := true; more; {
		var err error
		if more, err = st.FanOut(ctx, endpoints, 100, true); err != nil {
			t.Fatalf("storetest: %v", err)
		}
	}
}
