package store_test

import (
	"context"
	"crypto/rand"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store"
	"github.com/billsync/billsync/store/storetest"
)

// asUser is dbURL (a postgres:// URL) for another role.
func asUser(t *testing.T, dbURL, user string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	u.User = url.User(user)
	return u.String()
}

// TestLeastPrivilege: a migrating role that owns only its schema (not the
// database, not public) migrates billsync into that schema, and a runtime
// role with only the grants docs/database.md lists runs the store on it.
func TestLeastPrivilege(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := storetest.EmptyURL(t)
	admin := storetest.OpenStore(t, dbURL, store.Options{})
	suffix := strings.ToLower(rand.Text()[:10]) // roles are the cluster's, not the database's
	migrator, runtime := "mig_"+suffix, "rt_"+suffix
	for _, sql := range []string{
		`CREATE ROLE ` + migrator + ` LOGIN`,
		`CREATE ROLE ` + runtime + ` LOGIN`,
		`CREATE SCHEMA billsync AUTHORIZATION ` + migrator,
		`REVOKE CREATE ON SCHEMA public FROM PUBLIC`, // PostgreSQL 15's default, on 14 too
	} {
		_, err := admin.Pool().Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	t.Cleanup(func() {
		for _, sql := range []string{`DROP SCHEMA billsync CASCADE`, `DROP OWNED BY ` + runtime, `DROP ROLE ` + migrator, `DROP ROLE ` + runtime} {
			_, _ = admin.Pool().Exec(context.Background(), sql)
		}
	})

	// Without the schema: public is not the migrator's, as on PostgreSQL 15+.
	plain := storetest.OpenStore(t, asUser(t, dbURL, migrator), store.Options{})
	_, err := plain.Migrate(ctx)
	require.ErrorContains(t, err, "permission denied for schema public")

	mig := storetest.OpenStore(t, asUser(t, dbURL, migrator), store.Options{Schema: "billsync"})
	applied, err := mig.Migrate(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, applied)
	var tables int
	require.NoError(t, admin.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = 'billsync'`).Scan(&tables))
	require.Greater(t, tables, 10, "the tables are in billsync's schema")
	require.NoError(t, admin.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = 'public'`).Scan(&tables))
	require.Zero(t, tables)

	// The runtime role's grants, as docs/database.md lists them.
	for _, sql := range []string{
		`GRANT USAGE ON SCHEMA billsync TO ` + runtime,
		`GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA billsync TO ` + runtime,
		`GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA billsync TO ` + runtime,
	} {
		_, err := mig.Pool().Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	rt := storetest.OpenStore(t, asUser(t, dbURL, runtime), store.Options{Schema: "billsync"})
	pending, err := rt.Pending(ctx)
	require.NoError(t, err)
	require.Empty(t, pending)
	_, err = rt.StoreReceipt(ctx, reconcile.Receipt{Event: reconcile.Event{Provider: "stripe", EventID: "evt_lp",
		DedupeKey: "evt_lp", Type: "invoice.paid", CustomerID: "cus_lp", Payload: []byte(`{}`)}, Source: reconcile.SourceWebhook})
	require.NoError(t, err, "the runtime role stores a webhook")
	_, release, err := rt.SweepLock(ctx, "stripe", "")
	require.NoError(t, err, "and takes a lease")
	release()
	_, err = rt.Migrate(ctx)
	require.NoError(t, err, "nothing pending: the runtime role's migrate changes nothing")

	// A connection whose search_path does not start with the schema is
	// refused at open, naming the fix.
	_, err = admin.Pool().Exec(ctx, `ALTER ROLE `+runtime+` SET search_path = public`)
	require.NoError(t, err)
	_, err = store.Open(ctx, asUser(t, dbURL, runtime), store.Options{Schema: "billsync", Pooling: store.PoolingTransaction})
	require.ErrorContains(t, err, "ALTER ROLE "+runtime+" SET search_path = billsync")
}
