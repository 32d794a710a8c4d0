-- The hints a job carries from its customer's events, settled onto the
-- queue row at intake instead of read back from inbox_events by two
-- correlated subqueries in every claim:
--   user_ref: the app's reference named by the customer's newest stored
--     event that names one, whatever its status (Kinde's reads do not
--     carry it); its event's order key, (event time, inbox id), lets a copy
--     arriving out of order lose to a newer one.
--   expect: the newest pending event's expectation of the customer's
--     subscription (a stale read is read again), with its order key.
ALTER TABLE reconcile_queue
    ADD COLUMN user_ref text,
    ADD COLUMN user_ref_at timestamptz,
    ADD COLUMN user_ref_event bigint,
    ADD COLUMN expect jsonb,
    ADD COLUMN expect_at timestamptz,
    ADD COLUMN expect_event bigint;

-- Rows queued before this migration take their hints from the events, as
-- the claim read them, so an upgrade in the middle of a queue loses none.
UPDATE reconcile_queue q SET user_ref = r.user_ref, user_ref_at = r.event_time, user_ref_event = r.id
FROM (SELECT DISTINCT ON (provider, customer_id) provider, customer_id, user_ref, event_time, id
      FROM inbox_events WHERE user_ref IS NOT NULL
      ORDER BY provider, customer_id, event_time DESC NULLS LAST, id DESC) r
WHERE r.provider = q.provider AND r.customer_id = q.customer_id;

UPDATE reconcile_queue q SET expect = x.expect, expect_at = x.event_time, expect_event = x.id
FROM (SELECT DISTINCT ON (provider, customer_id) provider, customer_id, expect, event_time, id
      FROM inbox_events WHERE status = 'pending' AND expect IS NOT NULL
      ORDER BY provider, customer_id, event_time DESC NULLS LAST, id DESC) x
WHERE x.provider = q.provider AND x.customer_id = q.customer_id;
