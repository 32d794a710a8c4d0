package main

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/store/storetest"
)

// needTool returns the path of a command the test needs; without it the
// test is skipped, except under CI=true (.ci/run installs it), where it
// fails.
func needTool(t *testing.T, name, pkg string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true and no %s on PATH (Debian's %s; .ci/run installs it)", name, pkg)
		}
		t.Skipf("no %s on PATH (Debian's %s)", name, pkg)
	}
	return path
}

// TestDockerfilesShareFinalStage: the multi-stage Dockerfile and
// Dockerfile.release (for a binary built outside) make the same image; the
// test here builds only the second (no network for the Go image), so the
// first's final stage must not drift from it.
func TestDockerfilesShareFinalStage(t *testing.T) {
	tail := func(name string) string {
		b, err := os.ReadFile(filepath.Join("..", "..", name))
		require.NoError(t, err)
		_, after, ok := strings.Cut(string(b), "# --- the same from here as ")
		require.True(t, ok, "%s: no '# --- the same from here as' line", name)
		_, after, _ = strings.Cut(after, "\n")
		return after
	}
	require.Equal(t, tail("Dockerfile.release"), tail("Dockerfile"))
	b, err := os.ReadFile(filepath.Join("..", "..", "Dockerfile"))
	require.NoError(t, err)
	require.Contains(t, string(b), "CGO_ENABLED=0 go build", "the image's binary must be static: it runs FROM scratch")
	for _, name := range []string{"Dockerfile", "Dockerfile.release"} {
		b, err := os.ReadFile(filepath.Join("..", "..", name))
		require.NoError(t, err)
		require.Contains(t, string(b), "go build -tags release", "%s: the image carries no workshop (TestReleaseBuildLeavesTheWorkshopOut)", name)
	}
}

// TestImage builds the release image with buildah (FROM scratch, no
// network), runs `billsync --help` and `billsync serve` from it against
// the test's database, asks /healthz from outside and `billsync
// healthcheck` from inside, and checks that serve runs as a non-root user.
func TestImage(t *testing.T) {
	buildah := needTool(t, "buildah", "buildah")
	t.Parallel()
	dir := t.TempDir()
	ctxDir := filepath.Join(dir, "context")
	require.NoError(t, os.Mkdir(ctxDir, 0o755))
	// As release tools build it: static, no cgo, no workshop.
	build := exec.Command("go", "build", "-tags", "release", "-trimpath", "-ldflags=-s -w", "-o", filepath.Join(ctxDir, "billsync"), ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	df, err := os.ReadFile(filepath.Join("..", "..", "Dockerfile.release"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(ctxDir, "Dockerfile.release"), df, 0o644))

	// A private store (vfs: no overlay mounts needed), removed with dir.
	bh := func(args ...string) *exec.Cmd {
		return exec.Command(buildah, append([]string{"--root", filepath.Join(dir, "root"), "--runroot", filepath.Join(dir, "run"), "--storage-driver", "vfs"}, args...)...)
	}
	must := func(args ...string) string {
		t.Helper()
		out, err := bh(args...).CombinedOutput()
		require.NoError(t, err, "buildah %s: %s", strings.Join(args, " "), out)
		return strings.TrimSpace(string(out))
	}
	must("bud", "--isolation", "chroot", "--format", "docker", "--pull=never", "-f", filepath.Join(ctxDir, "Dockerfile.release"), "-t", "billsync:test", ctxDir)
	user := must("inspect", "--type", "image", "--format", "{{.Docker.Config.User}}", "billsync:test")
	uid, _, _ := strings.Cut(user, ":")
	n, err := strconv.Atoi(uid)
	require.NoError(t, err, "the image's user must be numeric (runAsNonRoot checks it without /etc/passwd): %q", user)
	require.NotZero(t, n, "the image must not run as root")
	// No shell in the image: everything it runs is exec form.
	require.Equal(t, "[/billsync] [serve]", must("inspect", "--type", "image", "--format", "{{.Docker.Config.Entrypoint}} {{.Docker.Config.Cmd}}", "billsync:test"))
	require.Equal(t, "[CMD /billsync healthcheck]", must("inspect", "--type", "image", "--format", "{{.Docker.Config.Healthcheck.Test}}", "billsync:test"))
	ctr := strings.Fields(must("from", "--pull-never", "billsync:test"))
	require.NotEmpty(t, ctr)
	name := ctr[len(ctr)-1]
	t.Cleanup(func() { _ = bh("rm", name).Run() })

	help, err := bh("run", "--isolation", "chroot", name, "--", "/billsync", "--help").CombinedOutput()
	require.NoError(t, err, "%s", help)
	require.Contains(t, string(help), "usage: billsync <command>")
	require.Contains(t, string(help), "healthcheck")

	// The embedded PostgreSQL is not in the image: serve gets DATABASE_URL.
	// The test's cluster listens on a Unix socket in a directory only its
	// own user may enter, so a relay on the loopback (the chroot shares
	// the host's network) carries the image's connections to it.
	dbURL := relayDatabase(t, storetest.URL(t))
	addr := freeAddr(t)
	serve := bh("run", "--isolation", "chroot",
		"--env", "DATABASE_URL="+dbURL, "--env", "STRIPE_WEBHOOK_SECRET=whsec_image_test",
		name, "--", "/billsync", "serve", "-workers", "0", "-no-migrate", "-addr", addr)
	logs := &syncBuffer{}
	serve.Stdout, serve.Stderr = logs, logs
	// buildah's child outlives a killed buildah: its own process group,
	// killed whole at cleanup.
	serve.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	serve.WaitDelay = 10 * time.Second
	require.NoError(t, serve.Start())
	exited := make(chan struct{})
	var serveErr error // valid once exited is closed
	go func() { serveErr = serve.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-serve.Process.Pid, syscall.SIGKILL)
		<-exited
	})
	waitHTTP(t, "http://"+addr+"/healthz", exited, logs)

	// The process serving, seen from the host: not root.
	pid := findProcess(t, "serve", addr)
	uids := procUIDs(t, pid)
	for _, u := range uids {
		require.NotEqual(t, "0", u, "serve in the image runs as root: Uid %v", uids)
	}
	require.Equal(t, strconv.Itoa(n), uids[0])

	hc, err := bh("run", "--isolation", "chroot", "--env", "BILLSYNC_ADDR="+addr, name, "--", "/billsync", "healthcheck").CombinedOutput()
	require.NoError(t, err, "healthcheck in the image against a ready serve: %s", hc)
	require.Contains(t, string(hc), "ready")

	// SIGTERM reaches serve itself (the image has no init): a clean exit.
	require.NoError(t, syscall.Kill(pid, syscall.SIGTERM))
	select {
	case <-exited:
		require.NoError(t, serveErr, "serve in the image must exit 0 on SIGTERM:\n%s", logs.String())
	case <-time.After(time.Minute):
		t.Fatalf("serve in the image did not exit within a minute of SIGTERM:\n%s", logs.String())
	}
}

