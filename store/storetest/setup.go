package storetest

import (
	"time"

	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store"
)

// Setup: state a test puts in place behind billsync's back, as drift, a
// lost webhook, a failing provider or another replica would. Each helper
// fails the test when it finds nothing to change.

// DriftAccount sets the account's plan and, unless status is empty, its
// status, without a reconcile: drift that a resync or a sweep must heal.
func DriftAccount(t TB, st *store.Store, accountID int64, plan, status string) {
	t.Helper()
	change(t, st, 1, `UPDATE accounts SET plan = $2, status = coalesce(nullif($3, ''), status) WHERE id = $1`,
		accountID, plan, status)
}

// LoseWebhooks deletes the customer's stored events (their receipts go
// with them) and its queue row, as if none of its webhooks had arrived.
func LoseWebhooks(t TB, st *store.Store, provider, customerID string) {
	t.Helper()
	change(t, st, someRows, `DELETE FROM inbox_events WHERE provider = $1 AND customer_id = $2`, provider, customerID)
	// The queue row is there only while the customer awaits a reconcile.
	change(t, st, anyRows, `DELETE FROM reconcile_queue WHERE provider = $1 AND customer_id = $2`, provider, customerID)
}

// SetQueueDead makes the customer's queue row dead after attempts failed
// ones, last failing with lastError (none when empty), as a worker that gave
// up leaves it; the row is created when there is none.
func SetQueueDead(t TB, st *store.Store, provider, customerID string, attempts int, lastError string) {
	t.Helper()
	change(t, st, 1, `
		INSERT INTO reconcile_queue (provider, customer_id, status, attempts, last_error)
		VALUES ($1, $2, 'dead', $3, nullif($4, ''))
		ON CONFLICT (provider, customer_id) DO UPDATE
		SET status = 'dead', attempts = excluded.attempts, last_error = excluded.last_error,
		    locked_by = NULL, locked_until = NULL`,
		provider, customerID, attempts, lastError)
}

// LeaseQueueRow leases the customer's queue row to worker for lease from
// the database's now, as a worker of another process holding it would.
func LeaseQueueRow(t TB, st *store.Store, provider, customerID, worker string, lease time.Duration) {
	t.Helper()
	change(t, st, 1, `UPDATE reconcile_queue SET locked_by = $3, locked_until = now() + make_interval(secs => $4)
		WHERE provider = $1 AND customer_id = $2`, provider, customerID, worker, lease.Seconds())
}

// SetEventStatus answers the stored event with status and outcome, as a
// reconcile would, without one.
func SetEventStatus(t TB, st *store.Store, eventID int64, status reconcile.EventStatus, outcome string) {
	t.Helper()
	change(t, st, 1, `UPDATE inbox_events SET status = $2, outcome = nullif($3, '') WHERE id = $1`, eventID, status, outcome)
}

// SetEventPayload replaces the stored event's body.
func SetEventPayload(t TB, st *store.Store, eventID int64, payload []byte) {
	t.Helper()
	change(t, st, 1, `UPDATE inbox_events SET payload = $2 WHERE id = $1`, eventID, payload)
}

// InsertEvent stores e as it is (provider, dedupe key, event id, type,
// customer, payload, status, outcome; no receipt, no queue row) and returns
// its id: an event the intake would not store that way.
func InsertEvent(t TB, st *store.Store, e EventRow) int64 {
	t.Helper()
	var id int64
	queryRow(t, st, `
		INSERT INTO inbox_events (provider, dedupe_key, event_id, type, customer_id, payload, status, outcome)
		VALUES ($1, $2, $3, $4, nullif($5, ''), $6, $7, nullif($8, '')) RETURNING id`,
		[]any{e.Provider, e.DedupeKey, e.EventID, e.Type, e.CustomerID, e.Payload, e.Status, e.Outcome}, &id)
	return id
}

// ExpireSessions makes every console session expired (their rows stay).
func ExpireSessions(t TB, st *store.Store) {
	t.Helper()
	change(t, st, someRows, `UPDATE console_sessions SET expires_at = now() - interval '1 second'`)
}

