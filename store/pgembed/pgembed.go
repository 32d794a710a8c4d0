// Package pgembed runs a private PostgreSQL cluster for billsync when
// DATABASE_URL is unset: it initdb's a data directory once, starts the server
// on a unix socket only (no TCP), and stops it on request.
//
// Several processes share one cluster (serve, and the commands run beside
// it). Each holds a shared lock on DataDir/in-use.lock for as long as it uses
// the server, and starting or stopping happens under an exclusive lock on
// DataDir/start-stop.lock, so Stop never stops a server another live process
// uses, and a Start racing a Stop never ends with a stopped server.
//
// It must never be used when DATABASE_URL is set, never listen on TCP, and
// never run the server as root: when the process is root, initdb, pg_ctl and
// postgres run as the unprivileged "postgres" user (or "nobody").
// It installs no signal handlers: callers call Stop on exit.
package pgembed

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

const (
	// superuser is the role initdb creates; it is trusted on the socket.
	superuser = "billsync"
	// database is the database Start creates if missing.
	database = "billsync"

	// inUseLock is held shared by every process using the server, for as
	// long as it does: the kernel drops it when a process dies, however.
	inUseLock = "in-use.lock"
	// startStopLock is held exclusively while a process initdb's, starts
	// or stops the server, or decides whether to.
	startStopLock = "start-stop.lock"

	// port only names the socket file (.s.PGSQL.<port>): there is no TCP.
	port = 5432
	// maxSocketPath is sizeof(sockaddr_un.sun_path) minus the NUL byte.
	maxSocketPath = 107
)

// ErrNoBinaries means no PostgreSQL server binaries (initdb, pg_ctl,
// postgres) were found.
var ErrNoBinaries = errors.New("PostgreSQL server binaries (initdb, pg_ctl, postgres) not found")

const installHint = "install PostgreSQL server binaries (e.g. Debian `apt-get install postgresql`, " +
	"Homebrew `brew install postgresql@15`) or set DATABASE_URL"

// Config says where the cluster lives.
type Config struct {
	// DataDir holds the cluster (DataDir/pgdata), its log and socket
	// directory. It is created if missing and kept across restarts.
	DataDir string
	// Logger may be nil.
	Logger *slog.Logger
	// BinDir overrides binary discovery. When set, it must hold initdb,
	// pg_ctl and postgres: no other place is searched. When empty, the
	// BILLSYNC_PG_BINDIR environment variable (EnvBinDir) overrides it the
	// same way.
	BinDir string
	// FallbackDir, when set, is used instead of DataDir when billsync runs
	// as root and the unprivileged server user cannot reach DataDir (a
	// checkout under /root, say). Start logs where the cluster went.
	FallbackDir string
	// Fast trades durability for speed (initdb --no-sync; fsync,
	// synchronous_commit and full_page_writes off) and allows 300
	// connections. For tests only.
	Fast bool
	// Adopt is for a long-running process (serve) that owns the server's
	// lifetime: its Stop stops a server it found running (left behind by
	// a killed serve, or started by a command), provided no other process
	// uses it. Without Adopt (a one-shot command), Stop only ever stops a
	// server this process started, and only when no other process uses it.
	Adopt bool
}

// Cluster is a running server started (or found running) by Start.
type Cluster struct {
	binDir  string
	dataDir string
	pgdata  string
	sockDir string
	port    int
	cred    *syscall.Credential // non-nil when running as root
	log     *slog.Logger

	// started: this process started the server; adopt: Config.Adopt.
	// Either lets Stop stop it when no other process uses it.
	started bool
	adopt   bool

	mu      sync.Mutex
	inUse   *os.File // holds inUseLock shared until Stop
	stopped bool
}

// Start initdb's cfg.DataDir if it holds no cluster yet (reusing it
// otherwise), starts the server, or shares one already running on that
// directory (another process's, or one a killed process left behind), and
// waits until it accepts connections. It creates the database "billsync" if
// missing. Two processes starting together start one server: the second
// waits for the first and shares it.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("pgembed: no data directory")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	binDir, err := findBinDir(cfg.BinDir)
	if err != nil {
		return nil, err
	}
	dataDir, err := prepareDataDir(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	c := &Cluster{
		binDir:  binDir,
		dataDir: dataDir,
		pgdata:  filepath.Join(dataDir, "pgdata"),
		port:    port,
		log:     log,
		adopt:   cfg.Adopt,
	}
	if os.Geteuid() == 0 {
		if err := c.dropRoot(); err != nil {
			if errors.Is(err, errUnreachable) && cfg.FallbackDir != "" {
				log.Warn("PostgreSQL's user cannot reach the data directory; keeping the cluster in the fallback directory instead",
					slog.String("data_dir", dataDir), slog.String("fallback_dir", cfg.FallbackDir), slog.Any("error", err))
				cfg.DataDir, cfg.FallbackDir = cfg.FallbackDir, ""
				return Start(ctx, cfg)
			}
			return nil, err
		}
	}
	if err := c.claim(ctx, cfg.Fast); err != nil {
		return nil, err
	}
	if err := c.createDatabase(ctx, database); err != nil {
		c.Stop(context.WithoutCancel(ctx)) //nolint:errcheck // the create error is the one to report
		return nil, err
	}
	return c, nil
}

