package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// workshopPackages are the packages the release build must not link: the
// fakes, the harness, the scratch databases, the store's test helpers and
// the demo and bench commands.
var workshopPackages = []string{
	"github.com/billsync/billsync/mocks",
	"github.com/billsync/billsync/store/scratch",
	"github.com/billsync/billsync/store/storetest",
	"github.com/billsync/billsync/cmd/billsync/internal/bench",
	"github.com/billsync/billsync/cmd/billsync/internal/demo",
}

// linkedWorkshop lists the workshop packages the build with tags links.
func linkedWorkshop(t *testing.T, tags string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", "-tags", tags, ".").CombinedOutput()
	require.NoError(t, err, "go list: %s", out)
	var found []string
	for _, pkg := range strings.Fields(string(out)) {
		for _, w := range workshopPackages {
			if pkg == w || strings.HasPrefix(pkg, w+"/") {
				found = append(found, pkg)
			}
		}
	}
	return found
}

// TestReleaseBuildLeavesTheWorkshopOut: the release build (-tags release,
// the image's) links no fake provider, no harness and no scratch database,
// and its workshop commands say they are not in it; the default build
// (go run ./cmd/billsync demo on a fresh clone) keeps them.
func TestReleaseBuildLeavesTheWorkshopOut(t *testing.T) {
	t.Parallel()
	require.Empty(t, linkedWorkshop(t, "release"), "the release build links workshop packages")
	require.Contains(t, linkedWorkshop(t, ""), "github.com/billsync/billsync/cmd/billsync/internal/demo",
		"the default build keeps the demo")

	bin := filepath.Join(t.TempDir(), "billsync")
	out, err := exec.Command("go", "build", "-tags", "release", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	for _, name := range []string{"demo", "mock", "bench"} {
		cmd := exec.Command(bin, name)
		cmd.Env = append(os.Environ(), "BILLSYNC_DATA_DIR="+t.TempDir())
		out, err := cmd.CombinedOutput()
		require.Error(t, err, name)
		require.Contains(t, string(out), "not in this build: "+name, name)
	}
	out, err = exec.Command("go", "version", "-m", bin).CombinedOutput()
	require.NoError(t, err, "go version -m: %s", out)
	require.Contains(t, string(out), "-tags=release")
}
