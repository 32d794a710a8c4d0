package storetest

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestQueryModeUnknown(t *testing.T) {
	t.Setenv(QueryModeEnv, "simple")
	_, err := queryMode()
	require.ErrorContains(t, err, `BILLSYNC_TEST_QUERY_MODE="simple": want one of cache_statement, cache_describe, describe_exec, exec, simple_protocol`)
	_, err = inMode("postgres://u@h/db")
	require.Error(t, err)
	for _, m := range QueryModes {
		t.Setenv(QueryModeEnv, m)
		url, err := inMode("postgres://u@h/db")
		require.NoError(t, err)
		require.Equal(t, "postgres://u@h/db?default_query_exec_mode="+m, url)
	}
}