// claim, under the start/stop lock, creates the cluster if missing, starts
// the server unless it runs, and takes this process's share of it, which
// keeps any other process's Stop from stopping it.
func (c *Cluster) claim(ctx context.Context, fast bool) error {
	control, err := c.lock(ctx, startStopLock, syscall.LOCK_EX)
	if err != nil {
		return err
	}
	defer control.Close()
	if err := c.initdb(ctx, fast); err != nil {
		return err
	}
	running, err := c.running(ctx)
	if err != nil {
		return err
	}
	if running {
		if err := c.readPidFile(); err != nil {
			return err
		}
		attrs := []any{slog.String("data_dir", c.pgdata), slog.String("socket_dir", c.sockDir)}
		alone, err := c.alone()
		switch {
		case err != nil:
			return err
		case !alone:
			c.log.Info("sharing the PostgreSQL another billsync process runs", attrs...)
		case c.adopt:
			// A killed serve left it running (or someone ran pg_ctl):
			// this process takes it over and stops it when done.
			c.log.Info("adopting PostgreSQL left running by a process that is gone", attrs...)
		default:
			c.log.Info("using PostgreSQL left running by a process that is gone; leaving it running for serve to adopt", attrs...)
		}
	} else {
		if err := c.start(ctx, fast); err != nil {
			return err
		}
		c.started = true
	}
	// Shared: other processes share it too. Nobody holds it exclusively
	// without the start/stop lock, which we hold, so this never waits.
	inUse, err := c.lock(ctx, inUseLock, syscall.LOCK_SH)
	if err != nil {
		return err
	}
	c.inUse = inUse
	return nil
}

// alone reports whether no process holds the in-use lock (and so uses the
// server), by taking it exclusively without waiting, and dropping it again.
// Call it under the start/stop lock: no process can take a share meanwhile.
//
// A share that stays held for aloneWait is another process's. A shorter
// one is a child this process forked: until its exec has closed them, it
// holds a copy of every descriptor, a share this process has just dropped
// among them (the kernel wakes the forking thread before it closes them,
// so even syscall.ForkLock cannot rule the copy out).
func (c *Cluster) alone() (bool, error) {
	f, err := os.OpenFile(filepath.Join(c.dataDir, inUseLock), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return false, fmt.Errorf("pgembed: open lock: %w", err)
	}
	defer f.Close()
	deadline := time.Now().Add(aloneWait)
	for pause := time.Millisecond; ; pause = min(2*pause, 50*time.Millisecond) {
		err = flock(f, syscall.LOCK_EX|syscall.LOCK_NB)
		switch {
		case err == nil:
			return true, nil
		case !errors.Is(err, syscall.EWOULDBLOCK):
			return false, fmt.Errorf("pgembed: lock %s: %w", f.Name(), err)
		case time.Now().After(deadline):
			return false, nil
		}
		time.Sleep(pause)
	}
}

// aloneWait is how long alone waits for a share to be dropped before it
// counts it as another process's.
const aloneWait = time.Second

// lock opens DataDir/name and locks it (syscall.LOCK_EX or LOCK_SH),
// waiting until it may or ctx ends. Closing the file releases the lock.
func (c *Cluster) lock(ctx context.Context, name string, how int) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(c.dataDir, name), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("pgembed: open lock: %w", err)
	}
	locked := make(chan error, 1)
	go func() { locked <- flock(f, how) }()
	select {
	case err := <-locked:
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("pgembed: lock %s: %w", f.Name(), err)
		}
		return f, nil
	case <-ctx.Done():
		// The lock may still come: release it then.
		go func() { <-locked; f.Close() }() //nolint:errcheck // closing releases the lock; nothing was written
		return nil, fmt.Errorf("pgembed: wait for %s: %w", f.Name(), ctx.Err())
	}
}

