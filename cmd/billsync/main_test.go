package main

import (
	"bytes"
	"encoding/json"
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
