-- billsync's first schema: every table of the design.
-- Correctness lives in the constraints: the unique keys below are what make
-- copies harmless (events, queue rows, ledger entries), not application code.

-- One row per (provider, customer): the state billsync keeps equal to the
-- provider's. observed_at orders snapshots: a write is only allowed when its
-- snapshot was observed later than the one already applied.
CREATE TABLE accounts (
    id                   bigserial PRIMARY KEY,
    provider             text        NOT NULL,
    customer_id          text        NOT NULL,
    user_ref             text,
    plan                 text,
    status               text,
    subscription_id      text,
    period_start         timestamptz,
    period_end           timestamptz,
    cancel_at_period_end boolean     NOT NULL DEFAULT false,
    observed_at          timestamptz,
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now(),
    UNIQUE (provider, customer_id)
);
CREATE INDEX accounts_user_ref ON accounts (user_ref) WHERE user_ref IS NOT NULL;

-- Verified webhook events, deduplicated. Only triggers: nothing is applied
-- from the payload, which is kept for audit and replay.
CREATE TABLE inbox_events (
    id            bigserial   PRIMARY KEY,
    provider      text        NOT NULL,
    dedupe_key    text        NOT NULL,
    event_id      text        NOT NULL,
    type          text        NOT NULL,
    customer_id   text,
    event_time    timestamptz,
    api_version   text,
    payload       bytea       NOT NULL,
    received_at   timestamptz NOT NULL DEFAULT now(),
    last_seen_at  timestamptz NOT NULL DEFAULT now(),
    seen_count    integer     NOT NULL DEFAULT 1 CHECK (seen_count >= 1),
    status        text        NOT NULL DEFAULT 'pending'
                  CHECK (status IN ('pending', 'applied', 'ignored', 'dead')),
    outcome       text,
    processed_at  timestamptz,
    UNIQUE (provider, dedupe_key),
    CHECK (status <> 'ignored' OR outcome IS NOT NULL)
);
-- A reconcile marks every pending event of its customer received at or
-- before its observed_at.
CREATE INDEX inbox_events_pending ON inbox_events (provider, customer_id, received_at)
    WHERE status = 'pending';

-- One row per HTTP delivery, copies included: the evidence of what arrived.
CREATE TABLE receipts (
    id           bigserial   PRIMARY KEY,
    event_id     bigint      NOT NULL REFERENCES inbox_events (id) ON DELETE CASCADE,
    received_at  timestamptz NOT NULL DEFAULT now(),
    delivery_id  text,
    remote_addr  text,
    duplicate    boolean     NOT NULL
);
CREATE INDEX receipts_event ON receipts (event_id);

-- The work queue: one row per (provider, customer) however many events name
-- it (per-customer coalescing). requested_at is the newest request; a
-- reconcile whose observed_at is older must leave the row due.
CREATE TABLE reconcile_queue (
    id            bigserial   PRIMARY KEY,
    provider      text        NOT NULL,
    customer_id   text        NOT NULL,
    trigger       text        NOT NULL DEFAULT 'webhook'
                  CHECK (trigger IN ('webhook', 'sweep', 'resync', 'replay')),
    requested_at  timestamptz NOT NULL DEFAULT now(),
    due_at        timestamptz NOT NULL DEFAULT now(),
    attempts      integer     NOT NULL DEFAULT 0,
    status        text        NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'dead')),
    locked_by     text,
    locked_until  timestamptz,
    last_error    text,
    created_at    timestamptz NOT NULL DEFAULT now(),
    UNIQUE (provider, customer_id)
);
CREATE INDEX reconcile_queue_due ON reconcile_queue (due_at) WHERE status = 'pending';

-- The allowance ledger: append-only, every row keyed. A grant's key is
-- grant:{account}:{period_start}:{plan}; a usage debit's is usage:{account}:{key}.
-- Balance = sum(delta) for the account's current period.
CREATE TABLE ledger (
    id            bigserial   PRIMARY KEY,
    account_id    bigint      NOT NULL REFERENCES accounts (id),
    entry_key     text        NOT NULL UNIQUE,
    kind          text        NOT NULL CHECK (kind IN ('grant', 'usage', 'adjustment')),
    period_start  timestamptz NOT NULL,
    period_end    timestamptz,
    plan          text,
    delta         bigint      NOT NULL,
    note          text,
    created_at    timestamptz NOT NULL DEFAULT now(),
    CHECK (kind <> 'grant' OR delta >= 0),
    CHECK (kind <> 'usage' OR delta <= 0)
);
CREATE INDEX ledger_account_period ON ledger (account_id, period_start);

-- One row per reconcile attempt, with a readable outcome.
CREATE TABLE reconcile_log (
    id           bigserial   PRIMARY KEY,
    account_id   bigint      REFERENCES accounts (id),
    provider     text        NOT NULL,
    customer_id  text        NOT NULL,
    trigger      text        NOT NULL,
    observed_at  timestamptz NOT NULL,
    result       text        NOT NULL
                 CHECK (result IN ('applied', 'unchanged', 'stale', 'ignored', 'retry', 'dead')),
    outcome      text        NOT NULL,
    before       jsonb,
    after        jsonb,
    created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX reconcile_log_customer ON reconcile_log (provider, customer_id, id);

-- Nightly sweeps: a crashed run resumes from cursor; a failed run is never
-- reported as a success.
CREATE TABLE sweep_runs (
    id            bigserial   PRIMARY KEY,
    provider      text        NOT NULL,
    started_at    timestamptz NOT NULL DEFAULT now(),
    heartbeat_at  timestamptz NOT NULL DEFAULT now(),
    finished_at   timestamptz,
    status        text        NOT NULL DEFAULT 'running'
                  CHECK (status IN ('running', 'succeeded', 'failed')),
    seen          integer     NOT NULL DEFAULT 0,
    changed       integer     NOT NULL DEFAULT 0,
    failed        integer     NOT NULL DEFAULT 0,
    cursor        text,
    error         text,
    CHECK ((status = 'running') = (finished_at IS NULL))
);
CREATE INDEX sweep_runs_provider ON sweep_runs (provider, id DESC);
