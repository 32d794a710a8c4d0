-- The console's overview counts the last 24 hours of receipts and
-- reconcile_log rows by hour. Both tables are append-only in time order,
-- so BRIN indexes on their timestamps serve those ranges (and a prune's
-- cutoff) at a few pages each: small, cheap to keep up, and quick to
-- build on a large table (a B-tree build would hold the intake's inserts
-- for longer).
CREATE INDEX receipts_received_at ON receipts USING brin (received_at);
CREATE INDEX reconcile_log_created_at ON reconcile_log USING brin (created_at);
