package server

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/billsync/billsync/reconcile"
)

// QueueDepthFunc reports queued customers: waiting, due now, and dead.
type QueueDepthFunc func(ctx context.Context) (pending, due, dead int, err error)

// Metrics is billsync's Prometheus registry: webhook receipts by answer,
// reconciles by result (dead ones are what to alert on), and the queue's
// depth read from the database at each scrape.
type Metrics struct {
	reg      *prometheus.Registry
	receipts *prometheus.CounterVec
	// receiptsOld is receipts under its name before the rename, served for
	// one release (docs/metrics.md, "Renamed").
	receiptsOld *prometheus.CounterVec
	reconciles  *prometheus.CounterVec
	latency     *prometheus.HistogramVec
	freshness   *prometheus.HistogramVec
	calls       *prometheus.CounterVec
	connect     *prometheus.CounterVec
	unmapped    *prometheus.CounterVec
	rechecks    *prometheus.CounterVec
	// The correctness sample (docs/correctness.md).
	samples *prometheus.CounterVec
	drifted *prometheus.CounterVec
	// For the console's overview: this process's provider requests per
	// second over the last minute, and when its counters began.
	rates     *requestRates
	started   time.Time
	rateLimit *prometheus.GaugeVec
	// appAttempts counts app webhook attempts (metrics_app.go).
	appAttempts *prometheus.CounterVec
	budget      budgetMetrics
}

// receiptsHelp is billsync_webhook_receipts_total's HELP, and its old name's after the deprecation.
const receiptsHelp = "Webhook receipts (requests received) by provider and answer: stored, duplicate, ignored; client_error (the client hung up, sent a short body or was too slow); busy (refused: body memory in use); or the HTTP status of any other refusal. Alert on 5xx."

// deprecatedHelp starts the HELP of a metric served under its old name
// for one release after a rename, with the same value as newName's.
func deprecatedHelp(newName string) string {
	return "Deprecated: use " + newName + "; removed in the next release."
}

// NewMetrics returns the registry; depth may be nil.
func NewMetrics(depth QueueDepthFunc, logger *slog.Logger) *Metrics {
	m := &Metrics{
		reg:     prometheus.NewRegistry(),
		rates:   newRequestRates(),
		started: time.Now(),
		receipts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "billsync_webhook_receipts_total",
			Help: receiptsHelp,
		}, []string{"provider", "answer"}),
		receiptsOld: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "billsync_webhook_deliveries_total",
			Help: deprecatedHelp("billsync_webhook_receipts_total") + " " + receiptsHelp,
		}, []string{"provider", "answer"}),
		reconciles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "billsync_reconciles_total",
			Help: "Reconciles by provider and result (applied, unchanged, stale, ignored, retry, dead). Alert on dead.",
		}, []string{"provider", "result"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "billsync_reconcile_seconds",
			Help:    "Time of one reconcile, from reading the database clock to the commit (the provider fetch included), by provider and result.",
			Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"provider", "result"}),
		freshness: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "billsync_trigger_freshness_seconds",
			Help:    "The freshness SLI: time from billsync first storing a trigger (a webhook receipt, or an events-feed entry: source webhook or feed) to the commit of the reconcile that answered it, once per stored event, by provider and source. The objective is the share reflected within 60 s (docs/deploy.md, SLOs).",
			Buckets: FreshnessBuckets,
		}, []string{"provider", "source"}),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "billsync_provider_requests_total",
			Help: "HTTP attempts at the provider's API, retries included, by provider and status code (error: no answer).",
		}, []string{"provider", "status"}),
		connect: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "billsync_webhook_connect_events_total",
			Help: "Verified webhook deliveries about a connected account (Stripe Connect) that billsync does not serve (-stripe-connect off, or an account not listed), by provider: stored as ignored. A rise means a Connect setup sends events billsync drops.",
		}, []string{"provider"}),
		unmapped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "billsync_unmapped_prices_total",
			Help: "Reconciles left ignored because a customer's live subscriptions hold only prices no plan maps, by provider and price: the account stays as it was. Alert on any increase; add the price to the plans file (billsync plans check lists them).",
		}, []string{"provider", "price"}),
		rechecks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "billsync_stale_read_rechecks_total",
			Help: "Customers read a second time because the first read contradicted their newest event's own object, by provider and what the second read did: agreed (the first read was stale) or disagreed (the event was older than the provider's state, or the lag is longer than the recheck delay).",
		}, []string{"provider", "second_read"}),
		samples: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "billsync_sample_accounts_total",
			Help: "Accounts the correctness sample read from the provider and compared through the dry run, by provider (docs/correctness.md).",
		}, []string{"provider"}),
		drifted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "billsync_sample_drifted_total",
			Help: "Sampled accounts the provider disagreed with, by provider and class (the first difference, in the order plan, status, period, balance, features, other, missing); each drifted account counts once. Each was queued for the worker (trigger sample), but missing. The drifted share is this over billsync_sample_accounts_total.",
		}, []string{"provider", "class"}),
		rateLimit: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "billsync_provider_rate_limit",
			Help: "Requests per second this process allows itself at the provider's API, by provider: Stripe's is this replica's share of -stripe-rate (the account's global rate, shared by the replicas running workers), Kinde's -kinde-rate (each replica's own).",
		}, []string{"provider"}),
	}
	m.appAttempts = newAppAttempts()
	m.budget = newBudgetMetrics()
	m.reg.MustRegister(m.budget.collectors()...)
	m.reg.MustRegister(m.receipts, m.receiptsOld, m.reconciles, m.latency, m.freshness, m.calls, m.connect, m.unmapped, m.rechecks, m.samples, m.drifted, m.rateLimit, m.appAttempts,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if depth != nil {
		if logger == nil {
			logger = slog.New(slog.DiscardHandler)
		}
		m.reg.MustRegister(&queueCollector{depth: depth, log: logger})
	}
	return m
}

