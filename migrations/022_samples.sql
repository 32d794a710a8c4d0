-- The correctness sample (docs/correctness.md): every minute one replica
-- reads a few accounts from the provider through the dry run and records
-- each as equal or drifted, with the class of its first difference. Kept
-- for the retention (-prune-older-than), like the reconcile log.
CREATE TABLE samples (
    id          bigserial   PRIMARY KEY,
    provider    text        NOT NULL,
    customer_id text        NOT NULL,
    account_id  bigint      NOT NULL REFERENCES accounts (id),
    drifted     boolean     NOT NULL,
    class       text        CHECK ((class IS NULL) = NOT drifted),
    sampled_at  timestamptz NOT NULL DEFAULT now()
);
-- The console's last drifted samples, newest first.
CREATE INDEX samples_drifted ON samples (id DESC) WHERE drifted;

-- A drifted account is queued for the worker with trigger 'sample'.
ALTER TABLE reconcile_queue DROP CONSTRAINT reconcile_queue_trigger_check;
ALTER TABLE reconcile_queue ADD CONSTRAINT reconcile_queue_trigger_check
    CHECK (trigger IN ('webhook', 'feed', 'sweep', 'import', 'resync', 'replay', 'sample'));
