-- The app's endpoints, each with its own cursor on the change feed.
--
-- Deliveries were written with each change, for the endpoints the writing
-- process was configured with: a change written by `billsync resync`,
-- `sweep` or `replay` run without BILLSYNC_APP_WEBHOOK_URL went to no
-- endpoint. Now serve's deliverer creates them: it pages account_changes
-- after each endpoint's cursor in feed order, (xid, id) below
-- pg_snapshot_xmin (migrations/015_change_order.sql), so whichever process
-- wrote a change, every endpoint gets it once, and in seq order per
-- account. A row stays when its endpoint is no longer configured: its
-- cursor then holds back the pruning of changes after it
-- (docs/app-changes.md).
CREATE TABLE app_endpoints (
    endpoint    text        PRIMARY KEY,
    cursor_xid  bigint      NOT NULL,
    cursor_id   bigint      NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
