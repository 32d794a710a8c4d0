package pgembed

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/store/storetest/tb"
)

// exited reports whether process pid has ended: it is gone, or it is a
// zombie its parent has not reaped yet. The postmaster is daemonised, so
// its parent is PID 1, which on a busy machine may reap it seconds after
// it exited; until then kill(pid, 0) still finds it.
func exited(pid int) bool {
	if syscall.Kill(pid, 0) == syscall.ESRCH {
		return true
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false // no /proc: only kill(2) can tell
	}
	// "pid (comm) state ...": the state follows the command's last ')'.
	i := bytes.LastIndexByte(stat, ')')
	return i >= 0 && i+2 < len(stat) && (stat[i+2] == 'Z' || stat[i+2] == 'X')
}

// dataDir returns a path for a cluster under t.TempDir, whose directories
// are made reachable for the unprivileged user when the test runs as root.
func dataDir(t *testing.T, name string) string {
	t.Helper()
	root := t.TempDir()
	if os.Geteuid() == 0 {
		// t.TempDir makes 0700 directories; the server user must pass through.
		require.NoError(t, os.Chmod(root, 0o755))
		require.NoError(t, os.Chmod(filepath.Dir(root), 0o755))
	}
	return filepath.Join(root, name)
}

func start(t *testing.T, dir string) *Cluster {
	t.Helper()
	return startWith(t, Config{DataDir: dir, Fast: true})
}

func startWith(t *testing.T, cfg Config) *Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := Start(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Stop(context.Background())) })
	return c
}

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), url)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// postmasterPID reads the server's pid from the first line of postmaster.pid.
func postmasterPID(t *testing.T, c *Cluster) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(c.DataDir(), "pgdata", "postmaster.pid"))
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.SplitN(string(b), "\n", 2)[0])
	require.NoError(t, err)
	return pid
}

func TestStartRestartKeepsData(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := dataDir(t, "data")

	c := start(t, dir)
	require.Equal(t, dir, c.DataDir())
	require.Equal(t, filepath.Join(dir, "run"), filepath.Dir(mustHost(t, c)))
	conn := connect(t, c.URL("billsync"))
	var one int
	require.NoError(t, conn.QueryRow(ctx, `SELECT 1`).Scan(&one))
	require.Equal(t, 1, one)
	var who, db, listen string
	require.NoError(t, conn.QueryRow(ctx, `SELECT current_user, current_database(), current_setting('listen_addresses')`).Scan(&who, &db, &listen))
	require.Equal(t, []string{"billsync", "billsync", ""}, []string{who, db, listen}, "user, database, and no TCP")
	_, err := conn.Exec(ctx, `CREATE TABLE kept (v text); INSERT INTO kept VALUES ('survives restart')`)
	require.NoError(t, err)
	conn.Close(ctx)

	if os.Geteuid() == 0 {
		var st syscall.Stat_t
		require.NoError(t, syscall.Stat("/proc/"+strconv.Itoa(postmasterPID(t, c)), &st))
		require.NotZero(t, st.Uid, "postmaster must not run as root")
	}

	require.NoError(t, c.Stop(ctx))
	require.NoError(t, c.Stop(ctx), "Stop is idempotent")
	_, err = pgx.Connect(ctx, c.URL("billsync"))
	require.Error(t, err, "server still answers after Stop")

	c2 := start(t, dir)
	var v string
	require.NoError(t, connect(t, c2.URL("billsync")).QueryRow(ctx, `SELECT v FROM kept`).Scan(&v))
	require.Equal(t, "survives restart", v)
}

// A second Start shares the running server; its Stop leaves it to the
// first, whose Stop, alone now, stops it.
func TestGuestStopLeavesServerRunning(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := dataDir(t, "data")
	first := start(t, dir)
	pid := postmasterPID(t, first)

	var log bytes.Buffer
	second := startWith(t, Config{DataDir: dir, Fast: true, Logger: logTo(&log)})
	require.Equal(t, pid, postmasterPID(t, second), "a second server was started")
	require.Contains(t, log.String(), "sharing the PostgreSQL another billsync process runs")
	require.NoError(t, second.Stop(ctx))
	requireRunning(t, first, pid)

	require.NoError(t, first.Stop(ctx))
	requireStopped(t, dir, pid)
}

