-- Stripe Connect (docs/connect.md): one events-feed cursor per connected
-- account. events_feed is keyed by (provider, account): account '' is the
-- platform's own feed, so every row written before Connect reads as the
-- platform's, unchanged; a connected account's feed is its row under its
-- acct_ id.
--
-- failures and retry_at back off an account whose polls fail (a 429 it
-- answered, an outage) alone: it is not polled again before retry_at,
-- while the other accounts keep their turns. A poll that succeeds clears
-- both.
ALTER TABLE events_feed ADD COLUMN account text NOT NULL DEFAULT '';
ALTER TABLE events_feed ADD COLUMN failures integer NOT NULL DEFAULT 0;
ALTER TABLE events_feed ADD COLUMN retry_at timestamptz;
ALTER TABLE events_feed DROP CONSTRAINT events_feed_pkey;
ALTER TABLE events_feed ADD PRIMARY KEY (provider, account);
