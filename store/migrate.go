package store

import (
	"context"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/billsync/billsync/migrations"
)

// migrateLockKey is the advisory lock that keeps replicas starting together
// from applying the same migration twice.
const migrateLockKey = 0x62696c6c73796e63 // "billsync"

// Migration is one numbered schema file.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// migrationFiles returns the embedded migrations in order.
func migrationFiles() ([]Migration, error) {
	names, err := fs.Glob(migrations.FS, "*.sql")
	if err != nil {
		return nil, fmt.Errorf("list migrations: %w", err)
	}
	var out []Migration
	for _, name := range names {
		num, _, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil {
			return nil, fmt.Errorf("migration %q: name must be NNN_name.sql", name)
		}
		body, err := fs.ReadFile(migrations.FS, name)
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", name, err)
		}
		out = append(out, Migration{Version: v, Name: name, SQL: string(body)})
	}
	slices.SortFunc(out, func(a, b Migration) int { return a.Version - b.Version })
	for i := 1; i < len(out); i++ {
		if out[i].Version == out[i-1].Version {
			return nil, fmt.Errorf("migrations %s and %s share version %d", out[i-1].Name, out[i].Name, out[i].Version)
		}
	}
	return out, nil
}

// Pending reports the migrations not yet applied to the database.
func (s *Store) Pending(ctx context.Context) ([]Migration, error) {
	all, err := migrationFiles()
	if err != nil {
		return nil, err
	}
	applied, err := appliedVersions(ctx, s.pool)
	if err != nil {
		return nil, err
	}
	var out []Migration
	for _, m := range all {
		if !applied[m.Version] {
			out = append(out, m)
		}
	}
	return out, nil
}

func appliedVersions(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}) (map[int]bool, error) {
	rows, err := q.Query(ctx, `SELECT version FROM schema_migrations`)
	if err != nil {
		// The table does not exist yet: nothing is applied.
		if isUndefinedTable(err) {
			return map[int]bool{}, nil
		}
		return nil, fmt.Errorf("read schema_migrations: %w", err)
	}
	versions, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		if isUndefinedTable(err) {
			return map[int]bool{}, nil
		}
		return nil, fmt.Errorf("read schema_migrations: %w", err)
	}
	applied := make(map[int]bool, len(versions))
	for _, v := range versions {
		applied[v] = true
	}
	return applied, nil
}

// Migrate applies every pending migration, each in its own transaction.
// Each transaction first takes a transaction-scoped advisory lock, so
// concurrent starters apply one migration at a time and each re-reads what
// is applied once it has the lock; the lock ends with its transaction, so
// it works through a transaction pooler and never leaks to a pooled
// connection. It returns the names of the migrations it applied; with
// none pending it reads schema_migrations and writes nothing.
func (s *Store) Migrate(ctx context.Context) ([]string, error) {
	// Nothing pending: nothing taken, nothing created, so a runtime role
	// without CREATE on the schema starts on a migrated database.
	all, err := s.Pending(ctx)
	if err != nil || len(all) == 0 {
		return nil, err
	}
	var done []string
	for _, m := range all {
		applied := false
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(migrateLockKey)); err != nil {
				return fmt.Errorf("take lock: %w", err)
			}
			// Inside the lock: two first starters must not both create it
			// (nor the schema). A role that may not create schemas can
			// still use one made for it: created only when missing.
			if s.schema != "" {
				var exists bool
				if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, s.schema).Scan(&exists); err != nil {
					return fmt.Errorf("find schema %s: %w", s.schema, err)
				}
				if !exists {
					if _, err := tx.Exec(ctx, `CREATE SCHEMA `+pgx.Identifier{s.schema}.Sanitize()); err != nil {
						return fmt.Errorf("create schema %s: %w", s.schema, err)
					}
				}
			}
			if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
				version    integer     PRIMARY KEY,
				name       text        NOT NULL,
				applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
				return fmt.Errorf("create schema_migrations: %w", err)
			}
			if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM schema_migrations WHERE version = $1)`, m.Version).Scan(&applied); err != nil {
				return fmt.Errorf("read schema_migrations: %w", err)
			}
			if applied {
				return nil
			}
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, name) VALUES ($1, $2)`, m.Version, m.Name)
			return err
		})
		if err != nil {
			return done, fmt.Errorf("migrate: apply %s: %w", m.Name, classify(err))
		}
		if !applied {
			done = append(done, m.Name)
		}
	}
	return done, nil
}