// FreshnessBuckets are billsync_trigger_freshness_seconds's bucket bounds,
// around the 60 s objective: the alerts read the le="60" bucket.
var FreshnessBuckets = []float64{0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800, 3600}

// ObserveReceipt counts one webhook receipt's answer.
func (m *Metrics) ObserveReceipt(provider, answer string) {
	m.receipts.WithLabelValues(provider, answer).Inc()
	m.receiptsOld.WithLabelValues(provider, answer).Inc()
}

// ObserveConnectEvent counts one verified delivery of a connected
// account's event (wire it to the Stripe verifier's SetOnConnect).
func (m *Metrics) ObserveConnectEvent(provider string) {
	m.connect.WithLabelValues(provider).Inc()
}

// ObserveAnswered observes the freshness of stored events answered at at
// (the commit's database time): by a reconcile, or by a sweep's page
// (wire it to the sweeper's OnAnswered).
func (m *Metrics) ObserveAnswered(provider string, answered []reconcile.Answered, at time.Time) {
	for _, a := range answered {
		m.freshness.WithLabelValues(provider, a.Source).Observe(max(at.Sub(a.ReceivedAt), 0).Seconds())
	}
}

// ObserveReconcile counts one reconcile's result (wire it to the worker's
// OnOutcome), and observes, once each, the freshness of the events it
// answered when the worker had the commit's time.
func (m *Metrics) ObserveReconcile(job reconcile.Job, out reconcile.Outcome) {
	m.reconciles.WithLabelValues(job.Provider, string(out.Result)).Inc()
	m.latency.WithLabelValues(job.Provider, string(out.Result)).Observe(out.Took.Seconds())
	if !out.AnsweredAt.IsZero() {
		m.ObserveAnswered(job.Provider, out.Answered, out.AnsweredAt)
	}
	for _, price := range out.Unmapped {
		m.unmapped.WithLabelValues(job.Provider, price).Inc()
	}
	if out.Recheck != "" {
		m.rechecks.WithLabelValues(job.Provider, out.Recheck).Inc()
	}
}

// ExpectSamples serves provider's sample counters at 0 before its first
// sample, every class too, so the SLO's rates start from zero rather than
// from a series's first increment.
func (m *Metrics) ExpectSamples(provider string) {
	m.samples.WithLabelValues(provider)
	for _, class := range reconcile.SampleClasses {
		m.drifted.WithLabelValues(provider, class)
	}
}

