package main

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/store/pgembed"
	"github.com/billsync/billsync/store/storetest"
)

// TestCommandsShareServesEmbeddedCluster: a command run beside serve on the
// embedded default (DATABASE_URL unset, the same data directory) shares
// serve's PostgreSQL and leaves it running when it exits; after a kill -9
// of serve, a command leaves the server running too, and the next serve
// adopts it and stops it on SIGTERM.
func TestCommandsShareServesEmbeddedCluster(t *testing.T) {
	dataDir := filepath.Join(reachableDir(t), "data")
	t.Cleanup(func() { stopLeftoverCluster(t, dataDir) }) // after serve's own cleanup
	addr := freeAddr(t)

	serve := startBillsync(t, dataDir, addr, "BILLSYNC_ADMIN_TOKEN=admin-token-for-the-share-test")
	logs := serve.logs.String()
	require.Contains(t, logs, "console: http://"+addr+"/admin/", "serve names its console")
	require.Contains(t, logs, "data_dir="+dataDir, "serve names its data directory")
	require.Contains(t, logs, "socket="+filepath.Join(dataDir, "run", ".s.PGSQL.5432"), "serve names its socket")
	pid := postmasterPID(t, dataDir)

	out := runBillsync(t, "migrate -data-dir "+dataDir)
	require.Contains(t, out, "sharing the PostgreSQL another billsync process runs")
	require.Equal(t, http.StatusOK, readyz(t, addr), "serve lost its database to the command:\n%s", serve.logs.String())
	require.Equal(t, "stored", postEvent(t, addr, "evt_shared"))
	require.Equal(t, pid, postmasterPID(t, dataDir), "the server was restarted")

	// kill -9: serve's lock dies with it, its server lives on, held by nobody.
	require.NoError(t, serve.cmd.Process.Kill())
	<-serve.exited
	out = runBillsync(t, "migrate -data-dir "+dataDir)
	require.Contains(t, out, "leaving it running for serve to adopt")
	require.Equal(t, pid, postmasterPID(t, dataDir), "the command stopped the server it found")

	serve = startBillsync(t, dataDir, addr)
	require.Contains(t, serve.logs.String(), "adopting PostgreSQL left running by a process that is gone")
	require.Equal(t, "duplicate", postEvent(t, addr, "evt_shared"), "the first serve's event is kept")
	stopBillsync(t, serve)
	require.NoFileExists(t, filepath.Join(dataDir, "pgdata", "postmaster.pid"), "serve did not stop the server it adopted")
}

// runBillsync runs a one-shot billsync command (this test binary as
// billsync, see TestMain) on the embedded database, requires it to exit 0
// and returns its output.
func runBillsync(t *testing.T, args string, env ...string) string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "BILLSYNC_TEST_AS_MAIN=1", "BILLSYNC_TEST_ARGS="+args, "DATABASE_URL=")
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "billsync %s:\n%s", args, out)
	return string(out)
}

func readyz(t *testing.T, addr string) int {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/readyz")
	require.NoError(t, err)
	resp.Body.Close()
	return resp.StatusCode
}

// postmasterPID returns the pid of the server running on dataDir.
func postmasterPID(t *testing.T, dataDir string) int {
	t.Helper()
	return storetest.ServerPIDs(t, dataDir)[0]
}

// stopLeftoverCluster stops a server a failed test left running on dataDir
// (a killed serve's), so its directory can go.
func stopLeftoverCluster(t *testing.T, dataDir string) {
	if _, err := os.Stat(filepath.Join(dataDir, "pgdata", "postmaster.pid")); err != nil {
		return
	}
	c, err := pgembed.Start(context.Background(), pgembed.Config{DataDir: dataDir, Adopt: true})
	if err == nil {
		err = c.Stop(context.Background())
	}
	require.NoError(t, err)
}

func TestDescribeDatabase(t *testing.T) {
	tests := map[string]struct {
		url  string
		want string
	}{
		"URL": {
			url:  "postgres://app:s3cret-pw@db.example.com:6543/billing?sslmode=disable&application_name=x",
			want: "host=db.example.com port=6543 database=billing user=app",
		},
		"KeywordValue": {
			url:  "host=db.example.com port=6543 dbname=billing user=app password=s3cret-pw sslmode=disable",
			want: "host=db.example.com port=6543 database=billing user=app",
		},
		"PasswordInQuery": {
			url:  "postgres://db.example.com/billing?user=app&password=s3cret-pw&sslmode=disable",
			want: "host=db.example.com port=5432 database=billing user=app",
		},
		"Socket": {
			url:  "postgres://billsync@/billsync?host=%2Fdata%2Frun&port=5432&sslmode=disable",
			want: "socket=/data/run/.s.PGSQL.5432 database=billsync user=billsync",
		},
		"Unparsable": {
			url:  "postgres://app:s3cret-pw@db.example.com:notaport/billing",
			want: "(unparsable connection string)",
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			got := describeDatabase(tt.url)
			require.Equal(t, tt.want, got)
			require.NotContains(t, got, "s3cret")
		})
	}
}

// reachableDir returns a temp dir PostgreSQL's unprivileged user can enter
// when the tests run as root.
func reachableDir(t *testing.T) string {
	t.Helper()
	root, err := os.MkdirTemp("", "billsync-cmd-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(root) })
	require.NoError(t, os.Chmod(root, 0o755))
	return root
}
