-- Stripe Connect (docs/connect.md): each connected account is swept on
-- its own, a run of its own resumed from its own cursor under a lease of
-- its own (one sweep of an account across replicas). sweep_runs.account
-- names the connected account a run lists ('' the platform's own), so
-- every run recorded before Connect reads as the platform's, unchanged.
-- A run resumes, closes and counts only the runs of its own account.
ALTER TABLE sweep_runs ADD COLUMN account text NOT NULL DEFAULT '';
DROP INDEX sweep_runs_provider;
CREATE INDEX sweep_runs_provider ON sweep_runs (provider, account, id DESC);
-- The platform's figures (metrics, the import state) read only its own
-- runs, a few a day, however many runs thousands of accounts add.
CREATE INDEX sweep_runs_platform ON sweep_runs (provider, status) WHERE account = '';
-- A connected account's sweep queues its customers it did not list: the
-- accounts of one connected account are found through this index, not by
-- reading every account (a million, for 10,000 accounts' sweeps a day).
CREATE INDEX accounts_connected ON accounts (provider, split_part(customer_id, '/', 1))
    WHERE customer_id LIKE 'acct\_%/%';
-- (A connected account's finished runs go with the prune's retention,
-- except its newest and its newest successful one: store/prune.go.)
