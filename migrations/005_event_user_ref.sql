-- The app's reference for the customer (its user id or organisation code)
-- as a signed event names it, for providers whose API does not carry it
-- (Kinde's billing agreements do not): the worker hands the newest pending
-- event's reference to the account, which keeps it when a later read has
-- none.
ALTER TABLE inbox_events ADD COLUMN user_ref text;
