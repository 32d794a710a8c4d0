package storetest

import (
	"github.com/jackc/pgx/v5"

	"github.com/billsync/billsync/store"
)

// Counts returns the number of rows of every table of st's database but
// schema_migrations: what a refused or failed request must leave at zero,
// or as it was.
func Counts(t TB, st *store.Store) map[string]int {
	t.Helper()
	names := collect(t, st, pgx.RowTo[string],
		`SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND tablename <> 'schema_migrations' ORDER BY 1`)
	if len(names) == 0 {
		fatalf(t, "storetest: row counts: no tables")
	}
	counts := make(map[string]int, len(names))
	for _, n := range names {
		var c int
		queryRow(t, st, `SELECT count(*) FROM `+pgx.Identifier{n}.Sanitize(), nil, &c)
		counts[n] = c
	}
	return counts
}
