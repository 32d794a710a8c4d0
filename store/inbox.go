package store

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/billsync/billsync/reconcile"
)

// StoreReceipt stores one verified webhook receipt atomically: the event
// (deduplicated on provider and dedupe key), its receipts row,
// and, for a new event that names a customer (or a related object's key,
// see reconcile.Related), the customer's queue row.
// It is one statement, so one round trip and one implicit transaction; it
// returns only after the commit. Any failure to reach the database or to
// commit wraps reconcile.ErrStoreUnavailable.
func (s *Store) StoreReceipt(ctx context.Context, d reconcile.Receipt) (reconcile.Stored, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	ev := d.Event
	status, outcome := reconcile.EventPending, (*string)(nil)
	if ev.IgnoreReason != "" {
		status, outcome = reconcile.EventIgnored, &ev.IgnoreReason
	}
	var st reconcile.Stored
	var inserted bool
	var authAccounts []string
	var authAuthorized []bool
	var authAt []time.Time
	if a := ev.Authorization; a != nil {
		authAccounts, authAuthorized, authAt = []string{a.Account}, []bool{a.Authorized}, []time.Time{a.At}
	}
	feedAccount, _ := reconcile.SplitConnected(ev.DedupeKey)
	customerAccount, _ := reconcile.SplitConnected(ev.CustomerID)
	// xmax = 0 only on a freshly inserted row: it tells a new event from a
	// copy. The queue upsert is enqueueSQL, for a new pending event with a
	// customer only: it settles the event's hints onto the row.
	err := s.pool.QueryRow(ctx, `
		WITH ev AS (
			INSERT INTO inbox_events
				(provider, dedupe_key, event_id, type, customer_id, event_time, api_version, payload, status, outcome, processed_at, expect, user_ref, source)
			VALUES ($1, $2, $3, $4, NULLIF($5, ''), $6, NULLIF($7, ''), $8, $9, $10,
				CASE WHEN $9 = 'ignored' THEN now() END, $13::jsonb, NULLIF($14, ''), $15)
			ON CONFLICT (provider, dedupe_key) DO UPDATE
				SET seen_count = inbox_events.seen_count + 1, last_seen_at = now()
			RETURNING id, xmax = 0 AS inserted, seen_count, status, customer_id
		), receipt AS (
			INSERT INTO receipts (event_id, delivery_id, remote_addr, duplicate, source)
			SELECT id, NULLIF($11, ''), NULLIF($12, ''), NOT inserted, $15 FROM ev
		), queue AS (
			`+enqueueSQL(`SELECT $1::text, customer_id, $15::text, now(), now(),
				NULLIF($14, ''), $6::timestamptz, id, $13::jsonb, $6::timestamptz, id FROM ev
				WHERE inserted AND status = 'pending' AND customer_id IS NOT NULL`)+`
		), ref AS (
			-- An event stored as ignored queues nothing, but the user
			-- reference it names is still the customer's newest.
			UPDATE reconcile_queue q SET user_ref = $14, user_ref_at = $6::timestamptz, user_ref_event = ev.id
			FROM ev WHERE ev.inserted AND ev.status <> 'pending' AND $14 <> '' AND q.provider = $1 AND q.customer_id = ev.customer_id
			  AND (q.user_ref IS NULL
			    OR (coalesce($6::timestamptz, '-infinity'), ev.id) > (coalesce(q.user_ref_at, '-infinity'), q.user_ref_event))
		), caught AS (
			-- An event the feed stores first is a webhook late or lost:
			-- counted with the event, so the count never lags its account.
			-- The feed of the event's own account: a connected account's
			-- event is keyed under it ("acct_…/evt_…"), the platform's is not.
			UPDATE events_feed SET caught = caught + 1
			WHERE provider = $1 AND account = $20 AND $15 = 'feed' AND (SELECT inserted FROM ev)
		), authorized AS (
			-- A connected account's authorisation event is recorded with
			-- the event (a copy or an older event changes nothing).
			`+saveAuthorizationsSQL("$1", "$17", "$18", "$19")+`
		), txn AS (
			-- A payment counts toward the read allocation once, by the day
			-- it first arrived (see ReportSpend): a connected account's
			-- customer's toward the connected accounts' allocation.
			INSERT INTO provider_transactions (provider, day, transactions, connect_transactions)
			SELECT $1, `+utcDay+`, (NOT $21::boolean)::int, ($21::boolean)::int FROM ev WHERE inserted AND $16
			ON CONFLICT (provider, day) DO UPDATE SET
				transactions = provider_transactions.transactions + excluded.transactions,
				connect_transactions = provider_transactions.connect_transactions + excluded.connect_transactions
		)
		SELECT id, inserted, seen_count, status FROM ev`,
		ev.Provider, ev.DedupeKey, ev.EventID, ev.Type, ev.CustomerID, nullTime(ev.Time),
		ev.APIVersion, ev.Payload, status, outcome, d.DeliveryID, d.RemoteAddr, expectDoc(ev.Expect), ev.UserRef,
		cmp.Or(d.Source, reconcile.SourceWebhook), ev.Transaction,
		authAccounts, authAuthorized, authAt, feedAccount, customerAccount != "",
	).Scan(&st.InboxID, &inserted, &st.SeenCount, &st.Status)
	if err != nil {
		return reconcile.Stored{}, fmt.Errorf("store %s event %s: %w", ev.Provider, ev.DedupeKey, classify(err))
	}
	st.Duplicate = !inserted
	if !st.Duplicate && st.Status == reconcile.EventPending && ev.CustomerID != "" {
		s.notify(ctx)
	}
	return st, nil
}

