package store_test

import (
	"context"
	"os"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/store"
	"github.com/billsync/billsync/store/storetest"
)

func TestMain(m *testing.M) { os.Exit(storetest.Main(m)) }

func TestMigrationsAreNumberedInOrder(t *testing.T) {
	ms, err := store.Migrations()
	require.NoError(t, err)
	require.NotEmpty(t, ms)
	// Numbers are assigned to branches in advance (docs), so a branch may
	// ship 010 before 009 is merged: increasing and unique, gaps allowed.
	for i, m := range ms {
		require.Greater(t, m.Version, i, "migration %s: versions start at 1 and increase", m.Name)
		if i > 0 {
			require.Greater(t, m.Version, ms[i-1].Version, "migration %s", m.Name)
		}
	}
}

// TestMigrateConcurrently starts several "replicas" on an empty database at
// once: each migration must be applied exactly once, and a second run is a
// no-op.
func TestMigrateConcurrently(t *testing.T) {
	ctx := context.Background()
	url := storetest.EmptyURL(t)
	const replicas = 4
	applied := make([][]string, replicas)
	errs := make([]error, replicas)
	var wg sync.WaitGroup
	for i := range replicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := store.Open(ctx, url, store.Options{})
			if err != nil {
				errs[i] = err
				return
			}
			defer st.Close()
			applied[i], errs[i] = st.Migrate(ctx)
		}()
	}
	wg.Wait()
	all, err := store.Migrations()
	require.NoError(t, err)
	total := 0
	for i := range replicas {
		require.NoError(t, errs[i])
		total += len(applied[i])
	}
	require.Equal(t, len(all), total, "every migration applied exactly once across replicas")

	st := storetest.OpenStore(t, url, store.Options{})
	var rows int
	require.NoError(t, st.Pool().QueryRow(ctx, `SELECT count(*) FROM schema_migrations`).Scan(&rows))
	require.Equal(t, len(all), rows)
	pending, err := st.Pending(ctx)
	require.NoError(t, err)
	require.Empty(t, pending)
	again, err := st.Migrate(ctx)
	require.NoError(t, err)
	require.Empty(t, again)
}