// The process that started the server leaves it running while another uses
// it, and says so; that one, a serve (Adopt), stops it when it is last out.
func TestStarterLeavesServerToOthers(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := dataDir(t, "data")
	var log bytes.Buffer
	starter := startWith(t, Config{DataDir: dir, Fast: true, Logger: logTo(&log)})
	pid := postmasterPID(t, starter)
	serve := startWith(t, Config{DataDir: dir, Fast: true, Adopt: true})

	require.NoError(t, starter.Stop(ctx))
	requireRunning(t, serve, pid)
	require.Contains(t, log.String(), "leaving PostgreSQL running: other billsync processes use it")
	require.NotContains(t, log.String(), "stopped PostgreSQL")

	require.NoError(t, serve.Stop(ctx))
	requireStopped(t, dir, pid)
}

// A server whose starter was killed (kill -9: its locks die with it) is
// left running by a one-shot Start, and adopted and stopped by an adopting
// one.
func TestOrphanAdoptedOnlyByAdopter(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := dataDir(t, "data")
	pid := orphan(t, dir)

	var log bytes.Buffer
	command := startWith(t, Config{DataDir: dir, Fast: true, Logger: logTo(&log)})
	require.Equal(t, pid, postmasterPID(t, command))
	require.NoError(t, command.Stop(ctx))
	require.Contains(t, log.String(), "leaving it running for serve to adopt")
	serve := startWith(t, Config{DataDir: dir, Fast: true, Adopt: true, Logger: logTo(&log)})
	requireRunning(t, serve, pid)
	require.Contains(t, log.String(), "adopting PostgreSQL left running by a process that is gone")

	require.NoError(t, serve.Stop(ctx))
	requireStopped(t, dir, pid)
}

// Two processes starting on a stopped cluster start one server (and make
// one cluster): one starts it, the other waits and shares it.
func TestConcurrentStartsStartOneServer(t *testing.T) {
	t.Parallel()
	dir := dataDir(t, "data")
	var logs [2]bytes.Buffer
	var clusters [2]*Cluster
	var errs [2]error
	var wg sync.WaitGroup
	for i := range clusters {
		wg.Go(func() {
			clusters[i], errs[i] = Start(t.Context(), Config{DataDir: dir, Fast: true, Logger: logTo(&logs[i])})
		})
	}
	wg.Wait()
	for i, c := range clusters {
		require.NoError(t, errs[i])
		t.Cleanup(func() { require.NoError(t, c.Stop(context.Background())) })
	}
	require.Equal(t, postmasterPID(t, clusters[0]), postmasterPID(t, clusters[1]))
	all := logs[0].String() + logs[1].String()
	require.Equal(t, 1, strings.Count(all, "creating PostgreSQL cluster"), all)
	require.Equal(t, 1, strings.Count(all, "starting PostgreSQL"), all)
	require.Equal(t, 1, strings.Count(all, "sharing the PostgreSQL"), all)
}

// A Start racing the last user's Stop never ends with a stopped server:
// either the Stop comes first and the Start starts it again, or the Start
// comes first and the Stop leaves it running.
func TestStartDuringStopEndsRunning(t *testing.T) {
	t.Parallel()
	dir := dataDir(t, "data")
	last := start(t, dir)
	for range 3 {
		var next *Cluster
		var startErr, stopErr error
		var wg sync.WaitGroup
		wg.Go(func() { stopErr = last.Stop(t.Context()) })
		wg.Go(func() { next, startErr = Start(t.Context(), Config{DataDir: dir, Fast: true}) })
		wg.Wait()
		require.NoError(t, stopErr)
		require.NoError(t, startErr)
		t.Cleanup(func() { require.NoError(t, next.Stop(context.Background())) })
		requireRunning(t, next, postmasterPID(t, next))
		last = next
	}
}

// orphan starts the cluster under dir in a child process (this test binary,
// see TestMain) and kills it with SIGKILL: the server is left running, and
// no process holds it. It returns the postmaster's pid; cleanup adopts and
// stops the server should a test fail before it does.
func orphan(t *testing.T, dir string) int {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), holdEnv+"="+dir)
	stdin, err := cmd.StdinPipe() // never written: the child waits on it
	require.NoError(t, err)
	defer stdin.Close()
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "ready\n" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("holder did not start the cluster: %q %v\n%s", line, err, stderr.String())
	}
	t.Cleanup(func() {
		c, err := Start(context.Background(), Config{DataDir: dir, Fast: true, Adopt: true})
		if err == nil {
			err = c.Stop(context.Background())
		}
		require.NoError(t, err)
	})
	require.NoError(t, cmd.Process.Kill())
	require.Error(t, cmd.Wait(), "killed")
	b, err := os.ReadFile(filepath.Join(dir, "pgdata", "postmaster.pid"))
	require.NoError(t, err, "the server died with its starter")
	pid, err := strconv.Atoi(strings.SplitN(string(b), "\n", 2)[0])
	require.NoError(t, err)
	require.False(t, exited(pid), "the server died with its starter")
	return pid
}

