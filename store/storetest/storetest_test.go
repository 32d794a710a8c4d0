package storetest_test

import (
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/store/internal/storehook"
	"github.com/billsync/billsync/store/storetest"
)

func TestMain(m *testing.M) { os.Exit(storetest.Main(m)) }

func TestNewStoreIsMigrated(t *testing.T) {
	t.Parallel()
	pool := storehook.Of(storetest.NewStore(t)).Pool
	var versions []int
	rows, err := pool.Query(t.Context(), `SELECT version FROM schema_migrations ORDER BY version`)
	require.NoError(t, err)
	versions, err = pgx.CollectRows(rows, pgx.RowTo[int])
	require.NoError(t, err)
	require.Equal(t, 1, versions[0])
	for _, table := range []string{"accounts", "inbox_events", "receipts", "reconcile_queue", "ledger", "reconcile_log", "sweep_runs"} {
		var n int
		require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM `+table).Scan(&n), table)
		require.Zero(t, n, "table %s of a fresh database has rows", table)
	}
}

func TestNewStoreDatabasesAreSeparate(t *testing.T) {
	t.Parallel()
	a, b := storehook.Of(storetest.NewStore(t)).Pool, storehook.Of(storetest.NewStore(t)).Pool
	var dbA, dbB string
	require.NoError(t, a.QueryRow(t.Context(), `SELECT current_database()`).Scan(&dbA))
	require.NoError(t, b.QueryRow(t.Context(), `SELECT current_database()`).Scan(&dbB))
	require.NotEqual(t, dbA, dbB)

	_, err := a.Exec(t.Context(), `INSERT INTO accounts (provider, customer_id) VALUES ('stripe', 'cus_only_in_a')`)
	require.NoError(t, err)
	var inA, inB int
	require.NoError(t, a.QueryRow(t.Context(), `SELECT count(*) FROM accounts`).Scan(&inA))
	require.NoError(t, b.QueryRow(t.Context(), `SELECT count(*) FROM accounts`).Scan(&inB))
	require.Equal(t, 1, inA)
	require.Zero(t, inB, "a row written in one test database shows in another")
}

// The database behind URL is dropped when the test ends.
func TestURLDroppedAtCleanup(t *testing.T) {
	t.Parallel()
	var url string
	t.Run("inner", func(t *testing.T) {
		url = storetest.URL(t)
		conn, err := pgx.Connect(t.Context(), url)
		require.NoError(t, err)
		require.NoError(t, conn.Close(t.Context()))
	})
	_, err := pgx.Connect(t.Context(), url)
	require.ErrorContains(t, err, "does not exist")
}

// BILLSYNC_TEST_QUERY_MODE sets pgx's query mode on the URLs and stores
// handed out; an unknown name fails the test that asks for a database.
func TestQueryModeEnv(t *testing.T) {
	t.Setenv(storetest.QueryModeEnv, "simple_protocol")
	cfg, err := pgx.ParseConfig(storetest.URL(t))
	require.NoError(t, err)
	require.Equal(t, pgx.QueryExecModeSimpleProtocol, cfg.DefaultQueryExecMode)
	require.Equal(t, pgx.QueryExecModeSimpleProtocol,
		storehook.Of(storetest.NewStore(t)).Pool.Config().ConnConfig.DefaultQueryExecMode)

	t.Setenv(storetest.QueryModeEnv, "")
	cfg, err = pgx.ParseConfig(storetest.URL(t))
	require.NoError(t, err)
	require.Equal(t, pgx.QueryExecModeCacheStatement, cfg.DefaultQueryExecMode)
}