// waitHTTP waits until url answers 200, failing early if the process exits.
func waitHTTP(t *testing.T, url string, exited <-chan struct{}, logs *syncBuffer) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-exited:
			t.Fatalf("billsync exited before %s answered 200:\n%s", url, logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never answered 200:\n%s", url, logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// relayDatabase listens on the loopback and relays each connection to the
// database of url, returning a URL of the same database through the relay.
func relayDatabase(t *testing.T, url string) string {
	t.Helper()
	cfg, err := pgconn.ParseConfig(url)
	require.NoError(t, err)
	network, target := "tcp", net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
	if strings.HasPrefix(cfg.Host, "/") {
		network, target = "unix", filepath.Join(cfg.Host, ".s.PGSQL."+strconv.Itoa(int(cfg.Port)))
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer in.Close()
				up, err := net.Dial(network, target)
				if err != nil {
					return
				}
				defer up.Close()
				go func() { _, _ = io.Copy(up, in); up.Close() }()
				_, _ = io.Copy(in, up)
			}()
		}
	}()
	relayed := "postgres://" + cfg.User
	if cfg.Password != "" {
		relayed += ":" + cfg.Password
	}
	return relayed + "@" + ln.Addr().String() + "/" + cfg.Database + "?sslmode=disable"
}

// findProcess returns the pid of the one process whose command line holds
// every word.
func findProcess(t *testing.T, words ...string) int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	require.NoError(t, err)
	var found []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(bytes.TrimRight(b, "\x00")), "\x00")
		if len(args) == 0 || filepath.Base(args[0]) != "billsync" {
			continue
		}
		if all(args, words) {
			found = append(found, pid)
		}
	}
	require.Len(t, found, 1, "processes named billsync with %v", words)
	return found[0]
}

func all(args, words []string) bool {
	for _, w := range words {
		hit := false
		for _, a := range args {
			hit = hit || strings.Contains(a, w)
		}
		if !hit {
			return false
		}
	}
	return true
}

// procUIDs returns the real, effective, saved and filesystem uids of pid.
func procUIDs(t *testing.T, pid int) []string {
	t.Helper()
	f, err := os.Open(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "Uid:"); ok {
			return strings.Fields(rest)
		}
	}
	t.Fatalf("no Uid line in /proc/%d/status", pid)
	return nil
}