// flock is flock(2), retried when a signal interrupts the wait.
func flock(f *os.File, how int) error {
	for {
		if err := syscall.Flock(int(f.Fd()), how); !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

// URL returns a pgx/libpq connection URL for dbname as the superuser.
func (c *Cluster) URL(dbname string) string {
	q := url.Values{"host": {c.sockDir}, "port": {strconv.Itoa(c.port)}, "sslmode": {"disable"}}
	u := url.URL{Scheme: "postgres", User: url.User(superuser), Path: "/" + dbname, RawQuery: q.Encode()}
	return u.String()
}

// RunningURL returns the URL of dbname on the cluster that another process
// (a billsync serve, say) runs under dataDir, read from its postmaster.pid,
// so nobody needs to know where the socket went.
func RunningURL(dataDir, dbname string) (string, error) {
	c := &Cluster{pgdata: filepath.Join(dataDir, "pgdata")}
	if err := c.readPidFile(); err != nil {
		return "", err
	}
	return c.URL(dbname), nil
}

// DataDir returns the absolute data directory.
func (c *Cluster) DataDir() string { return c.dataDir }

// Stop ends this process's use of the server, and shuts the server down
// (pg_ctl stop -m fast: sessions are ended, no crash recovery is needed next
// time) when this process may (it started the server, or Config.Adopt) and
// no other process uses it; otherwise it leaves the server running and logs
// why. Calling it again does nothing.
func (c *Cluster) Stop(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return nil
	}
	control, err := c.lock(ctx, startStopLock, syscall.LOCK_EX)
	if err != nil {
		return err
	}
	defer control.Close()
	// Drop our share, so that alone sees only the others'. Nobody can
	// take one meanwhile: Start takes it under the start/stop lock.
	if c.inUse != nil {
		c.inUse.Close()
		c.inUse = nil
	}
	attrs := []any{slog.String("data_dir", c.pgdata)}
	if !c.started && !c.adopt {
		c.log.Debug("leaving PostgreSQL running: this process did not start it", attrs...)
		c.stopped = true
		return nil
	}
	alone, err := c.alone()
	if err != nil {
		return err
	}
	if !alone {
		c.log.Info("leaving PostgreSQL running: other billsync processes use it", attrs...)
		c.stopped = true
		return nil
	}
	running, err := c.running(ctx)
	if err != nil {
		return err
	}
	if running {
		if out, err := c.pgCtl(ctx, "-D", c.pgdata, "-m", "fast", "-w", "-t", "60", "stop"); err != nil {
			return fmt.Errorf("pgembed: stop server: %w: %s", err, out)
		}
		c.log.Info("stopped PostgreSQL", attrs...)
	}
	c.stopped = true
	if c.sockDir != filepath.Join(c.dataDir, "run") {
		os.Remove(c.sockDir) //nolint:errcheck // a private temp dir; empty once the server is down
	}
	return nil
}

// EnvBinDir names the environment variable that points every cluster whose
// Config.BinDir is empty at one binary directory: how the tests run against
// each supported PostgreSQL major (make compat). Like BinDir it is never
// searched past, so a missing version fails instead of falling back to
// another one.
const EnvBinDir = "BILLSYNC_PG_BINDIR"

// findBinDir returns the directory holding initdb, pg_ctl and postgres.
func findBinDir(override string) (string, error) {
	from := ""
	if override == "" {
		override, from = os.Getenv(EnvBinDir), " ("+EnvBinDir+")"
	}
	if override != "" {
		if hasBinaries(override) {
			return override, nil
		}
		return "", fmt.Errorf("pgembed: %w in %s%s: %s", ErrNoBinaries, override, from, installHint)
	}
	var candidates []string
	if initdb, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(initdb); err == nil {
			candidates = append(candidates, filepath.Dir(real))
		}
		candidates = append(candidates, filepath.Dir(initdb))
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		candidates = append(candidates, strings.TrimSpace(string(out)))
	}
	for _, pattern := range []string{
		"/usr/lib/postgresql/*/bin",
		"/opt/homebrew/opt/postgresql*/bin",
		"/usr/local/opt/postgresql*/bin",
		"/usr/local/pgsql/bin",
	} {
		matches, _ := filepath.Glob(pattern)
		candidates = append(candidates, newestFirst(matches)...)
	}
	for _, dir := range candidates {
		if hasBinaries(dir) {
			return dir, nil
		}
	}
	return "", fmt.Errorf("pgembed: %w: %s", ErrNoBinaries, installHint)
}

