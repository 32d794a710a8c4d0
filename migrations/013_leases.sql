-- Leadership (one sweep per provider, one events feed per provider, one
-- prune) is a lease row rather than a session advisory lock: a session lock
-- lives on one server connection, and a transaction pooler (PgBouncer in
-- transaction mode, Supabase's and Neon's pooled URLs) hands that connection
-- to other clients, so the lock leaks to whoever lands there and its unlock
-- runs on another backend. A lease is taken, renewed and released by single
-- statements that hold nothing between them; a holder that dies stops
-- renewing and the lease passes on once expires_at (the database's clock)
-- is behind. token tells a holder's renewal from a successor's.
CREATE TABLE leases (
	name        text        PRIMARY KEY,
	token       text        NOT NULL,
	holder      text        NOT NULL,
	acquired_at timestamptz NOT NULL DEFAULT now(),
	renewed_at  timestamptz NOT NULL DEFAULT now(),
	expires_at  timestamptz NOT NULL
);
