package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/billsync/billsync/reconcile"
)

// Imports reports, for each of providers in order, whether its own
// customers (the platform's: a Stripe Connect account's runs are its own)
// were ever all listed (a run succeeded) and its run in progress, if any:
// one statement on sweep_runs' (provider, account, id DESC) index, cheap enough
// for the app API's answer to an unknown user.
func (s *Store) Imports(ctx context.Context, providers []string) ([]reconcile.ImportState, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, `
		SELECT p.provider,
		       EXISTS (SELECT 1 FROM sweep_runs d WHERE d.provider = p.provider AND d.account = '' AND d.status = 'succeeded'),
		       r.id, r.kind, r.started_at, r.heartbeat_at, r.seen, r.changed, r.failed, r.progress::float8
		FROM unnest($1::text[]) WITH ORDINALITY p (provider, n)
		LEFT JOIN LATERAL (
			SELECT * FROM sweep_runs WHERE provider = p.provider AND account = '' AND status = 'running'
			ORDER BY id DESC LIMIT 1) r ON true
		ORDER BY p.n`, providers)
	if err != nil {
		return nil, fmt.Errorf("imports: %w", classify(err))
	}
	states, err := pgx.CollectRows(rows, scanImportState)
	if err != nil {
		return nil, fmt.Errorf("imports: %w", classify(err))
	}
	return states, nil
}

// scanImportState reads a row of Imports: the run's columns are NULL
// when none runs.
func scanImportState(r pgx.CollectableRow) (reconcile.ImportState, error) {
	var st reconcile.ImportState
	var (
		id                   *int64
		kind                 *string
		started, heartbeat   *time.Time
		seen, healed, failed *int
		progress             *float64
	)
	if err := r.Scan(&st.Provider, &st.Imported, &id, &kind, &started, &heartbeat, &seen, &healed, &failed, &progress); err != nil {
		return st, err
	}
	if id != nil {
		st.Running = &reconcile.SweepRecord{ID: *id, Provider: st.Provider, Kind: *kind, Status: "running",
			StartedAt: *started, HeartbeatAt: *heartbeat, Seen: *seen, Healed: *healed, Failed: *failed, Progress: progress}
	}
	return st, nil
}
