-- Stripe Connect (docs/connect.md): the connected accounts billsync has
-- heard of, from their authorisation events and from the provider's list
-- of accounts. A connected account's customers, events and ledger keys are
-- keyed "<account>/<id>" in the existing tables (reconcile/connect.go), so
-- no existing row changes: the platform's own rows keep their bare ids.
--
-- authorized is what the newest word about the account said (an
-- account.application.authorized or .deauthorized event, or a listing
-- that did or did not name it); changed_at is that word's own time, so a
-- copy or an older event arriving late changes nothing.
CREATE TABLE connected_accounts (
    provider     text        NOT NULL,
    account      text        NOT NULL,
    authorized   boolean     NOT NULL,
    changed_at   timestamptz NOT NULL,
    first_seen   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (provider, account)
);
