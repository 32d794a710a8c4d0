-- What a delivery's own object says its subscription is now (Stripe: the
-- subscription id, status and prices of a customer.subscription.* event),
-- when the event carries one. A worker whose fetch plainly contradicts the
-- newest pending one reads the provider once more after a short delay: the
-- API can lag behind the webhook it just sent (a stale read).
ALTER TABLE inbox_events ADD COLUMN expect jsonb;
