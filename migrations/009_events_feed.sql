-- The events feed (a provider's list of events, read as a second signal
-- beside webhooks): where each receipt came from, the queue trigger it
-- leaves, and the feed's cursor and health per provider.

-- A receipt says which source brought the event: a webhook delivery, or the
-- feed's listing. One event row per event id whatever its sources.
ALTER TABLE receipts ADD COLUMN source text NOT NULL DEFAULT 'webhook'
    CHECK (source IN ('webhook', 'feed'));
-- The feed asks, for each page it lists, which events it has already
-- stored (a re-read of its overlap window adds no receipt).
CREATE INDEX receipts_feed ON receipts (event_id) WHERE source = 'feed';

ALTER TABLE reconcile_queue DROP CONSTRAINT reconcile_queue_trigger_check;
ALTER TABLE reconcile_queue ADD CONSTRAINT reconcile_queue_trigger_check
    CHECK (trigger IN ('webhook', 'feed', 'sweep', 'resync', 'replay'));

-- One row per provider whose feed has polled. cursor is the newest event
-- time the feed has stored (it only moves past stored events; each poll
-- lists from cursor minus the overlap window). The rest is health, read by
-- the metrics and the console on every replica alike.
CREATE TABLE events_feed (
    provider          text        PRIMARY KEY,
    cursor_at         timestamptz NOT NULL,
    newest_event_at   timestamptz,
    polled_at         timestamptz NOT NULL DEFAULT now(),
    polls             bigint      NOT NULL DEFAULT 0,
    caught            bigint      NOT NULL DEFAULT 0,
    undelivered       integer     NOT NULL DEFAULT 0,
    endpoint_id       text,
    endpoint_enabled  boolean
);