// ObserveSample counts one account the correctness sample compared (wire
// it to the sampler's OnSample).
func (m *Metrics) ObserveSample(s reconcile.Sample) {
	m.samples.WithLabelValues(s.Provider).Inc()
	if s.Drifted {
		m.drifted.WithLabelValues(s.Provider, s.Class).Inc()
	}
}

// ObserveProviderRequest counts one HTTP attempt at a provider's API (wire
// it to the client's OnAttempt).
func (m *Metrics) ObserveProviderRequest(provider, status string) {
	m.calls.WithLabelValues(provider, status).Inc()
	m.rates.add(provider, time.Now())
}

// SetProviderRateLimit reports the request rate this process allows itself
// at a provider's API.
func (m *Metrics) SetProviderRateLimit(provider string, perSecond float64) {
	m.rateLimit.WithLabelValues(provider).Set(perSecond)
}

func (m *Metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

var queueDesc = prometheus.NewDesc("billsync_queue_customers",
	"Customers in the reconcile queue by state: pending (due or in backoff), due (claimable now), dead (gave up; needs a resync or a new webhook).",
	[]string{"state"}, nil)

// queueCollector reads the queue's depth at scrape time.
type queueCollector struct {
	depth QueueDepthFunc
	log   *slog.Logger
}

func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) { ch <- queueDesc }

func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	pending, due, dead, err := c.depth(ctx)
	if err != nil {
		// No sample beats a made-up zero: the scrape shows the gap.
		c.log.Warn("metrics: read queue depth", slog.Any("error", err))
		return
	}
	for state, n := range map[string]int{"pending": pending, "due": due, "dead": dead} {
		ch <- prometheus.MustNewConstMetric(queueDesc, prometheus.GaugeValue, float64(n), state)
	}
}

// CollectFetchSlots reports, at each scrape, the worker's fetch slots per
// provider: the reads this process may keep in flight now (sized to the
// rate × the observed latency), how many are, and that latency. Reads in
// flight at the limit while the queue is deep is the rate doing its work;
// a limit at -workers while the rate goes unused says -workers is too low.
func (m *Metrics) CollectFetchSlots(slots func() []reconcile.FetchSlots) {
	m.reg.MustRegister(slotsCollector(slots))
}

var (
	slotsLimitDesc = prometheus.NewDesc("billsync_fetch_slots",
		"Reads of the provider's API this process may keep in flight now: its rate × the observed latency with headroom, at most -workers.",
		[]string{"provider"}, nil)
	slotsInFlightDesc = prometheus.NewDesc("billsync_fetches_in_flight",
		"Reads of the provider's API this process has in flight now.",
		[]string{"provider"}, nil)
	slotsLatencyDesc = prometheus.NewDesc("billsync_provider_latency_seconds",
		"The provider's recent answer time (a moving average, the rate limiter's wait not counted) that sizes the fetch slots; absent before the first answer.",
		[]string{"provider"}, nil)
)

type slotsCollector func() []reconcile.FetchSlots

func (c slotsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- slotsLimitDesc
	ch <- slotsInFlightDesc
	ch <- slotsLatencyDesc
}

func (c slotsCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c() {
		ch <- prometheus.MustNewConstMetric(slotsLimitDesc, prometheus.GaugeValue, float64(s.Limit), s.Provider)
		ch <- prometheus.MustNewConstMetric(slotsInFlightDesc, prometheus.GaugeValue, float64(s.InFlight), s.Provider)
		if s.Latency > 0 {
			ch <- prometheus.MustNewConstMetric(slotsLatencyDesc, prometheus.GaugeValue, s.Latency.Seconds(), s.Provider)
		}
	}
}

// SweepStatsFunc reads the sweeps' figures from the database.
type SweepStatsFunc func(ctx context.Context) ([]reconcile.SweepStat, error)

// CollectSweeps reports sweep figures at each scrape, read from the
// database so every replica tells the same: runs by status (alert on a
// rising failed count), accounts healed, the running sweep's progress, and
// the last successful sweep's end (alert when it is older than a day and a
// half: time() - billsync_sweep_last_success_timestamp_seconds > 129600).
func (m *Metrics) CollectSweeps(stats SweepStatsFunc, logger *slog.Logger) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	m.reg.MustRegister(&sweepCollector{stats: stats, log: logger})
}

