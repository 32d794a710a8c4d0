-- A provider's budget, shared by every replica (docs/stripe-budget.md).
--
-- Stripe allocates reads per rolling 30 days (500 per transaction, at least
-- 10,000): provider_reads counts the reads billsync made, by UTC day and
-- API operation, each replica adding what it made every few seconds;
-- provider_transactions counts the payments billsync stored an event of,
-- by the day the event first arrived, for the allocation derived from them.
CREATE TABLE provider_reads (
	provider  text   NOT NULL,
	day       date   NOT NULL,
	operation text   NOT NULL,
	reads     bigint NOT NULL CHECK (reads >= 0),
	PRIMARY KEY (provider, day, operation)
);

CREATE TABLE provider_transactions (
	provider     text   NOT NULL,
	day          date   NOT NULL,
	transactions bigint NOT NULL CHECK (transactions >= 0),
	PRIMARY KEY (provider, day)
);

-- The replicas that run a provider's worker, each seen at its last report:
-- the global and per-operation rates are shared among those seen lately.
-- A row, not a session: correct behind a transaction pooler.
CREATE TABLE budget_replicas (
	provider text        NOT NULL,
	holder   text        NOT NULL,
	seen_at  timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (provider, holder)
);
