-- Live changes reach the app before an import's (issue 27). A first import
-- of a million customers writes a million account changes; their
-- deliveries are marked imported and claimed after every live one, so a
-- plan change from a webhook never waits behind the backlog. An import
-- delivery that a later live change of its account waits for (one
-- account's changes go in seq order) is made live by the fan-out.
ALTER TABLE app_deliveries ADD COLUMN imported boolean NOT NULL DEFAULT false;

-- The claim's order: live first, then by due time.
DROP INDEX app_deliveries_due;
CREATE INDEX app_deliveries_due ON app_deliveries (imported, due_at, change_id) WHERE status = 'pending';
