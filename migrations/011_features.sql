-- Features (issue 19): what an account may do, resolved from its plans and
-- its provider's entitlements, kept with the account and written in the
-- reconcile's transaction with the plan, so the two never disagree.
-- Existing accounts get none until their next reconcile (a plans file
-- without features: gives none at all, as before).
ALTER TABLE accounts ADD COLUMN features jsonb NOT NULL DEFAULT '[]';
-- The provider's entitlements last read (Stripe active entitlements, Kinde
-- entitlements) that the plans file maps: a read that did not ask for them
-- (the sweep's bulk listing) resolves features from these.
ALTER TABLE accounts ADD COLUMN entitlements jsonb NOT NULL DEFAULT '[]';
-- Metered features each have their own allowance in the ledger: the meter
-- a row belongs to. '' is the default meter, the plan's allowance: every
-- existing row is on it and keeps its key (grant:{account}:{period}:…,
-- usage:{account}:{key}); a named meter's rows are keyed
-- grant.{meter}:… and usage.{meter}:…. Balances are per meter.
ALTER TABLE ledger ADD COLUMN meter text NOT NULL DEFAULT '';
CREATE INDEX ledger_account_meter_period ON ledger (account_id, meter, period_start) WHERE meter <> '';
