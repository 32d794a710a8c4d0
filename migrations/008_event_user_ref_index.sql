-- A reconcile hands the account the app's reference named by the
-- customer's newest stored event that names one, whatever its status (an
-- ignored reconcile may have answered it already): one index lookup per
-- claimed or held job, not a scan of the customer's events. Only events
-- naming a reference (Kinde's) are in it.
CREATE INDEX inbox_events_user_ref ON inbox_events (provider, customer_id, event_time DESC NULLS LAST, id DESC)
    WHERE user_ref IS NOT NULL;
