-- The customers a sweep run has resolved. It makes a run's two set
-- questions cheap and crash-proof: "applied already in this run?" (a run
-- resumed from its cursor must not apply an older subscription of a customer
-- it resolved before the crash) and "which accounts did the listing not
-- cover?" (enqueued at the end), without holding a million ids in memory.
-- Rows go with their run.
CREATE TABLE sweep_seen (
    run_id       bigint NOT NULL REFERENCES sweep_runs (id) ON DELETE CASCADE,
    customer_id  text   NOT NULL,
    PRIMARY KEY (run_id, customer_id)
);
