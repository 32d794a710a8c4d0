package bench

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/billsync/billsync/providers/stripe"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store"
)

// idlePolls is how many quiet polls the idle part counts the reads of.
const idlePolls = 5

// IdleResult is what the events feed reads in a month on an account where
// nothing happens, with serve's defaults, at the read allocation's floor:
// the reads of its polls, counted at the fake, times the polls its budget
// gives a month, plus the endpoint's status reads. The baseline, in the
// same run, is the same feed without a read budget (every -events-poll).
type IdleResult struct {
	Allocation float64 `json:"read_allocation"`
	// IntervalS is the interval the budget gives a quiet feed, and
	// ReadsPerPoll what each quiet poll read at the fake (the events
	// list); EndpointReads what reading the webhook endpoint's status
	// did, EndpointEveryS how often a quiet feed does it.
	IntervalS      float64 `json:"interval_s"`
	ReadsPerPoll   float64 `json:"reads_per_poll"`
	EndpointReads  float64 `json:"endpoint_reads"`
	EndpointEveryS float64 `json:"endpoint_every_s"`
	// ReadsPerMonth is the feed's reads over 30 days; Share them over the
	// allocation.
	ReadsPerMonth float64 `json:"reads_per_month"`
	Share         float64 `json:"share_of_allocation"`
	// Baseline is the same feed with no read budget: a poll every
	// -events-poll (1 min).
	BaselineIntervalS     float64 `json:"baseline_interval_s"`
	BaselineReadsPerMonth float64 `json:"baseline_reads_per_month"`
}

// runIdle builds the events feed as serve does on an account with no
// transactions and polls it: the first poll (a leader's first) reads the
// endpoint's status too; the quiet ones after it list events only. A
// month's reads follow from those counts and the intervals the feed
// itself chooses.
func runIdle(ctx context.Context, st *store.Store, cfg Config) (IdleResult, error) {
	var res IdleResult
	h, err := meteredFake(st, cfg)
	if err != nil {
		return res, err
	}
	defer h.Close()
	feed, err := newServeFeed(h, st, 1)
	if err != nil {
		return res, err
	}
	reads := func() int64 { return h.Stripe.Fake.Usage().Reads }
	before := reads()
	if _, err := feed.Poll(ctx); err != nil {
		return res, fmt.Errorf("idle: first poll: %w", err)
	}
	first := reads() - before
	before = reads()
	for range idlePolls {
		if _, err := feed.Poll(ctx); err != nil {
			return res, fmt.Errorf("idle: poll: %w", err)
		}
	}
	res.ReadsPerPoll = float64(reads()-before) / idlePolls
	res.EndpointReads = float64(first) - res.ReadsPerPoll
	if res.EndpointReads < 1 {
		return res, fmt.Errorf("idle: the first poll read %d times, quiet ones %.1f: the endpoint's status was not read", first, res.ReadsPerPoll)
	}

	res.Allocation = h.Stripe.Client.Allocation(0)
	interval := feed.BudgetInterval()
	res.IntervalS = interval.Seconds()
	res.EndpointEveryS = reconcile.DefaultEndpointEvery.Seconds()
	res.ReadsPerMonth = round(monthly(interval, res.ReadsPerPoll)+monthly(reconcile.DefaultEndpointEvery, res.EndpointReads), 0)
	res.Share = round(res.ReadsPerMonth/res.Allocation, 4)

	unbudgeted, err := reconcile.NewEventsFeed(reconcile.EventsFeedConfig{Provider: stripe.Provider, Source: h.Stripe.Client, Store: st})
	if err != nil {
		return res, err
	}
	res.BaselineIntervalS = unbudgeted.BudgetInterval().Seconds()
	res.BaselineReadsPerMonth = round(monthly(unbudgeted.BudgetInterval(), res.ReadsPerPoll)+
		monthly(reconcile.DefaultEndpointEvery, res.EndpointReads), 0)
	cfg.Logger.Info("bench idle: done", slog.Float64("reads_per_month", res.ReadsPerMonth))
	return res, nil
}

// monthly is what n reads every interval add up to over a read window.
func monthly(every time.Duration, n float64) float64 {
	return n * float64(reconcile.ReadWindow) / float64(every)
}