// expectDoc is an event's expect column: JSON text for a ::jsonb cast, nil
// (NULL) for none. Not the struct itself: in the exec and simple_protocol
// query modes the server does not describe the statement, so pgx has no
// type to encode a struct as (and a []byte would go out as bytea).
func expectDoc(e *reconcile.Expectation) *string {
	if e == nil {
		return nil
	}
	b, _ := json.Marshal(e) // plain struct: cannot fail
	doc := string(b)
	return &doc
}

// enqueue upserts the queue rows src selects, making each due and
// recording the newest request; a dead row comes back to life with its
// attempts reset: a new signal deserves a fresh try. src's columns are
// provider, customer_id, trigger, requested_at, due_at, then the hints of
// the event behind the request (noHints when none): user_ref, its order
// key (event time, inbox id), expect, its order key.
//
// The hints are settled here, at intake, so a claim reads them from the
// row: of the row's and the request's, the newest by the provider's event
// time wins (a copy arriving out of order loses), and a row being born
// takes the user reference of the customer's newest stored event naming
// one, whatever its status: the row of a job that answered that event is
// gone, and the account may not hold the reference (an ignored reconcile
// writes none). Served by the partial index inbox_events_user_ref.
func enqueueSQL(src string) string {
	return `INSERT INTO reconcile_queue AS q (provider, customer_id, trigger, requested_at, due_at,
			user_ref, user_ref_at, user_ref_event, expect, expect_at, expect_event)
		SELECT s.provider, s.customer_id, s.trigger, s.requested_at, s.due_at,
			r.user_ref, r.at, r.event, s.expect, s.expect_at, s.expect_event
		FROM (` + src + `) AS s (provider, customer_id, trigger, requested_at, due_at,
			user_ref, user_ref_at, user_ref_event, expect, expect_at, expect_event)
		LEFT JOIN LATERAL (
			SELECT * FROM (
				SELECT s.user_ref, s.user_ref_at, s.user_ref_event WHERE s.user_ref IS NOT NULL
				UNION ALL
				(SELECT e.user_ref, e.event_time, e.id FROM inbox_events e
				 WHERE e.provider = s.provider AND e.customer_id = s.customer_id AND e.user_ref IS NOT NULL
				 ORDER BY e.event_time DESC NULLS LAST, e.id DESC LIMIT 1)) c (user_ref, at, event)
			ORDER BY at DESC NULLS LAST, event DESC LIMIT 1) r ON true
		ON CONFLICT (provider, customer_id) DO UPDATE SET
			trigger      = excluded.trigger,
			requested_at = greatest(q.requested_at, excluded.requested_at),
			due_at       = least(q.due_at, excluded.due_at),
			attempts     = CASE WHEN q.status = 'dead' THEN 0 ELSE q.attempts END,
			status       = 'pending'` + keepNewest("user_ref") + keepNewest("expect")
}

// noHints are the hint columns of a request no event names (enqueueSQL).
const noHints = `NULL::text, NULL::timestamptz, NULL::bigint, NULL::jsonb, NULL::timestamptz, NULL::bigint`

// keepNewest is the upsert's SET clauses for the hint col (with col_at,
// col_event): the incoming one when it is newer than the row's, by event
// time (none is oldest) then inbox id, else the row's.
func keepNewest(col string) string {
	newer := fmt.Sprintf(`excluded.%[1]s IS NOT NULL AND (q.%[1]s IS NULL
				OR (coalesce(excluded.%[1]s_at, '-infinity'), excluded.%[1]s_event) > (coalesce(q.%[1]s_at, '-infinity'), q.%[1]s_event))`, col)
	var b strings.Builder
	for _, c := range []string{col, col + "_at", col + "_event"} {
		fmt.Fprintf(&b, ",\n\t\t\t%s = CASE WHEN %s THEN excluded.%s ELSE q.%s END", c, newer, c, c)
	}
	return b.String()
}

// enqueue makes the customer's queue row due now for trigger.
func enqueue(ctx context.Context, tx pgx.Tx, provider, customerID, trigger string) error {
	_, err := tx.Exec(ctx, enqueueSQL(`SELECT $1::text, $2::text, $3::text, now(), now(), `+noHints),
		provider, customerID, trigger)
	if err != nil {
		return fmt.Errorf("enqueue %s customer %s: %w", provider, customerID, err)
	}
	return nil
}
