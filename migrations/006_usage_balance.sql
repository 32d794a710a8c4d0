-- The balance a usage debit left behind, so that a repeat of its
-- idempotency key answers exactly what the first request was answered, even
-- after the balance has moved on. NULL for grants and older rows.
ALTER TABLE ledger ADD COLUMN balance_after bigint;