var (
	sweepRunsDesc = prometheus.NewDesc("billsync_sweep_runs", "Sweeps recorded in sweep_runs, by provider and status (running, succeeded, failed).",
		[]string{"provider", "status"}, nil)
	sweepHealedDesc = prometheus.NewDesc("billsync_sweep_healed_accounts_total", "Accounts the sweeps healed (they had drifted from the provider).",
		[]string{"provider"}, nil)
	sweepProgressDesc = prometheus.NewDesc("billsync_sweep_progress_customers", "Customers the running sweep has seen so far (0 when none runs).",
		[]string{"provider"}, nil)
	sweepLastDesc = prometheus.NewDesc("billsync_sweep_last_success_timestamp_seconds", "When the last successful sweep finished (Unix time).",
		[]string{"provider"}, nil)
)

type sweepCollector struct {
	stats SweepStatsFunc
	log   *slog.Logger
}

func (c *sweepCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- sweepRunsDesc
	ch <- sweepHealedDesc
	ch <- sweepProgressDesc
	ch <- sweepLastDesc
}

func (c *sweepCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	stats, err := c.stats(ctx)
	if err != nil {
		c.log.Warn("metrics: read sweep figures", slog.Any("error", err))
		return
	}
	healed, progress := map[string]int{}, map[string]int{}
	for _, st := range stats {
		ch <- prometheus.MustNewConstMetric(sweepRunsDesc, prometheus.GaugeValue, float64(st.Runs), st.Provider, st.Status)
		healed[st.Provider] += st.Healed
		if st.Status == "running" {
			progress[st.Provider] += st.Seen
		}
		if st.Status == "succeeded" && !st.LastFinished.IsZero() {
			ch <- prometheus.MustNewConstMetric(sweepLastDesc, prometheus.GaugeValue, float64(st.LastFinished.Unix()), st.Provider)
		}
	}
	for p, n := range healed {
		ch <- prometheus.MustNewConstMetric(sweepHealedDesc, prometheus.CounterValue, float64(n), p)
		ch <- prometheus.MustNewConstMetric(sweepProgressDesc, prometheus.GaugeValue, float64(progress[p]), p)
	}
}

// RunningImportsFunc reads the imports running now from the database.
type RunningImportsFunc func(ctx context.Context) ([]reconcile.SweepRecord, error)

// CollectImports reports each running import at each scrape, read from
// the database so every replica tells the same: the customers listed, the
// accounts written, its progress estimate and the time left at its pace
// (the last two only when its lister can estimate them).
func (m *Metrics) CollectImports(runs RunningImportsFunc, logger *slog.Logger) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	m.reg.MustRegister(&importCollector{runs: runs, log: logger})
}

var (
	importAccountsDesc = prometheus.NewDesc("billsync_import_accounts",
		"Customers the running import has listed so far (absent when none runs).", []string{"provider"}, nil)
	importImportedDesc = prometheus.NewDesc("billsync_import_imported_accounts",
		"Accounts the running import has written so far (absent when none runs).", []string{"provider"}, nil)
	importProgressDesc = prometheus.NewDesc("billsync_import_progress_ratio",
		"The running import's estimate of the share of the provider's customers listed, 0..1 (absent when unknown).", []string{"provider"}, nil)
	importLeftDesc = prometheus.NewDesc("billsync_import_eta_seconds",
		"The time the running import needs to finish at its pace so far, from its progress estimate (absent when unknown).", []string{"provider"}, nil)
)

type importCollector struct {
	runs RunningImportsFunc
	log  *slog.Logger
}

func (c *importCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- importAccountsDesc
	ch <- importImportedDesc
	ch <- importProgressDesc
	ch <- importLeftDesc
}

