-- Stripe Connect (docs/connect.md, docs/stripe-budget.md): Stripe allocates
-- a platform's reads on behalf of its connected accounts apart from its own,
-- 500 a transaction of the connected accounts'. So the payments of connected
-- accounts' customers (keyed "acct_…/cus_…") are counted apart from the
-- platform's: transactions is the platform's own, connect_transactions the
-- connected accounts'. Every row written before reads as the platform's, as
-- it was counted. (The reads need no column: those on behalf of a connected
-- account are recorded under their operation's "connect " name.)
ALTER TABLE provider_transactions
	ADD COLUMN connect_transactions bigint NOT NULL DEFAULT 0 CHECK (connect_transactions >= 0);
