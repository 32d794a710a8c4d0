//go:build !release

package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBenchRefusesBadFlagsBeforeStartingPostgreSQL: a size the bench cannot
// run is a usage error (exit 2), found before any database is started or
// data directory created. The bench itself is tested in internal/bench.
func TestBenchRefusesBadFlagsBeforeStartingPostgreSQL(t *testing.T) {
	t.Setenv("DATABASE_URL", "")
	for _, args := range [][]string{
		{"-senders", "0"},
		{"-customers", "10", "-drain-events", "5"},
		{"-rate", "-1"},
		{"extra"},
	} {
		dataDir := filepath.Join(t.TempDir(), "data")
		var out bytes.Buffer
		err := runBench(context.Background(), append([]string{"-data-dir", dataDir}, args...), &out, slog.New(slog.DiscardHandler))
		require.True(t, errors.Is(err, errUsage), "%v: %v", args, err)
		_, statErr := os.Stat(dataDir)
		require.True(t, os.IsNotExist(statErr), "%v: the data directory was created", args)
		require.Empty(t, out.String())
	}
}