func (c *importCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	runs, err := c.runs(ctx)
	if err != nil {
		c.log.Warn("metrics: read running imports", slog.Any("error", err))
		return
	}
	now := time.Now()
	for _, r := range runs {
		ch <- prometheus.MustNewConstMetric(importAccountsDesc, prometheus.GaugeValue, float64(r.Seen), r.Provider)
		ch <- prometheus.MustNewConstMetric(importImportedDesc, prometheus.GaugeValue, float64(r.Healed), r.Provider)
		if r.Progress != nil {
			ch <- prometheus.MustNewConstMetric(importProgressDesc, prometheus.GaugeValue, *r.Progress, r.Provider)
		}
		if left, ok := r.Left(now); ok {
			ch <- prometheus.MustNewConstMetric(importLeftDesc, prometheus.GaugeValue, left.Seconds(), r.Provider)
		}
	}
}

// EventsFeedStatesFunc reads the events feeds' states from the database.
type EventsFeedStatesFunc func(ctx context.Context) ([]reconcile.EventsFeedState, error)

// CollectEventsFeeds reports the events feeds' figures at each scrape, read from
// the database so every replica tells the same (one replica polls).
func (m *Metrics) CollectEventsFeeds(states EventsFeedStatesFunc, logger *slog.Logger) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	m.reg.MustRegister(&feedCollector{states: states, log: logger})
}

var (
	feedCaughtDesc = prometheus.NewDesc("billsync_events_feed_caught_total",
		"Events the events feed stored before any webhook brought them: webhooks that were late or lost. The endpoint's health: alert on a steady rise.",
		[]string{"provider"}, nil)
	feedLagDesc = prometheus.NewDesc("billsync_events_feed_lag_seconds",
		"Now minus the newest event the events feed has seen (it also grows while the provider has no new events).",
		[]string{"provider"}, nil)
	feedPolledDesc = prometheus.NewDesc("billsync_events_feed_last_poll_timestamp_seconds",
		"When the events feed last finished a poll (Unix time). Alert when it is older than a few poll intervals.",
		[]string{"provider"}, nil)
	feedUndeliveredDesc = prometheus.NewDesc("billsync_events_feed_undelivered_events",
		"Events the last poll listed that the provider had not delivered to every webhook endpoint (Stripe's delivery_success=false: pending or failed).",
		[]string{"provider"}, nil)
	feedEndpointDesc = prometheus.NewDesc("billsync_stripe_webhook_endpoint_enabled",
		"1 when the provider has billsync's webhook endpoint enabled, 0 when it disabled it (then only the events feed signals changes). Alert on 0.",
		[]string{"provider", "endpoint"}, nil)
)

type feedCollector struct {
	states EventsFeedStatesFunc
	log    *slog.Logger
}

func (c *feedCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- feedCaughtDesc
	ch <- feedLagDesc
	ch <- feedPolledDesc
	ch <- feedUndeliveredDesc
	ch <- feedEndpointDesc
}

func (c *feedCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	states, err := c.states(ctx)
	if err != nil {
		c.log.Warn("metrics: read events feed figures", slog.Any("error", err))
		return
	}
	for _, st := range states {
		ch <- prometheus.MustNewConstMetric(feedCaughtDesc, prometheus.CounterValue, float64(st.Caught), st.Provider)
		ch <- prometheus.MustNewConstMetric(feedPolledDesc, prometheus.GaugeValue, float64(st.PolledAt.Unix()), st.Provider)
		ch <- prometheus.MustNewConstMetric(feedUndeliveredDesc, prometheus.GaugeValue, float64(st.Undelivered), st.Provider)
		if st.NewestEventAt != nil {
			ch <- prometheus.MustNewConstMetric(feedLagDesc, prometheus.GaugeValue, time.Since(*st.NewestEventAt).Seconds(), st.Provider)
		}
		if st.EndpointEnabled != nil {
			v := 0.0
			if *st.EndpointEnabled {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(feedEndpointDesc, prometheus.GaugeValue, v, st.Provider, st.EndpointID)
		}
	}
}

// ConnectFeedStatsFunc reads the Stripe Connect accounts' feeds' sums
// from the database.
type ConnectFeedStatsFunc func(ctx context.Context) (reconcile.ConnectFeedStats, error)

// CollectConnectFeeds reports the Connect accounts' feeds at each scrape,
// per provider, never per account (thousands of accounts would be as many
// series): the accounts by state, the oldest poll's age and the events
// caught, read from the database so every replica tells the same; and
// this replica's scheduler (view): the round it polls each account at,
// the accounts it served at its last dispatch, and its polls.
func (m *Metrics) CollectConnectFeeds(stats ConnectFeedStatsFunc, view func() reconcile.ConnectFeedView, logger *slog.Logger) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	m.reg.MustRegister(&connectFeedCollector{stats: stats, view: view, log: logger})
}

