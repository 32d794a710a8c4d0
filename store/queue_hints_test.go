package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store"
	"github.com/billsync/billsync/store/storetest"
)

// hinted stores a new event of customer cus_k, of the provider's time at,
// naming ref (may be empty) and expecting sub's status (none when empty).
func hinted(t *testing.T, st *store.Store, key string, at time.Time, ref, status string) {
	t.Helper()
	ev := reconcile.Event{Provider: "kinde", DedupeKey: key, EventID: key, Type: "customer.plan_changed",
		CustomerID: "cus_k", Time: at, UserRef: ref, Payload: []byte(`{}`)}
	if status != "" {
		ev.Expect = &reconcile.Expectation{SubscriptionID: "sub_1", Status: status}
	}
	_, err := st.StoreReceipt(context.Background(), reconcile.Receipt{Event: ev})
	require.NoError(t, err)
}

// TestClaimReadsTheHintsTheIntakeSettled: the user reference and the
// expectation a job carries are the newest events' by the provider's time,
// whatever order the copies arrive in, settled on the queue row as they
// arrive: a claim does not read the events (it still has them once the
// events are gone).
func TestClaimReadsTheHintsTheIntakeSettled(t *testing.T) {
	ctx := context.Background()
	st := storetest.NewStore(t)
	t0 := time.Date(2026, 11, 14, 10, 0, 0, 0, time.UTC)
	hinted(t, st, "evt_2", t0.Add(2*time.Hour), "kp_new", "active")
	hinted(t, st, "evt_1", t0.Add(time.Hour), "kp_old", "past_due") // older, arrives later
	hinted(t, st, "evt_3", t0.Add(3*time.Hour), "", "")             // newest, names nothing
	hinted(t, st, "evt_1", t0.Add(time.Hour), "kp_old", "past_due") // a copy

	job := claimOne(t, st)
	require.Equal(t, "kp_new", job.UserRef, "the newest event naming a reference")
	require.Equal(t, &reconcile.Expectation{SubscriptionID: "sub_1", Status: "active"}, job.Expect, "the newest event expecting something")

	// The events go (pruned, say): the job still has its hints.
	_, err := st.Pool().Exec(ctx, `DELETE FROM inbox_events WHERE customer_id = 'cus_k'`)
	require.NoError(t, err)
	require.NoError(t, st.Release(ctx, "test", []reconcile.Job{job}))
	again := claimOne(t, st)
	require.Equal(t, "kp_new", again.UserRef)
	require.Equal(t, job.Expect, again.Expect)
}

// TestQueueRowBornTakesTheNewestUserRef: a reconcile that answered the
// only event naming the user completes its job (the row goes); the next
// request for the customer, naming none, is still the user's (issue 16:
// the newest stored event naming a reference, whatever its status). An
// expectation does not outlive its event's answer.
func TestQueueRowBornTakesTheNewestUserRef(t *testing.T) {
	ctx := context.Background()
	st := storetest.NewStore(t)
	t0 := time.Date(2026, 11, 14, 10, 0, 0, 0, time.UTC)
	hinted(t, st, "evt_1", t0, "kp_a", "active")
	job := claimOne(t, st)
	_, err := st.Ignore(ctx, job, dbNow(t, st), reconcile.Outcome{Result: reconcile.ResultIgnored, Text: "ignored: no plan maps it"})
	require.NoError(t, err)
	require.Zero(t, storetest.Counts(t, st)["reconcile_queue"], "the job is complete")

	hinted(t, st, "evt_2", t0.Add(time.Hour), "", "")
	job = claimOne(t, st)
	require.Equal(t, "kp_a", job.UserRef, "from the answered event")
	require.Nil(t, job.Expect, "the answered event expects nothing any more")

	require.NoError(t, st.Release(ctx, "test", []reconcile.Job{job}))
	held, err := st.Hold(ctx, "kinde", "cus_k", reconcile.TriggerResync, "cli", time.Minute)
	require.NoError(t, err)
	require.Equal(t, "kp_a", held.UserRef)
}

// TestMigrationSettlesQueuedHints: rows queued before the hints moved onto
// the queue row (migration 018) take them from their events on upgrade,
// so a queue drained after it loses none.
func TestMigrationSettlesQueuedHints(t *testing.T) {
	ctx := context.Background()
	st := storetest.OpenStore(t, storetest.EmptyURL(t), store.Options{})
	ms, err := store.Migrations()
	require.NoError(t, err)
	require.NoError(t, pgx.BeginFunc(ctx, st.Pool(), func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `CREATE TABLE schema_migrations (version integer PRIMARY KEY, name text NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
			return err
		}
		for _, m := range ms {
			if m.Version >= 18 {
				break
			}
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return fmt.Errorf("%s: %w", m.Name, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, name) VALUES ($1, $2)`, m.Version, m.Name); err != nil {
				return err
			}
		}
		// The queue as 017 kept it: the hints only on the events.
		_, err := tx.Exec(ctx, `
			INSERT INTO inbox_events (provider, dedupe_key, event_id, type, customer_id, event_time, payload, status, outcome, user_ref, expect)
			VALUES ('kinde', 'evt_1', 'evt_1', 't', 'cus_k', '2026-11-14T11:00:00Z', '\x7b7d', 'ignored', 'ignored: no plan', 'kp_a', NULL),
			       ('kinde', 'evt_2', 'evt_2', 't', 'cus_k', '2026-11-14T12:00:00Z', '\x7b7d', 'pending', NULL, NULL, '{"subscription_id": "sub_1", "status": "active"}'),
			       ('kinde', 'evt_3', 'evt_3', 't', 'cus_k', '2026-11-14T10:00:00Z', '\x7b7d', 'pending', NULL, 'kp_older', '{"subscription_id": "sub_1", "status": "trialing"}');
			INSERT INTO reconcile_queue (provider, customer_id) VALUES ('kinde', 'cus_k')`)
		return err
	}))
	applied, err := st.Migrate(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"018_queue_hints.sql"}, applied[:1])

	job := claimOne(t, st)
	require.Equal(t, "kp_a", job.UserRef, "the newest event naming one, answered or not")
	require.Equal(t, &reconcile.Expectation{SubscriptionID: "sub_1", Status: "active"}, job.Expect, "the newest pending one")
}
