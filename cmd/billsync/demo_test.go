//go:build !release

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/cmd/billsync/internal/demo"
	"github.com/billsync/billsync/store/storetest"
)

// TestDemoOnceJSON: `billsync demo -once -json` plays the scenario (see
// internal/demo's TestDemoSeedScenario) and prints its result as JSON only,
// exiting 0 because billsync ended right.
func TestDemoOnceJSON(t *testing.T) {
	t.Setenv("DATABASE_URL", storetest.URL(t)) // the demo creates a database of its own on that server
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"demo", "-once", "-json"}, &out, os.Stderr))

	var res demo.Result
	dec := json.NewDecoder(&out)
	require.NoError(t, dec.Decode(&res), out.String())
	require.False(t, dec.More(), "nothing but the JSON on stdout")
	require.True(t, res.Billsync.Right)
	require.Len(t, res.Deliveries, 9)
}

// TestDemoKindeOnceJSON: `billsync demo --provider kinde -once -json` plays
// the scenario with Kinde's events and prints the same JSON shape.
func TestDemoKindeOnceJSON(t *testing.T) {
	t.Setenv("DATABASE_URL", storetest.URL(t))
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"demo", "--provider", "kinde", "-once", "-json"}, &out, os.Stderr))
	var res demo.Result
	require.NoError(t, json.NewDecoder(&out).Decode(&res), out.String())
	require.Equal(t, "kinde", res.Provider)
	require.True(t, res.Billsync.Right)
	require.Len(t, res.Deliveries, 9)
	require.Equal(t, "customer.plan_changed", res.Deliveries[0].Type)

	out.Reset()
	err := run(context.Background(), []string{"demo", "--provider", "paddle", "-once"}, &out, os.Stderr)
	require.ErrorContains(t, err, `demo provider "paddle": want stripe or kinde`)
}
