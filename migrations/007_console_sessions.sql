-- The support console's signed-in sessions. Only a SHA-256 of each session
-- is kept (the session itself is in the browser's cookie), so this table
-- cannot sign anyone in. Signing out deletes the row, which ends the
-- session on every replica even if its cookie was copied.
CREATE TABLE console_sessions (
    session_hash  bytea       PRIMARY KEY,
    created_at    timestamptz NOT NULL DEFAULT now(),
    expires_at    timestamptz NOT NULL
);
