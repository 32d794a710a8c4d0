package store

import (
	"cmp"
	"context"
	"fmt"

	"github.com/billsync/billsync/reconcile"
)

// RegisterEndpoints gives each of the app's endpoints a cursor on the
// change feed, once (a registered endpoint keeps its own). A new endpoint
// starts from now: below every transaction still in flight
// (pg_snapshot_xmin), so a change written by one of them still reaches
// it. One that already has deliveries (written with their changes, before
// migrations/016_app_endpoints.sql) starts after the last change it has
// one for, or from now if that is earlier. Call it before this process
// writes changes it means each new endpoint to get.
func (s *Store) RegisterEndpoints(ctx context.Context, endpoints []string) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if _, err := s.pool.Exec(ctx, `
		INSERT INTO app_endpoints (endpoint, cursor_xid, cursor_id)
		SELECT e, start.xid, start.id
		FROM unnest($1::text[]) e
		CROSS JOIN (SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint - 1 AS xid,
		                   9223372036854775807::bigint AS id) cur
		LEFT JOIN LATERAL (
			SELECT c.xid, c.id FROM app_deliveries d JOIN account_changes c ON c.id = d.change_id
			WHERE d.endpoint = e ORDER BY c.xid DESC, c.id DESC LIMIT 1) last ON true
		-- Never after now (cur): a change after its last delivery may still
		-- commit below it; ON CONFLICT skips the deliveries it has.
		CROSS JOIN LATERAL (SELECT * FROM (VALUES (last.xid, last.id), (cur.xid, cur.id)) v (xid, id)
			WHERE xid IS NOT NULL ORDER BY xid, id LIMIT 1) start
		ON CONFLICT (endpoint) DO NOTHING`, endpoints); err != nil {
		return fmt.Errorf("register app endpoints: %w", classify(err))
	}
	return nil
}

// fanOutSQL creates the deliveries of up to $2 changes after each
// endpoint's cursor and moves the cursor past them, in one statement, so
// it needs no session state or transaction of its own (a transaction
// pooler). It pages like Changes: in (xid, id) order and only below every
// transaction still in flight, so a change that commits later can never
// land behind a cursor, and each account's changes get their deliveries in
// seq order. Replicas skip a cursor another holds; ON CONFLICT covers a
// delivery already written (by a writer of the old kind).
//
// A change whose why.trigger is $4 (an import's) gets a delivery marked
// imported, claimed after the live ones (migrations/020_delivery_priority.sql),
// or none when $3 (imports notify the app) is false. A live change makes
// the imported deliveries of its account before it live (promoted, and
// within the page, lead): it would wait for them otherwise.
const fanOutSQL = `
	WITH ep AS (
		SELECT endpoint, cursor_xid, cursor_id FROM app_endpoints
		WHERE endpoint = ANY($1) FOR UPDATE SKIP LOCKED),
	page AS (
		SELECT ep.endpoint, c.id, c.account_id, c.seq, c.xid, c.imp FROM ep CROSS JOIN LATERAL (
			SELECT id, account_id, seq, xid, coalesce(payload->'why'->>'trigger' = $4, false) AS imp
			FROM account_changes
			WHERE (xid, id) > (ep.cursor_xid, ep.cursor_id)
			  AND xid < pg_snapshot_xmin(pg_current_snapshot())::text::bigint
			ORDER BY xid, id LIMIT $2) c),
	sent AS (
		SELECT endpoint, id, account_id, seq,
			-- imported unless a later change of its account in the page is live
			bool_and(imp) OVER (PARTITION BY endpoint, account_id ORDER BY seq DESC) AS imported
		FROM page WHERE $3 OR NOT imp),
	ins AS (
		INSERT INTO app_deliveries (change_id, endpoint, account_id, seq, imported)
		SELECT id, endpoint, account_id, seq, imported FROM sent
		ON CONFLICT DO NOTHING),
	lead AS (
		SELECT endpoint, account_id, max(seq) AS seq FROM sent WHERE NOT imported GROUP BY endpoint, account_id),
	promoted AS (
		UPDATE app_deliveries d SET imported = false FROM lead
		WHERE d.endpoint = lead.endpoint AND d.account_id = lead.account_id AND d.seq < lead.seq
		  AND d.status = 'pending' AND d.imported),
	last AS (
		SELECT DISTINCT ON (endpoint) endpoint, xid, id FROM page ORDER BY endpoint, xid DESC, id DESC),
	moved AS (
		UPDATE app_endpoints a SET cursor_xid = last.xid, cursor_id = last.id
		FROM last WHERE a.endpoint = last.endpoint)
	SELECT coalesce(max(n), 0) FROM (SELECT count(*) AS n FROM page GROUP BY endpoint) p`

// defaultAnalyzeEvery is how many changes fanned out make FanOut analyze
// app_deliveries.
const defaultAnalyzeEvery = 10_000

// FanOut creates the deliveries of up to limit changes per endpoint past
// each endpoint's cursor (registered by RegisterEndpoints; an endpoint
// with none gets nothing). Changes of an import (why.trigger import) get
// deliveries claimed after the live ones, or none unless imports. more
// says some endpoint's page was full: more changes may be waiting.
//
// Every defaultAnalyzeEvery changes it fans out it analyzes
// app_deliveries: an import fills the table faster than autovacuum's
// first look (up to a minute), and until then the planner, counting the
// table as the few rows it last saw, claims by sorting every pending
// delivery (25 ms a claim at 20,000 pending, instead of 0.03 ms).
func (s *Store) FanOut(ctx context.Context, endpoints []string, limit int, imports bool) (more bool, err error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var n int
	if err := s.pool.QueryRow(ctx, fanOutSQL, endpoints, limit, imports, reconcile.TriggerImport).Scan(&n); err != nil {
		return false, fmt.Errorf("fan out changes: %w", classify(err))
	}
	if s.fannedOut.Add(int64(n)) >= cmp.Or(s.analyzeEvery, defaultAnalyzeEvery) {
		s.fannedOut.Store(0)
		// A role that does not own the table gets a warning, not an error.
		if _, err := s.pool.Exec(ctx, "ANALYZE app_deliveries"); err != nil {
			return n >= limit, fmt.Errorf("fanned out %d changes; analyze app_deliveries: %w", n, classify(err))
		}
	}
	return n >= limit, nil
}