var (
	connectAccountsDesc = prometheus.NewDesc("billsync_connect_accounts",
		"Stripe Connect accounts billsync knows, by state: authorized (they authorise the platform), deauthorized (their feeds stopped), and of the authorised: backed_off (their polls failed; waiting out a backoff) and never_polled.",
		[]string{"provider", "state"}, nil)
	connectOldestPollDesc = prometheus.NewDesc("billsync_connect_feed_oldest_poll_age_seconds",
		"Now minus the least recent last poll of an authorised Connect account polled at least once: the longest any has gone unpolled, about billsync_connect_feed_round_seconds while the pool keeps up (absent before the first poll). Alert when it exceeds the round by far.",
		[]string{"provider"}, nil)
	connectCaughtDesc = prometheus.NewDesc("billsync_connect_feed_caught_total",
		"Events the Connect accounts' feeds stored before any webhook brought them: Connect webhooks that were late or lost.",
		[]string{"provider"}, nil)
	connectRoundDesc = prometheus.NewDesc("billsync_connect_feed_round_seconds",
		"The interval this replica's Connect feed polls each account at: what a quarter of the Connect read allocation pays for over the accounts served, never shorter than -events-poll.",
		[]string{"provider"}, nil)
	connectServedDesc = prometheus.NewDesc("billsync_connect_feed_served_accounts",
		"Authorised Connect accounts this replica's feed served at its last dispatch (0 on a replica that has not led the feed).",
		[]string{"provider"}, nil)
	connectPoolDesc = prometheus.NewDesc("billsync_connect_feed_pool",
		"The Connect accounts' polls this replica's feed may run at once: as many as the events list's rate can use at the polls' observed duration (8 to 64).",
		[]string{"provider"}, nil)
	connectPollsDesc = prometheus.NewDesc("billsync_connect_feed_polls_total",
		"Polls of Connect accounts' feeds this replica made, by result: ok, or failed (the account was backed off).",
		[]string{"provider", "result"}, nil)
)

type connectFeedCollector struct {
	stats ConnectFeedStatsFunc
	view  func() reconcile.ConnectFeedView
	log   *slog.Logger
}

func (c *connectFeedCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- connectAccountsDesc
	ch <- connectOldestPollDesc
	ch <- connectCaughtDesc
	ch <- connectRoundDesc
	ch <- connectServedDesc
	ch <- connectPoolDesc
	ch <- connectPollsDesc
}

func (c *connectFeedCollector) Collect(ch chan<- prometheus.Metric) {
	v := c.view()
	ch <- prometheus.MustNewConstMetric(connectRoundDesc, prometheus.GaugeValue, v.Round.Seconds(), v.Provider)
	ch <- prometheus.MustNewConstMetric(connectServedDesc, prometheus.GaugeValue, float64(v.Served), v.Provider)
	ch <- prometheus.MustNewConstMetric(connectPoolDesc, prometheus.GaugeValue, float64(v.Pool), v.Provider)
	ch <- prometheus.MustNewConstMetric(connectPollsDesc, prometheus.CounterValue, float64(v.Polls), v.Provider, "ok")
	ch <- prometheus.MustNewConstMetric(connectPollsDesc, prometheus.CounterValue, float64(v.Failed), v.Provider, "failed")

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	st, err := c.stats(ctx)
	if err != nil {
		c.log.Warn("metrics: read Connect feed figures", slog.Any("error", err))
		return
	}
	for state, n := range map[string]int{"authorized": st.Authorized, "deauthorized": st.Deauthorized,
		"backed_off": st.BackedOff, "never_polled": st.NeverPolled} {
		ch <- prometheus.MustNewConstMetric(connectAccountsDesc, prometheus.GaugeValue, float64(n), st.Provider, state)
	}
	ch <- prometheus.MustNewConstMetric(connectCaughtDesc, prometheus.CounterValue, float64(st.Caught), st.Provider)
	if st.OldestPoll != nil {
		ch <- prometheus.MustNewConstMetric(connectOldestPollDesc, prometheus.GaugeValue, time.Since(*st.OldestPoll).Seconds(), st.Provider)
	}
}