// holdEnv makes this test binary a process that starts the cluster in the
// named data directory, says "ready" and waits on stdin.
const holdEnv = "PGEMBED_TEST_HOLD"

func TestMain(m *testing.M) {
	if dir := os.Getenv(holdEnv); dir != "" {
		if _, err := Start(context.Background(), Config{DataDir: dir, Fast: true}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println("ready")
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func logTo(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// requireRunning asserts that the postmaster pid still serves c.
func requireRunning(t *testing.T, c *Cluster, pid int) {
	t.Helper()
	require.FileExists(t, filepath.Join(c.DataDir(), "pgdata", "postmaster.pid"), "server stopped")
	require.Equal(t, pid, postmasterPID(t, c))
	var one int
	require.NoError(t, connect(t, c.URL("billsync")).QueryRow(t.Context(), `SELECT 1`).Scan(&one))
}

// requireStopped asserts that the server of dir was shut down.
func requireStopped(t *testing.T, dir string, pid int) {
	t.Helper()
	require.NoFileExists(t, filepath.Join(dir, "pgdata", "postmaster.pid"))
	// The postmaster removes its pid file just before it exits.
	tb.WaitFor(t, "the postmaster exits after Stop", func() bool { return exited(pid) })
}

// A data directory too deep for a unix socket path gets a short socket dir.
func TestLongDataDirUsesShortSocketDir(t *testing.T) {
	t.Parallel()
	dir := dataDir(t, strings.Repeat("d", 120))
	c := start(t, dir)
	sock := filepath.Dir(mustHost(t, c))
	require.False(t, strings.HasPrefix(sock, dir), "socket dir %s is under the data dir", sock)
	var one int
	require.NoError(t, connect(t, c.URL("billsync")).QueryRow(t.Context(), `SELECT 1`).Scan(&one))
	require.NoError(t, c.Stop(t.Context()))
	require.NoDirExists(t, sock, "temporary socket dir left behind")
}

func TestErrNoBinaries(t *testing.T) {
	t.Parallel()
	_, err := Start(t.Context(), Config{DataDir: filepath.Join(t.TempDir(), "data"), BinDir: t.TempDir()})
	require.ErrorIs(t, err, ErrNoBinaries)
	require.ErrorContains(t, err, "apt-get install postgresql")
	require.ErrorContains(t, err, "set DATABASE_URL")
}

// TestBinDirFromEnvironment: BILLSYNC_PG_BINDIR points discovery at one
// directory, as make compat does for each PostgreSQL major; when that
// directory lacks the binaries, Start fails rather than fall back to
// another version. Config.BinDir still wins over it.
func TestBinDirFromEnvironment(t *testing.T) {
	fake := t.TempDir()
	for _, name := range []string{"initdb", "pg_ctl", "postgres"} {
		require.NoError(t, os.WriteFile(filepath.Join(fake, name), nil, 0o755))
	}
	t.Setenv(EnvBinDir, fake)
	dir, err := findBinDir("")
	require.NoError(t, err)
	require.Equal(t, fake, dir)

	other := t.TempDir()
	for _, name := range []string{"initdb", "pg_ctl", "postgres"} {
		require.NoError(t, os.WriteFile(filepath.Join(other, name), nil, 0o755))
	}
	dir, err = findBinDir(other)
	require.NoError(t, err)
	require.Equal(t, other, dir, "Config.BinDir wins over the environment")

	empty := t.TempDir()
	t.Setenv(EnvBinDir, empty)
	_, err = Start(t.Context(), Config{DataDir: filepath.Join(t.TempDir(), "data")})
	require.ErrorIs(t, err, ErrNoBinaries)
	require.ErrorContains(t, err, empty+" (BILLSYNC_PG_BINDIR)")
}

func TestRootNeedsReachableDataDir(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only root hands the data directory to another user")
	}
	t.Parallel()
	locked := t.TempDir()
	require.NoError(t, os.Chmod(locked, 0o700))
	_, err := Start(t.Context(), Config{DataDir: filepath.Join(locked, "data")})
	require.ErrorContains(t, err, "set BILLSYNC_DATA_DIR")
	require.ErrorContains(t, err, locked)
}

// TestRootFallsBackWhenAllowed: with a fallback, an unreachable data
// directory does not stop the cluster; it runs in the fallback instead.
func TestRootFallsBackWhenAllowed(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only root hands the data directory to another user")
	}
	locked := t.TempDir()
	require.NoError(t, os.Chmod(locked, 0o700))
	fallback := dataDir(t, "fallback")
	c := startWith(t, Config{DataDir: filepath.Join(locked, "data"), FallbackDir: fallback, Fast: true})
	require.Equal(t, fallback, c.DataDir())
	_, err := os.Stat(filepath.Join(fallback, "pgdata", "PG_VERSION"))
	require.NoError(t, err)
}

func TestNewestFirst(t *testing.T) {
	got := newestFirst([]string{
		"/usr/lib/postgresql/9/bin",
		"/usr/lib/postgresql/16/bin",
		"/usr/lib/postgresql/15/bin",
	})
	require.Equal(t, []string{"/usr/lib/postgresql/16/bin", "/usr/lib/postgresql/15/bin", "/usr/lib/postgresql/9/bin"}, got)
	got = newestFirst([]string{"/opt/homebrew/opt/postgresql@14/bin", "/opt/homebrew/opt/postgresql@17/bin"})
	require.Equal(t, "/opt/homebrew/opt/postgresql@17/bin", got[0])
}

// mustHost returns the socket file the cluster's URL points at.
func mustHost(t *testing.T, c *Cluster) string {
	t.Helper()
	cfg, err := pgx.ParseConfig(c.URL("billsync"))
	require.NoError(t, err)
	return filepath.Join(cfg.Host, ".s.PGSQL."+strconv.Itoa(int(cfg.Port)))
}

// A server killed outright leaves a stale postmaster.pid; Start recovers it
// with every committed row (durable settings: Fast would lose the last ones).
func TestStartAfterCrash(t *testing.T) {
	t.Parallel()
	dir := dataDir(t, "data")
	c := startWith(t, Config{DataDir: dir})
	_, err := connect(t, c.URL("billsync")).Exec(t.Context(), `CREATE TABLE kept (v int); INSERT INTO kept VALUES (7)`)
	require.NoError(t, err)
	pid := postmasterPID(t, c)
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	// Not exited: a new postmaster refuses to start while the old one's
	// pid exists, zombie or not, so this waits for PID 1 to reap it.
	tb.WaitFor(t, "the killed postmaster's pid is released", func() bool { return syscall.Kill(pid, 0) == syscall.ESRCH })
	require.FileExists(t, filepath.Join(dir, "pgdata", "postmaster.pid"))

	c2 := startWith(t, Config{DataDir: dir})
	require.NotEqual(t, pid, postmasterPID(t, c2))
	var v int
	require.NoError(t, connect(t, c2.URL("billsync")).QueryRow(t.Context(), `SELECT v FROM kept`).Scan(&v))
	require.Equal(t, 7, v)
}

// A server that will not start yields an error quoting the server log.
func TestStartErrorQuotesLog(t *testing.T) {
	t.Parallel()
	dir := dataDir(t, "data")
	require.NoError(t, start(t, dir).Stop(t.Context()))
	conf, err := os.OpenFile(filepath.Join(dir, "pgdata", "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = conf.WriteString("no_such_setting = 1\n")
	require.NoError(t, err)
	require.NoError(t, conf.Close())

	_, err = Start(t.Context(), Config{DataDir: dir, Fast: true})
	require.ErrorContains(t, err, "start server")
	require.ErrorContains(t, err, `unrecognized configuration parameter "no_such_setting"`)
}

// A process that forks children while it stops its server (a test binary
// whose parallel tests run pg_ctl, a serve running hooks) still stops it:
// a child between fork and exec holds a copy of every descriptor, the
// in-use lock's among them, which must not read as another process's
// share of the server.
func TestStopWhileForking(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := dataDir(t, "data")
	forking, stop := context.WithCancel(ctx)
	var forks sync.WaitGroup
	for range 4 {
		forks.Go(func() {
			for forking.Err() == nil {
				_ = exec.Command("true").Run()
			}
		})
	}
	defer forks.Wait()
	defer stop()
	for i := range 8 {
		var log bytes.Buffer
		c, err := Start(ctx, Config{DataDir: dir, Fast: true, Logger: logTo(&log)})
		require.NoError(t, err)
		pid := postmasterPID(t, c)
		t.Cleanup(func() { // a server left running by a failed round
			if !exited(pid) {
				syscall.Kill(pid, syscall.SIGQUIT) //nolint:errcheck // best effort
			}
		})
		require.NoError(t, c.Stop(ctx))
		require.NotContains(t, log.String(), "other billsync processes use it", "round %d", i)
		requireStopped(t, dir, pid)
	}
}
