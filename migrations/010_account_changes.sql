-- The outbox: one row per committed change of an account, written in the
-- same transaction as the change (docs/app-changes.md).
--
-- seq numbers one account's changes in commit order (the account's row
-- lock orders them); accounts.change_seq holds the last one given.
-- xid is the writing transaction's id: the change feed orders by (xid, id)
-- and shows only rows whose transaction is older than every transaction
-- still in flight (pg_snapshot_xmin), so a change that commits late can
-- never land behind a reader's cursor.
ALTER TABLE accounts ADD COLUMN change_seq bigint NOT NULL DEFAULT 0;

CREATE TABLE account_changes (
    id          bigserial   PRIMARY KEY,
    account_id  bigint      NOT NULL REFERENCES accounts (id),
    seq         bigint      NOT NULL CHECK (seq >= 1),
    -- pg_current_xact_id() as a bigint (an xid8 with its epoch fits):
    -- compared and indexed as a number.
    xid         bigint      NOT NULL DEFAULT pg_current_xact_id()::text::bigint,
    created_at  timestamptz NOT NULL DEFAULT now(),
    payload     jsonb       NOT NULL,
    UNIQUE (account_id, seq)
);
CREATE INDEX account_changes_feed ON account_changes (xid, id);

-- Signed deliveries of each change to each of the app's endpoints
-- (BILLSYNC_APP_WEBHOOK_URL), written with the change. One account's
-- deliveries to one endpoint go in seq order: a delivery waits while an
-- earlier one of its account is pending.
CREATE TABLE app_deliveries (
    change_id     bigint      NOT NULL REFERENCES account_changes (id) ON DELETE CASCADE,
    endpoint      text        NOT NULL,
    account_id    bigint      NOT NULL,
    seq           bigint      NOT NULL,
    status        text        NOT NULL DEFAULT 'pending'
                  CHECK (status IN ('pending', 'delivered', 'dead')),
    attempts      integer     NOT NULL DEFAULT 0,
    due_at        timestamptz NOT NULL DEFAULT now(),
    locked_by     text,
    locked_until  timestamptz,
    last_error    text,
    created_at    timestamptz NOT NULL DEFAULT now(),
    finished_at   timestamptz,
    PRIMARY KEY (change_id, endpoint)
);
CREATE INDEX app_deliveries_pending ON app_deliveries (endpoint, account_id, seq) WHERE status = 'pending';
CREATE INDEX app_deliveries_due ON app_deliveries (due_at) WHERE status = 'pending';

-- Every attempt of a delivery, for the console.
CREATE TABLE app_delivery_attempts (
    id           bigserial   PRIMARY KEY,
    change_id    bigint      NOT NULL,
    endpoint     text        NOT NULL,
    at           timestamptz NOT NULL DEFAULT now(),
    status_code  integer,
    duration_ms  double precision NOT NULL,
    error        text,
    FOREIGN KEY (change_id, endpoint) REFERENCES app_deliveries (change_id, endpoint) ON DELETE CASCADE
);
CREATE INDEX app_delivery_attempts_delivery ON app_delivery_attempts (change_id, endpoint, id);
