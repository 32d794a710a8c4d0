package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

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

// TestDemoSeedScenario is the seed's scenario as a test: nine deliveries of
// three events, a crash during the first plan change, a late older
// cancellation. billsync must end on Pro with 500, one Pro top-up, three
// events from nine deliveries; the late cancellation must say why nothing
// changed; and the naive foil must show the damage it exists to show.
func TestDemoSeedScenario(t *testing.T) {
	t.Setenv("DATABASE_URL", "")
	t.Setenv("BILLSYNC_DATA_DIR", filepath.Join(reachableDir(t), "data"))
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"demo", "-once", "-json"}, &out, os.Stderr))

	var res demoResult
	require.NoError(t, json.Unmarshal(out.Bytes(), &res), out.String())
	b := res.Billsync
	require.Equal(t, "pro", b.Plan)
	require.EqualValues(t, 500, b.Balance)
	require.Equal(t, 3, b.EventsStored)
	require.Equal(t, 9, b.Deliveries)
	require.True(t, b.Right)
	var pro []int64
	for _, g := range b.Grants {
		if g.Plan == "pro" {
			pro = append(pro, g.Delta)
		}
	}
	require.Len(t, pro, 1, "one Pro top-up")

	require.Len(t, res.Deliveries, 9)
	require.Contains(t, res.Deliveries[0].Billsync.Outcome, "killed mid-apply")
	require.Contains(t, res.Deliveries[0].Billsync.Outcome, "plan set to pro")
	late := res.Deliveries[6]
	require.Equal(t, "customer.subscription.deleted", late.Type)
	require.Equal(t, "200 stored", late.Billsync.Answer)
	require.True(t, strings.Contains(late.Billsync.Outcome, "no change") && strings.Contains(late.Billsync.Outcome, "plan pro"),
		"the late cancellation must say why nothing changed: %q", late.Billsync.Outcome)
	for _, row := range res.Deliveries {
		require.Equal(t, "pro", row.Billsync.Plan, "delivery %d", row.N)
		require.EqualValues(t, 500, row.Billsync.Balance, "delivery %d: billsync is never half-applied", row.N)
	}
	// The foil goes wrong exactly as the seed describes.
	require.Equal(t, "pro", res.Deliveries[0].Naive.Plan)
	require.EqualValues(t, 10, res.Deliveries[0].Naive.Balance, "killed between its two writes")
	require.Equal(t, "free", res.Naive.Plan, "the late cancellation wins")
	require.Greater(t, res.Naive.Balance, int64(500), "copies grant again")
}