// Checkpoint forces a checkpoint: the test clusters commit asynchronously,
// so a test that kills the server first makes what is already written
// durable.
func Checkpoint(t TB, st *store.Store) {
	t.Helper()
	change(t, st, 0, `CHECKPOINT`)
}

// AgeCustomer moves the customer's events (received, last seen,
// processed), their receipts and its reconcile log rows age into the past,
// as if they had been written then: what a prune would find.
func AgeCustomer(t TB, st *store.Store, provider, customerID string, age time.Duration) {
	t.Helper()
	change(t, st, someRows, `
		WITH e AS (UPDATE inbox_events SET received_at = now() - make_interval(secs => $3),
		               last_seen_at = now() - make_interval(secs => $3),
		               processed_at = CASE WHEN processed_at IS NOT NULL THEN now() - make_interval(secs => $3) END
		           WHERE provider = $1 AND customer_id = $2 RETURNING id),
		     r AS (UPDATE receipts SET received_at = now() - make_interval(secs => $3) WHERE event_id IN (SELECT id FROM e))
		UPDATE reconcile_log SET created_at = now() - make_interval(secs => $3)
		WHERE provider = $1 AND customer_id = $2`, provider, customerID, age.Seconds())
}

// AgeFeedPoll moves provider's last feed poll age into the past, as if
// the feed had stopped then.
func AgeFeedPoll(t TB, st *store.Store, provider string, age time.Duration) {
	t.Helper()
	change(t, st, 1, `UPDATE events_feed SET polled_at = now() - make_interval(secs => $2) WHERE provider = $1 AND account = ''`,
		provider, age.Seconds())
}

// SetFeedCaught sets how many events provider's feed has caught, as if
// that many had been stored by the feed before any webhook.
func SetFeedCaught(t TB, st *store.Store, provider string, n int64) {
	t.Helper()
	change(t, st, 1, `UPDATE events_feed SET caught = $2 WHERE provider = $1 AND account = ''`, provider, n)
}

// AgeAppDeliveries moves every change and delivery to the app age into
// the past, as if the change had been written then (its delivery may not
// be created yet).
func AgeAppDeliveries(t TB, st *store.Store, age time.Duration) {
	t.Helper()
	change(t, st, someRows, `UPDATE account_changes SET created_at = now() - make_interval(secs => $1)`, age.Seconds())
	change(t, st, anyRows, `UPDATE app_deliveries SET created_at = now() - make_interval(secs => $1)`, age.Seconds())
}

// AgeAccountChanges moves the changes of provider's customer's account
// into the past, as if written then.
func AgeAccountChanges(t TB, st *store.Store, provider, customerID string, age time.Duration) {
	t.Helper()
	change(t, st, someRows, `
		UPDATE account_changes c SET created_at = now() - make_interval(secs => $3)
		FROM accounts a WHERE a.id = c.account_id AND a.provider = $1 AND a.customer_id = $2`, provider, customerID, age.Seconds())
}

// AgeConnectedFeedPoll moves the last poll of a connected account's feed
// age into the past.
func AgeConnectedFeedPoll(t TB, st *store.Store, provider, account string, age time.Duration) {
	t.Helper()
	change(t, st, 1, `UPDATE events_feed SET polled_at = now() - make_interval(secs => $3) WHERE provider = $1 AND account = $2`,
		provider, account, age.Seconds())
}

// EndConnectBackoff ends the backoff of a connected account's feed now,
// as if its wait had run out.
func EndConnectBackoff(t TB, st *store.Store, provider, account string) {
	t.Helper()
	change(t, st, 1, `UPDATE events_feed SET retry_at = now() WHERE provider = $1 AND account = $2 AND retry_at IS NOT NULL`,
		provider, account)
}

// AgeSweepRuns moves the start of every run of provider's account
// (a connected account's, "" the platform's) age into the past.
func AgeSweepRuns(t TB, st *store.Store, provider, account string, age time.Duration) {
	t.Helper()
	queryRow(t, st, `WITH aged AS (UPDATE sweep_runs SET started_at = started_at - make_interval(secs => $3)
		WHERE provider = $1 AND account = $2 RETURNING 1) SELECT count(*) FROM aged`,
		[]any{provider, account, age.Seconds()}, new(int))
}
