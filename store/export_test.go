package store

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Pool is the store's pool, for the store's own tests, which may keep SQL
// (tests elsewhere use store/storetest).
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Migrations is migrationFiles, for the store's own tests.
func Migrations() ([]Migration, error) { return migrationFiles() }

// SetAfterChangeWrite installs fn inside every change's transaction, right
// after its account_changes row (see storehook.Faults).
func (s *Store) SetAfterChangeWrite(fn func() error) { s.faults.SetAfterChangeWrite(fn) }

// SetExactRowsUnder sets the heap size under which TableSizes counts a
// table's rows (above it, the planner's estimate).
func (s *Store) SetExactRowsUnder(bytes int64) { s.exactRowsUnder = bytes }

// SetAnalyzeEvery sets how many changes fanned out make FanOut analyze
// app_deliveries.
func (s *Store) SetAnalyzeEvery(changes int64) { s.analyzeEvery = changes }

// OpenTraced opens a store on url (with the defaults) whose connections
// hand every statement to tracer: the store's own tests count what a call
// sends.
func OpenTraced(ctx context.Context, url string, tracer pgx.QueryTracer) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.ConnConfig.Tracer = tracer
	return openConfig(ctx, cfg, url, Options{})
}