func hasBinaries(dir string) bool {
	for _, name := range []string{"initdb", "pg_ctl", "postgres"} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0 {
			return false
		}
	}
	return true
}

var versionRE = regexp.MustCompile(`postgresql[^/]*?(\d+)|/(\d+)/bin$`)

// newestFirst orders paths such as /usr/lib/postgresql/16/bin or
// /opt/homebrew/opt/postgresql@15/bin by major version, highest first.
func newestFirst(paths []string) []string {
	version := func(p string) int {
		m := versionRE.FindStringSubmatch(p)
		if m == nil {
			return 0
		}
		v, _ := strconv.Atoi(cmp.Or(m[1], m[2]))
		return v
	}
	slices.SortStableFunc(paths, func(a, b string) int { return version(b) - version(a) })
	return paths
}

// prepareDataDir creates dir (mode 0700; missing parents 0755) and returns
// its absolute, symlink-free path.
func prepareDataDir(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("pgembed: data directory %s: %w", dir, err)
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o755); err != nil {
		return "", fmt.Errorf("pgembed: create data directory: %w", err)
	}
	if err := os.Mkdir(abs, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return "", fmt.Errorf("pgembed: create data directory: %w", err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", fmt.Errorf("pgembed: data directory %s: %w", abs, err)
	}
	return real, nil
}

// errUnreachable means the server user cannot reach the data directory.
var errUnreachable = errors.New("pgembed: data directory out of the server user's reach")

// dropRoot picks the unprivileged user the server runs as, checks it can
// reach the data directory and hands that directory over to it.
func (c *Cluster) dropRoot() error {
	u, err := user.Lookup("postgres")
	if err != nil {
		if u, err = user.Lookup("nobody"); err != nil {
			return fmt.Errorf("pgembed: running as root and neither user postgres nor nobody exists: %w", err)
		}
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return fmt.Errorf("pgembed: user %s: uid %q: %w", u.Username, u.Uid, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return fmt.Errorf("pgembed: user %s: gid %q: %w", u.Username, u.Gid, err)
	}
	for dir := filepath.Dir(c.dataDir); ; dir = filepath.Dir(dir) {
		var st syscall.Stat_t
		if err := syscall.Stat(dir, &st); err != nil {
			return fmt.Errorf("pgembed: stat %s: %w", dir, err)
		}
		ok := st.Mode&0o001 != 0 ||
			st.Uid == uint32(uid) && st.Mode&0o100 != 0 ||
			st.Gid == uint32(gid) && st.Mode&0o010 != 0
		if !ok {
			return fmt.Errorf("%w: running as root, PostgreSQL runs as user %s, who cannot enter %s (mode %o): "+
				"set BILLSYNC_DATA_DIR to a directory that user can reach, or set DATABASE_URL",
				errUnreachable, u.Username, dir, st.Mode&0o7777)
		}
		if dir == filepath.Dir(dir) {
			break
		}
	}
	if err := os.Chown(c.dataDir, int(uid), int(gid)); err != nil {
		return fmt.Errorf("pgembed: hand data directory to user %s: %w", u.Username, err)
	}
	c.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	c.log.Debug("running PostgreSQL as unprivileged user", slog.String("user", u.Username))
	return nil
}

// initdb creates the cluster unless pgdata already holds one. It builds it
// in a scratch directory and renames it into place, so a run killed half way
// leaves no half-made cluster behind.
func (c *Cluster) initdb(ctx context.Context, fast bool) error {
	if _, err := os.Stat(filepath.Join(c.pgdata, "PG_VERSION")); err == nil {
		return nil
	}
	scratch := c.pgdata + ".init"
	if err := os.RemoveAll(scratch); err != nil {
		return fmt.Errorf("pgembed: remove unfinished cluster: %w", err)
	}
	c.log.Info("creating PostgreSQL cluster", slog.String("data_dir", c.pgdata))
	args := []string{"-D", scratch, "-U", superuser, "--auth=trust", "-E", "UTF8", "--locale=C"}
	if fast {
		args = append(args, "--no-sync")
	}
	if out, err := c.command(ctx, "initdb", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("pgembed: initdb: %w: %s", err, out)
	}
	if err := os.Rename(scratch, c.pgdata); err != nil {
		return fmt.Errorf("pgembed: move new cluster into place: %w", err)
	}
	return nil
}

// running reports whether a server is running on pgdata (pg_ctl status).
func (c *Cluster) running(ctx context.Context) (bool, error) {
	out, err := c.pgCtl(ctx, "-D", c.pgdata, "status")
	var exit *exec.ExitError
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &exit) && exit.ExitCode() == 3: // not running
		return false, nil
	default:
		return false, fmt.Errorf("pgembed: server status: %w: %s", err, out)
	}
}

