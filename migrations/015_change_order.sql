-- The change feed's order key keeps each account's changes in seq order.
--
-- account_changes.xid was the writing transaction's id. A transaction
-- takes its id at its first write, and that can come before it waits for
-- the account's row lock (a reconcile locks its queue row first), so a
-- change with the account's next seq could carry an older id than the
-- change before it, and the feed, ordered by (xid, id), gave them in the
-- wrong order. Now a change's xid is the greater of its transaction's id
-- and the account's previous change's xid (accounts.change_xid, moved
-- under the row lock with change_seq). It is never below its own
-- transaction's id, so a change whose transaction is still in flight keeps
-- a key at or above pg_snapshot_xmin and the feed still never shows
-- anything below a reader's cursor late.
ALTER TABLE accounts ADD COLUMN change_xid bigint NOT NULL DEFAULT 0;

UPDATE accounts a SET change_xid = c.xid
FROM (SELECT account_id, max(xid) AS xid FROM account_changes GROUP BY account_id) c
WHERE a.id = c.account_id;
