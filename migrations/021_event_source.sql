-- Where an event was first stored from (issue 28): a webhook receipt or
-- the events feed's listing, the source of its first (non-duplicate)
-- receipt. The freshness SLI (billsync_trigger_freshness_seconds) is told
-- per source when a reconcile answers the event, and receipts may be pruned
-- before that, so the event row keeps it.
ALTER TABLE inbox_events ADD COLUMN source text NOT NULL DEFAULT 'webhook'
    CHECK (source IN ('webhook', 'feed'));

-- Events still waiting for an answer take their first receipt's source;
-- answered ones are never measured again.
UPDATE inbox_events e SET source = 'feed'
FROM receipts r
WHERE r.event_id = e.id AND NOT r.duplicate AND r.source = 'feed' AND e.status IN ('pending', 'dead');
