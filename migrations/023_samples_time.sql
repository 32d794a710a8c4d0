-- The console's correctness windows (1 h, 6 h, 30 days) count the samples
-- taken since a time: samples are appended in time order, so a BRIN index
-- finds a window's rows without scanning the rest.
CREATE INDEX samples_sampled_at ON samples USING brin (sampled_at);