func (c *Cluster) start(ctx context.Context, fast bool) error {
	sockDir, err := c.socketDir()
	if err != nil {
		return err
	}
	c.sockDir = sockDir
	// pg_ctl hands -o to /bin/sh: quote every value.
	opts := []string{"-k", shellQuote(sockDir), "-p", strconv.Itoa(c.port), "-c", "listen_addresses=''"}
	if fast {
		// A crash may lose recent commits; parallel tests each hold a
		// pool, hence more sessions than the default 100.
		opts = append(opts, "-c", "fsync=off", "-c", "synchronous_commit=off",
			"-c", "full_page_writes=off", "-c", "max_connections=300")
	}
	logFile := filepath.Join(c.dataDir, "postgres.log")
	c.log.Info("starting PostgreSQL", slog.String("data_dir", c.pgdata), slog.String("socket_dir", sockDir))
	out, err := c.pgCtl(ctx, "-D", c.pgdata, "-w", "-t", "60", "-l", logFile, "-o", strings.Join(opts, " "), "start")
	if err != nil {
		if sockDir != filepath.Join(c.dataDir, "run") {
			os.Remove(sockDir) //nolint:errcheck // our empty temp dir
		}
		return fmt.Errorf("pgembed: start server: %w: %s\n%s:\n%s", err, bytes.TrimSpace(out), logFile, logTail(logFile, 10))
	}
	return nil
}

// socketDir returns DataDir/run, or a short private temp directory when the
// socket path under DataDir would not fit in sockaddr_un.
func (c *Cluster) socketDir() (string, error) {
	dir := filepath.Join(c.dataDir, "run")
	if len(filepath.Join(dir, fmt.Sprintf(".s.PGSQL.%d", c.port))) > maxSocketPath {
		tmp, err := os.MkdirTemp("", "bspg")
		if err != nil {
			return "", fmt.Errorf("pgembed: socket directory: %w", err)
		}
		dir = tmp
	} else if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return "", fmt.Errorf("pgembed: socket directory: %w", err)
	}
	if c.cred != nil {
		if err := os.Chown(dir, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			return "", fmt.Errorf("pgembed: socket directory: %w", err)
		}
	}
	return dir, nil
}

// readPidFile learns the socket of a server already running on pgdata from
// postmaster.pid (line 4: port, line 5: first socket directory).
func (c *Cluster) readPidFile() error {
	b, err := os.ReadFile(filepath.Join(c.pgdata, "postmaster.pid"))
	if err != nil {
		return fmt.Errorf("pgembed: read postmaster.pid: %w", err)
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) < 5 || lines[4] == "" {
		return fmt.Errorf("pgembed: postmaster.pid names no socket directory")
	}
	p, err := strconv.Atoi(strings.TrimSpace(lines[3]))
	if err != nil {
		return fmt.Errorf("pgembed: postmaster.pid: port %q: %w", lines[3], err)
	}
	c.port, c.sockDir = p, strings.TrimSpace(lines[4])
	return nil
}

func (c *Cluster) createDatabase(ctx context.Context, name string) error {
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return fmt.Errorf("pgembed: connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return fmt.Errorf("pgembed: look up database %s: %w", name, err)
	}
	if exists {
		return nil
	}
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	var pgErr *pgconn.PgError
	// Someone beat us to it: duplicate_database, or, when both creates
	// ran at once, unique_violation on pg_database's name.
	if err != nil && (!errors.As(err, &pgErr) || pgErr.Code != "42P04" && pgErr.Code != "23505") {
		return fmt.Errorf("pgembed: create database %s: %w", name, err)
	}
	return nil
}

func (c *Cluster) pgCtl(ctx context.Context, args ...string) ([]byte, error) {
	return c.command(ctx, "pg_ctl", args...).CombinedOutput()
}

// command prepares a PostgreSQL tool: unprivileged when we are root, in the
// data directory (pg_ctl fails when it cannot enter its working directory),
// and without PG* variables that could point it elsewhere.
func (c *Cluster) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(c.binDir, name), args...)
	cmd.Dir = c.dataDir
	cmd.WaitDelay = 5 * time.Second
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "PG") })
	if c.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
		env = slices.DeleteFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "HOME=") })
		env = append(env, "HOME="+c.dataDir)
	}
	cmd.Env = env
	return cmd
}

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// logTail returns the last n lines of the server log, for start errors.
func logTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
