-- Support tools (issue 7): finding a customer by email, and knowing who
-- asked for each reconcile. Existing rows keep NULL: an account's email
-- arrives with its next reconcile; old log rows predate actors.

-- The customer's email as the provider has it, for support staff to find
-- an account by (case-insensitive).
ALTER TABLE accounts ADD COLUMN email text;
CREATE INDEX accounts_email ON accounts (lower(email)) WHERE email IS NOT NULL;

-- Who asked: worker, sweep, cli:<os user>, admin-api.
ALTER TABLE reconcile_log ADD COLUMN actor text;
