package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestNewLogger(t *testing.T) {
	env := func(kv ...string) func(string) string {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	t.Run("JSON", func(t *testing.T) {
		var out bytes.Buffer
		logger, err := newLogger(&out, env("BILLSYNC_LOG_FORMAT", "json", "BILLSYNC_LOG_LEVEL", "warn"))
		require.NoError(t, err)
		logger.Info("not at warn")
		logger.Warn("reconcile failed", "customer", "cus_1")
		var line map[string]any
		require.NoError(t, json.Unmarshal(out.Bytes(), &line), out.String())
		require.Equal(t, "reconcile failed", line["msg"])
		require.Equal(t, "cus_1", line["customer"])
	})
	t.Run("TextByDefault", func(t *testing.T) {
		var out bytes.Buffer
		logger, err := newLogger(&out, env())
		require.NoError(t, err)
		logger.Info("started")
		require.Contains(t, out.String(), "level=INFO msg=started")
	})
	t.Run("ErrUnknown", func(t *testing.T) {
		_, err := newLogger(&bytes.Buffer{}, env("BILLSYNC_LOG_FORMAT", "xml"))
		require.ErrorContains(t, err, "want text or json")
		_, err = newLogger(&bytes.Buffer{}, env("BILLSYNC_LOG_LEVEL", "loud"))
		require.ErrorContains(t, err, "BILLSYNC_LOG_LEVEL")
	})
}

// TestUsageErrorsSayWhy: a usage error exits 2 and says its reason on
// stderr (the bench's -only, a bad log level), once; a bare one (its usage
// printed already) adds nothing; help exits 0; any other error exits 1.
func TestUsageErrorsSayWhy(t *testing.T) {
	t.Setenv("DATABASE_URL", "")
	for _, tc := range []struct {
		args []string
		env  string
		code int
		says string
	}{
		{args: []string{"bench", "-only", "latency,heal"}, code: 2, says: "billsync: -only must be intake, drain, latency, sweep, heal, idle, drift or connect\n"},
		{args: []string{"serve"}, env: "loud", code: 2, says: "billsync: BILLSYNC_LOG_LEVEL \"loud\": want debug, info, warn or error\n"},
		{args: []string{"nosuch"}, code: 2, says: "billsync: unknown command \"nosuch\"\n"},
		{args: []string{"bench", "-h"}, code: 0},
	} {
		t.Setenv("BILLSYNC_LOG_LEVEL", tc.env)
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), tc.args, &stdout, &stderr)
		require.Equal(t, tc.code, exitCode(err, &stderr), "%v", tc.args)
		if tc.says != "" {
			require.Equal(t, 1, strings.Count(stderr.String(), tc.says), "%v: %s", tc.args, stderr.String())
		}
	}
	var stderr bytes.Buffer
	require.Equal(t, 1, exitCode(errors.New("database down"), &stderr))
	require.Equal(t, "billsync: database down\n", stderr.String())
}
