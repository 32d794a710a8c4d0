package storetest_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/store/internal/storehook"
	"github.com/billsync/billsync/store/pgembed"
	"github.com/billsync/billsync/store/storetest"
)

// TestServerRunsTheBinDirsVersion: with BILLSYNC_PG_BINDIR set (make
// compat runs the store tests once per PostgreSQL major that way), the
// tests' databases are on that directory's server, so a run meant for 17
// cannot pass on the machine's 15. The version is logged for the record.
func TestServerRunsTheBinDirsVersion(t *testing.T) {
	bin := os.Getenv(pgembed.EnvBinDir)
	if bin == "" || os.Getenv("DATABASE_URL") != "" {
		t.Skip("only when BILLSYNC_PG_BINDIR picks the embedded cluster's binaries")
	}
	t.Parallel()
	out, err := exec.Command(filepath.Join(bin, "postgres"), "--version").Output()
	require.NoError(t, err)
	// "postgres (PostgreSQL) 17.10", or Debian's "… 15.18 (Debian 15.18-0+deb12u1)"
	fields := strings.Fields(string(out))
	require.GreaterOrEqual(t, len(fields), 3, "postgres --version: %s", out)
	want := fields[2]

	var got string
	pool := storehook.Of(storetest.NewStore(t)).Pool
	require.NoError(t, pool.QueryRow(t.Context(), `SHOW server_version`).Scan(&got))
	t.Logf("server_version %s (%s)", got, bin)
	require.Equal(t, want, strings.Fields(got)[0])
}
