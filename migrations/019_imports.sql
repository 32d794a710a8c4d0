-- A provider's first import is a run of its own kind beside the sweeps
-- (issue 27): it takes the same lease and resumes from its cursor the same
-- way, but what it writes is recorded as imported, not as drift. Existing
-- runs are sweeps. progress is the run's estimate of the share of the
-- listing it has applied (0..1; NULL when its lister cannot tell), which
-- every replica reads for the rate and ETA it shows.
ALTER TABLE sweep_runs
    ADD COLUMN kind text NOT NULL DEFAULT 'sweep' CHECK (kind IN ('sweep', 'import')),
    ADD COLUMN progress real CHECK (progress BETWEEN 0 AND 1);

-- The accounts an import's listing did not cover are queued as its own.
ALTER TABLE reconcile_queue DROP CONSTRAINT reconcile_queue_trigger_check;
ALTER TABLE reconcile_queue ADD CONSTRAINT reconcile_queue_trigger_check
    CHECK (trigger IN ('webhook', 'feed', 'sweep', 'import', 'resync', 'replay'));