// CollectConnectSweeps reports the Stripe Connect accounts' sweeps per
// provider, never per account: the accounts never swept or failing and
// the longest any authorising account has gone unswept, read from the
// database so every replica tells the same; and this replica's scheduler
// (view): the interval it sweeps each account at, its runs and the
// customers they healed.
func (m *Metrics) CollectConnectSweeps(stats func(context.Context) (reconcile.ConnectSweepStats, error),
	view func() reconcile.ConnectSweepsView, logger *slog.Logger) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	m.reg.MustRegister(&connectSweepCollector{stats: stats, view: view, log: logger})
}

var (
	connectSweepAccountsDesc = prometheus.NewDesc("billsync_connect_sweep_accounts",
		"Authorised Stripe Connect accounts by the state of their sweeps: never_swept (no run started yet) and failing (the newest run failed; tried again an hour after).",
		[]string{"provider", "state"}, nil)
	connectSweepOldestDesc = prometheus.NewDesc("billsync_connect_sweep_oldest_success_age_seconds",
		"Now minus the least recent start of an authorised Connect account's newest successful sweep: the longest any has gone unswept, about billsync_connect_sweep_every_seconds while the pool keeps up (absent before the first success).",
		[]string{"provider"}, nil)
	connectSweepHealedDesc = prometheus.NewDesc("billsync_connect_sweep_healed_accounts_total",
		"Customers this replica's sweeps of Connect accounts healed: drift no webhook or feed had fixed (an account's first run, its import, not counted); sum over replicas.",
		[]string{"provider"}, nil)
	connectSweepEveryDesc = prometheus.NewDesc("billsync_connect_sweep_every_seconds",
		"The interval this replica's Connect sweeps sweep each account at: what a tenth of the Connect read allocation pays for over the accounts served, never shorter than a day.",
		[]string{"provider"}, nil)
	connectSweepRunsDesc = prometheus.NewDesc("billsync_connect_sweep_runs_total",
		"Sweeps of Connect accounts this replica ran, by result: ok or failed.",
		[]string{"provider", "result"}, nil)
)

type connectSweepCollector struct {
	stats func(context.Context) (reconcile.ConnectSweepStats, error)
	view  func() reconcile.ConnectSweepsView
	log   *slog.Logger
}

func (c *connectSweepCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- connectSweepAccountsDesc
	ch <- connectSweepOldestDesc
	ch <- connectSweepHealedDesc
	ch <- connectSweepEveryDesc
	ch <- connectSweepRunsDesc
}

func (c *connectSweepCollector) Collect(ch chan<- prometheus.Metric) {
	v := c.view()
	ch <- prometheus.MustNewConstMetric(connectSweepEveryDesc, prometheus.GaugeValue, v.Every.Seconds(), v.Provider)
	ch <- prometheus.MustNewConstMetric(connectSweepRunsDesc, prometheus.CounterValue, float64(v.Succeeded), v.Provider, "ok")
	ch <- prometheus.MustNewConstMetric(connectSweepRunsDesc, prometheus.CounterValue, float64(v.Failed), v.Provider, "failed")
	ch <- prometheus.MustNewConstMetric(connectSweepHealedDesc, prometheus.CounterValue, float64(v.Healed), v.Provider)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	st, err := c.stats(ctx)
	if err != nil {
		c.log.Warn("metrics: read Connect sweep figures", slog.Any("error", err))
		return
	}
	ch <- prometheus.MustNewConstMetric(connectSweepAccountsDesc, prometheus.GaugeValue, float64(st.NeverSwept), st.Provider, "never_swept")
	ch <- prometheus.MustNewConstMetric(connectSweepAccountsDesc, prometheus.GaugeValue, float64(st.Failing), st.Provider, "failing")
	if st.OldestSuccess != nil {
		ch <- prometheus.MustNewConstMetric(connectSweepOldestDesc, prometheus.GaugeValue, time.Since(*st.OldestSuccess).Seconds(), st.Provider)
	}
}
