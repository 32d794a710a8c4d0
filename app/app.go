// Package app assembles billsync, once, from one Config: the intake and
// the APIs (server), the workers, the sweeps, the events feed, the app's
// webhooks, the schedules and the bounded stop. serve runs it; the demo,
// the bench and the test harness (mocks/testenv) build it the same way and
// differ only in their configuration and in the parts they give (a store
// already opened, clients on a fake provider, verifiers for its endpoints).
//
// It parses no flags and opens no database (cmd does both), and only cmd
// and the workshop import it (depguard): the domain and the adapters never
// know how they are assembled.
package app

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/billsync/billsync/providers/kinde"
	"github.com/billsync/billsync/providers/stripe"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/server"
	"github.com/billsync/billsync/store"
)

// Parts are what the caller already holds: the store (opened and
// migrated), the plans and the logger, and for the workshop only, clients
// on a fake provider (used instead of those Config's keys would build) and
// verifiers for the fake's endpoints (instead of those Config's secrets and
// KINDE_DOMAIN would build). serve gives no clients and no verifiers.
type Parts struct {
	Store  *store.Store     // required
	Plans  *reconcile.Plans // required
	Logger *slog.Logger     // nil discards
	Stdout io.Writer        // where Run says where it listens; nil discards

	Stripe    *stripe.Client
	Kinde     *kinde.Client
	Verifiers []server.Verifier
}

// App is billsync assembled: New builds every part, Run (or Start) runs
// them.
type App struct {
	cfg      Config
	st       *store.Store
	plans    *reconcile.Plans
	logger   *slog.Logger
	stdout   io.Writer
	metrics  *server.Metrics
	poll     time.Duration // the loops' poll without LISTEN; 0: their own
	handler  http.Handler
	worker   *reconcile.Worker
	spending *reconcile.Spending // nil without Stripe
	// connectFeed polls the Stripe Connect accounts' feeds; nil when
	// -stripe-connect is off or the events feed is.
	connectFeed *reconcile.ConnectFeed
	// connectSweeps sweeps the Stripe Connect accounts; nil when
	// -stripe-connect is off or the sweeps are.
	connectSweeps *reconcile.ConnectSweeps
	intakes       []string // the providers whose webhooks are verified here
	fetches       []string // the providers fetched from here (whose import the app API reports)
	// parts are the long-running parts, each running until its context
	// ends and returning once it has stopped.
	parts []func(context.Context)
	// stopping closes when the parts' context ends: the change feed's long
	// polls answer at once then.
	stopping chan struct{}
	stopOnce sync.Once
}

// New builds billsync from cfg and parts. Nothing runs yet but the Stripe
// budget's first report (so the first fetches keep to it) and the app
// webhook endpoints' registration; ctx bounds those and the Kinde key
// set's cache.
func New(ctx context.Context, cfg Config, parts Parts) (*App, error) {
	logger := cmp.Or(parts.Logger, slog.New(slog.DiscardHandler))
	st := parts.Store
	a := &App{cfg: cfg, st: st, plans: parts.Plans, logger: logger, stdout: cmp.Or[io.Writer](parts.Stdout, io.Discard),
		metrics: server.NewMetrics(queueDepth(st), logger), stopping: make(chan struct{})}
	// Behind a transaction pooler with no direct URL nothing can LISTEN:
	// workers, the app deliverer and the change feed's long polls look
	// for work every store.PollWithoutListen instead of their 1 s.
	if !st.Connection().Listen {
		a.poll = store.PollWithoutListen
	}
	a.metrics.CollectSweeps(st.SweepStats, logger)
	a.metrics.CollectImports(st.RunningImports, logger)
	a.metrics.CollectAccountChanges(st.AppDeliveryStats, logger)
	provs, err := a.providers(ctx, parts)
	if err != nil {
		return nil, err
	}
	for _, p := range provs.List() {
		a.fetches = append(a.fetches, p.Name())
	}
	verifiers := parts.Verifiers
	if verifiers == nil {
		if verifiers, err = newVerifiers(ctx, cfg, provs, a.metrics, logger); err != nil {
			return nil, err
		}
	}
	for _, v := range verifiers {
		a.intakes = append(a.intakes, v.Provider())
	}
	// The app's endpoints get their cursors before anything here writes a
	// change: a new endpoint starts from now, and gets this process's
	// changes from the first.
	deliverer, err := a.newDeliverer(ctx)
	if err != nil {
		return nil, err
	}
	feeds, err := a.addFeed(provs)
	if err != nil {
		return nil, err
	}
	logger.Info("providers on", "intake", strings.Join(a.intakes, ", "), "fetch", provs.Names(), "workers", cfg.Workers,
		"events_feed", eventsFeedSetting(cfg), "connect_feeds", connectFeedSetting(cfg), "connect_sweeps", connectSweepSetting(cfg))
	var sweeps server.Sweeps // nil without workers: the admin API answers 503
	if cfg.Workers > 0 {
		if sweeps, err = a.addWorkers(provs); err != nil {
			return nil, err
		}
	}
	if err := a.addPrunes(); err != nil {
		return nil, err
	}
	committed := a.addChanges(deliverer)
	a.handler = a.newServer(verifiers, sweeps, feeds, committed)
	return a, nil
}

// providers returns the clients parts gives, or else those cfg
// configures, and starts sharing Stripe's budget.
func (a *App) providers(ctx context.Context, parts Parts) (Providers, error) {
	provs := Providers{Stripe: parts.Stripe, Kinde: parts.Kinde}
	if provs.Stripe == nil && provs.Kinde == nil {
		var err error
		if provs, err = NewProviders(a.cfg, a.plans, a.logger, a.metrics); err != nil {
			return provs, err
		}
	}
	if provs.Stripe != nil {
		a.metrics.SetProviderRateLimit(stripe.Provider, a.cfg.StripeRate())
		// It outlives the parts' context: its last report comes once the
		// HTTP server has drained (the admin API's resyncs, the intake's
		// thin-event reads) and the workers have stopped, so it counts
		// every read this process made, within what is left of
		// -shutdown-timeout. (A serve that fails before it listens exits
		// without it: the replica is dropped when it is no longer seen.)
		var err error
		if a.spending, err = newSpending(context.WithoutCancel(ctx), a.st, provs.Stripe, a.cfg.Workers > 0, a.metrics, a.logger); err != nil {
			return provs, err
		}
	}
	if provs.Kinde != nil {
		a.metrics.SetProviderRateLimit(kinde.Provider, a.cfg.KindeRateLimit)
	}
	return provs, nil
}

// newDeliverer builds the app's webhooks' deliverer (nil without an
// endpoint) and registers the endpoints.
func (a *App) newDeliverer(ctx context.Context) (*reconcile.AppDeliverer, error) {
	if len(a.cfg.AppWebhookURLs) == 0 {
		return nil, nil
	}
	sender, err := server.NewAppSender(server.AppSenderConfig{Secret: a.cfg.AppWebhookSecret})
	if err != nil {
		return nil, err
	}
	deliverer, err := reconcile.NewAppDeliverer(reconcile.AppDelivererConfig{Name: WorkerName(), Store: a.st, Sender: sender,
		Endpoints: a.cfg.AppWebhookURLs, Lease: a.cfg.AppWebhookLease, Poll: a.poll,
		QuietImports: a.cfg.QuietImports, Logger: a.logger.With("component", "app-webhooks"),
		OnAttempt: a.metrics.ObserveAppDelivery})
	if err != nil {
		return nil, err
	}
	return deliverer, deliverer.Register(ctx)
}

// addFeed adds the Stripe events feed when it is on, and returns the
// providers whose feed runs here.
func (a *App) addFeed(provs Providers) ([]string, error) {
	if !a.cfg.FeedOn() || provs.Stripe == nil {
		return nil, nil
	}
	feed, err := newStripeFeed(a.cfg, a.st, provs.Stripe, a.spending, a.logger)
	if err != nil {
		return nil, err
	}
	// Only while the feed runs: a feed turned off leaves its last state in
	// the database, whose poll time would age into a false
	// BillsyncEventsFeedStalled alert.
	a.metrics.CollectEventsFeeds(a.st.EventsFeedStates, a.logger)
	a.parts = append(a.parts, feed.Run)
	if a.cfg.StripeConnect.Enabled() {
		if a.connectFeed, err = newStripeConnectFeed(a.cfg, a.st, provs.Stripe, a.spending, a.logger); err != nil {
			return nil, err
		}
		// Per provider, never per account; only while it runs, as the
		// events feed's.
		a.metrics.CollectConnectFeeds(func(ctx context.Context) (reconcile.ConnectFeedStats, error) {
			return a.st.ConnectFeedStats(ctx, stripe.Provider)
		}, a.connectFeed.View, a.logger)
		a.parts = append(a.parts, a.connectFeed.Run)
	}
	return []string{stripe.Provider}, nil
}

// addPrunes adds the prune schedule, when there is one.
func (a *App) addPrunes() error {
	sched, err := ParseSchedule(a.cfg.PruneSchedule)
	if err != nil {
		return fmt.Errorf("BILLSYNC_PRUNE_SCHEDULE %q: %w", a.cfg.PruneSchedule, err)
	}
	if sched == nil {
		return nil
	}
	r := reconcile.Retention{OlderThan: a.cfg.PruneAge}
	a.parts = append(a.parts, Schedule{What: "prune", When: sched, Job: prune(a.st, r, a.logger), Logger: a.logger,
		Attrs: []any{"older_than", r.OlderThan}}.Run)
	return nil
}

// addChanges adds the listener that wakes the change feed's long polls
// and the app deliverer (may be nil) when a change commits.
func (a *App) addChanges(deliverer *reconcile.AppDeliverer) *reconcile.Signal {
	var committed reconcile.Signal
	wakeDeliverer := func() {}
	if deliverer != nil {
		wakeDeliverer = deliverer.Wake
		a.parts = append(a.parts, deliverer.Run)
	}
	a.parts = append(a.parts, func(ctx context.Context) {
		a.st.ListenChanges(ctx, a.logger, func() { committed.Fire(); wakeDeliverer() })
	})
	return &committed
}

// newServer is billsync's HTTP surface on the parts built.
func (a *App) newServer(verifiers []server.Verifier, sweeps server.Sweeps, feeds []string, committed *reconcile.Signal) http.Handler {
	var reconciler server.Reconciler // the admin API's resyncs take a worker's path
	claimErr := func() error { return nil }
	if a.worker != nil {
		reconciler, claimErr = a.worker, a.worker.ClaimErr
	}
	st, cfg := a.st, a.cfg
	return server.New(server.Config{
		Logger:    a.logger,
		Inbox:     st,
		Verifiers: verifiers,
		// Ready while the database answers and the worker's claims do: a
		// pooler can answer pings and still refuse every claim.
		Ready: func(ctx context.Context) error {
			if err := st.Ping(ctx); err != nil {
				return err
			}
			return claimErr()
		},
		Metrics: a.metrics,
		// A hung database gets the provider a 503 (it retries), not a
		// request held open for as long as the database hangs.
		StoreTimeout: cfg.IntakeTimeout,
		Admin: server.Admin{Token: cfg.AdminToken, Store: st, Reconciler: reconciler, Sweeps: sweeps, Changes: st,
			ProviderLimits: map[string]float64{stripe.Provider: cfg.StripeRate(), kinde.Provider: cfg.KindeRateLimit},
			EventsFeeds:    feeds},
		App: server.App{Token: cfg.AppToken, Store: st, Plans: a.plans, ChangeFeed: st, Committed: committed, ChangeFeedPoll: a.poll,
			Stopping: a.stopping, Imports: st, Providers: a.fetches},
	})
}

// newVerifiers builds the intake's verifiers. A provider's intake is on
// when its webhooks can be verified: Stripe with STRIPE_WEBHOOK_SECRET,
// Kinde with KINDE_DOMAIN (its key set) and the M2M credentials its
// fetches need (cmd refuses half a Kinde configuration).
func newVerifiers(ctx context.Context, cfg Config, provs Providers, metrics *server.Metrics, logger *slog.Logger) ([]server.Verifier, error) {
	var verifiers []server.Verifier
	if len(cfg.StripeWebhookSecrets) > 0 {
		stripeVerifier, err := stripe.NewVerifier(cfg.StripeWebhookSecrets, cfg.StripeTolerance)
		if err != nil {
			return nil, err
		}
		stripeVerifier.SetOnConnect(func() { metrics.ObserveConnectEvent(stripe.Provider) })
		stripeVerifier.ServeConnect(stripe.Connect{Secrets: cfg.StripeConnectSecrets, Policy: cfg.StripeConnect, Live: stripe.LiveKey(cfg.StripeAPIKey)})
		verifiers = append(verifiers, stripeVerifier)
	}
	if cfg.KindeOn() {
		// Nothing is fetched yet: serve starts while Kinde is unreachable,
		// and a token whose key cannot be fetched then gets 503 (Kinde
		// retries), never 200.
		kindeVerifier, err := kinde.NewVerifier(ctx, kinde.VerifierConfig{
			Domain: cfg.KindeDomain, ReplayWindow: cfg.KindeReplayWindow, Logger: logger,
		})
		if err != nil {
			return nil, err
		}
		verifiers = append(verifiers, kindeVerifier)
	}
	return verifiers, nil
}

// addWorkers builds the worker and the sweeps, and adds them (with the
// worker's wake-ups and the sweep schedule) to a's parts.
func (a *App) addWorkers(provs Providers) (*reconcile.SweepRunner, error) {
	cfg := a.cfg
	worker, err := reconcile.NewWorker(reconcile.WorkerConfig{
		Name: WorkerName(), Store: a.st, Providers: provs.List(), Plans: a.plans,
		Logger: a.logger, Concurrency: cfg.Workers, OnOutcome: a.metrics.ObserveReconcile, RecheckDelay: cfg.RecheckDelay,
		Poll: a.poll, Lease: cfg.WorkerLease,
	})
	if err != nil {
		return nil, err
	}
	a.worker = worker
	a.metrics.CollectFetchSlots(worker.Slots)
	a.parts = append(a.parts, func(ctx context.Context) { a.st.Listen(ctx, a.logger, worker.Wake) }, worker.Run)
	// Every provider is swept: Stripe by its bulk listing, Kinde by
	// queueing every Kinde account within its own pace. The runner stops
	// the sweeps the admin API, the console and the schedule start with
	// the workers, within -shutdown-timeout.
	sweepers, err := provs.Sweepers(a.st, a.plans, a.logger, cfg, "", SweepHooks{OnAnswered: a.metrics.ObserveAnswered})
	if err != nil {
		return nil, err
	}
	runner, err := reconcile.NewSweepRunner(reconcile.SweepRunnerConfig{Sweepers: sweepers, Logger: a.logger,
		AccountSweeper: AccountSweeper(cfg, provs, sweepers)})
	if err != nil {
		return nil, err
	}
	a.parts = append(a.parts, runner.Run)
	if err := a.addSamplers(provs); err != nil {
		return nil, err
	}
	if cfg.AutoImport {
		// In the background, through the runner: serve's stop stops an
		// import, and the next start resumes it from its cursor.
		a.parts = append(a.parts, func(ctx context.Context) { runner.StartImports(ctx) })
	}
	if sched, err := ParseSchedule(cfg.SweepSchedule); err != nil {
		return nil, fmt.Errorf("BILLSYNC_SWEEP_SCHEDULE %q: %w", cfg.SweepSchedule, err)
	} else if sched != nil {
		a.parts = append(a.parts, Schedule{What: "sweep", When: sched, Job: startSweeps(runner, a.logger), Logger: a.logger}.Run)
		if err := a.addConnectSweeps(provs, sweepers); err != nil {
			return nil, err
		}
	}
	return runner, nil
}

// AccountSweeper returns the sweeper of one served Stripe Connect
// account's customers, listed on its behalf, made from the Stripe sweeper
// among sweepers (the scheduled sweeps of the accounts, the admin API's
// and billsync sweep -stripe-account); an account not served, or not an
// acct_ id, wraps reconcile.ErrInvalid. nil when -stripe-connect is off
// or Stripe is not swept.
func AccountSweeper(cfg Config, provs Providers, sweepers []*reconcile.Sweeper) func(string) (*reconcile.Sweeper, error) {
	i := slices.IndexFunc(sweepers, func(s *reconcile.Sweeper) bool { return s.Provider() == stripe.Provider })
	if !cfg.StripeConnect.Enabled() || provs.Stripe == nil || i < 0 {
		return nil
	}
	return func(account string) (*reconcile.Sweeper, error) {
		if !reconcile.IsConnectedAccount(account) {
			return nil, fmt.Errorf("%w: %q is not a Stripe Connect account's acct_ id", reconcile.ErrInvalid, account)
		}
		if ok, why := cfg.StripeConnect.Serves(account); !ok {
			return nil, fmt.Errorf("%w: connected account %s: %s", reconcile.ErrInvalid, account, why)
		}
		return sweepers[i].ForAccount(account, provs.Stripe.AccountLister(account))
	}
}

// addConnectSweeps adds the sweeps of the Stripe Connect accounts served
// (-stripe-connect), each swept on its own at most once a day, spread
// over the day, within a tenth of the connected accounts' read allocation,
// when the sweeps are on (-sweep-schedule not off).
func (a *App) addConnectSweeps(provs Providers, sweepers []*reconcile.Sweeper) error {
	sweeperOf := AccountSweeper(a.cfg, provs, sweepers)
	if sweeperOf == nil {
		return nil
	}
	sweeps, err := reconcile.NewConnectSweeps(reconcile.ConnectSweepsConfig{
		Provider: stripe.Provider, SweeperOf: sweeperOf, Store: a.st, Policy: a.cfg.StripeConnect, Logger: a.logger,
		Allocation: a.spending.ConnectAllocation,
	})
	if err != nil {
		return err
	}
	a.connectSweeps = sweeps
	a.metrics.CollectConnectSweeps(func(ctx context.Context) (reconcile.ConnectSweepStats, error) {
		return a.st.ConnectSweepStats(ctx, stripe.Provider)
	}, sweeps.View, a.logger)
	a.parts = append(a.parts, sweeps.Run)
	return nil
}

// ConnectSweeps returns the Stripe Connect accounts' sweep scheduler; nil
// when it does not run here (-stripe-connect off, or the sweeps off).
func (a *App) ConnectSweeps() *reconcile.ConnectSweeps { return a.connectSweeps }

// addSamplers adds each fetched provider's correctness sample when
// -sample-share is set: one replica samples a provider at a time (a
// lease), through the worker's dry run, within the share of the
// provider's rate and (Stripe) of what its read allocation leaves.
func (a *App) addSamplers(provs Providers) error {
	if a.cfg.SampleShare <= 0 {
		return nil
	}
	var err error
	add := func(p reconcile.Provider, reads float64, spend func() (allocation, projected float64)) {
		if p == nil || err != nil {
			return
		}
		var s *reconcile.Sampler
		s, err = reconcile.NewSampler(reconcile.SamplerConfig{Provider: p.Name(), Worker: a.worker, Store: a.st,
			Share: a.cfg.SampleShare, Logger: a.logger, OnSample: a.metrics.ObserveSample,
			Budget: func() reconcile.SampleBudget {
				b := reconcile.SampleBudget{Rate: p.Budget().Rate, ReadsPerAccount: reads}
				if spend != nil {
					b.Allocation, b.Projected = spend()
				}
				return b
			}})
		if err == nil {
			a.metrics.ExpectSamples(p.Name())
			a.parts = append(a.parts, s.Run)
		}
	}
	if provs.Stripe != nil {
		var spend func() (float64, float64)
		if a.spending != nil {
			spend = func() (float64, float64) {
				v := a.spending.View()
				if !v.Reported {
					return v.Allocation, 0
				}
				return v.Allocation, v.Projected
			}
		}
		add(provs.Stripe, readsPerAccount(a.cfg.StripeEntitlements), spend)
	}
	if provs.Kinde != nil {
		add(provs.Kinde, readsPerAccount(a.cfg.KindeEntitlements), nil)
	}
	return err
}

// readsPerAccount is what a reconcile's fetch costs: the customer (with
// its subscriptions), and its entitlements when they are read.
func readsPerAccount(entitlements bool) float64 {
	if entitlements {
		return 2
	}
	return 1
}

// Handler is billsync's HTTP surface: the intake, the admin and app APIs,
// the console, health and metrics.
func (a *App) Handler() http.Handler { return a.handler }

// Worker is the reconcile worker (nil with no workers configured): tests
// and the demo drain it (Worker.Drain) instead of running the parts.
func (a *App) Worker() *reconcile.Worker { return a.worker }

// Run serves billsync on Config.Addr with every long-running part until
// ctx ends; then, within -shutdown-timeout in all, in-flight requests
// finish while the parts stop, and the Stripe budget's last report goes
// out with what is left.
func (a *App) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopParts, last := a.start(ctx)
	stop := func(shutCtx context.Context) error {
		cancel()
		return stopParts(shutCtx)
	}
	return listenAndServe(ctx, a.cfg.Addr, a.handler, a.cfg.ShutdownTimeout, a.stdout, a.logger, stop, last,
		a.cfg.AdminToken != "", a.intakes...)
}

// Start runs the long-running parts until ctx ends, without serving
// HTTP (the caller serves Handler); stop waits for them within its
// context, then sends the Stripe budget's last report.
func (a *App) Start(ctx context.Context) (stop func(context.Context) error) {
	stopParts, last := a.start(ctx)
	return func(shutCtx context.Context) error {
		err := stopParts(shutCtx)
		last(shutCtx)
		return err
	}
}

// start runs the parts and the Stripe budget's reports. stopParts waits
// for the parts (whose context the caller ends) within shutCtx: workers
// finish the job in hand and release their leases; sweeps apply the pages
// in hand and stay resumable. last stops the reports with a last one.
func (a *App) start(ctx context.Context) (stopParts func(shutCtx context.Context) error, last func(shutCtx context.Context)) {
	context.AfterFunc(ctx, func() { a.stopOnce.Do(func() { close(a.stopping) }) })
	var wg sync.WaitGroup
	for _, run := range a.parts {
		wg.Add(1)
		go func() { defer wg.Done(); run(ctx) }()
	}
	stopParts = func(shutCtx context.Context) error {
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
			return nil
		case <-shutCtx.Done():
			return fmt.Errorf("workers still busy after -shutdown-timeout %s: their leases run out on their own", a.cfg.ShutdownTimeout)
		}
	}
	last = func(context.Context) {}
	if a.spending != nil {
		stopSpending := runSpending(context.WithoutCancel(ctx), a.spending)
		last = func(shutCtx context.Context) {
			done := make(chan struct{})
			go func() { defer close(done); stopSpending() }()
			select {
			case <-done:
			case <-shutCtx.Done():
				a.logger.Warn("budget: no time left for the last read report; the replica is dropped when it is no longer seen")
			}
		}
	}
	return stopParts, last
}

// newStripeFeed builds the Stripe events feed. The webhook endpoint's
// status is read on each poll when webhooks are expected (a webhook
// secret is set) or STRIPE_WEBHOOK_ENDPOINT_ID names the endpoint.
// Its interval follows spending's read allocation (a quarter of it),
// never faster than -events-poll.
func newStripeFeed(cfg Config, st *store.Store, client *stripe.Client, spending *reconcile.Spending,
	logger *slog.Logger) (*reconcile.EventsFeed, error) {
	fc := reconcile.EventsFeedConfig{
		Provider: stripe.Provider, Source: client, Store: st, Allocation: spending.Allocation,
		Interval: cfg.EventsPoll, Overlap: cfg.EventsOverlap, Logger: logger,
	}
	if len(cfg.StripeWebhookSecrets) > 0 || cfg.StripeEndpointID != "" {
		fc.Endpoint = stripe.Endpoint{Client: client, ID: cfg.StripeEndpointID}
	}
	return reconcile.NewEventsFeed(fc)
}

// newStripeConnectFeed builds the feeds of the Stripe Connect accounts
// served (-stripe-connect), at most every -events-poll each, within a
// quarter of the read allocation on behalf of connected accounts
// (docs/connect.md): spending's Connect one, 500 reads a transaction of
// the connected accounts' customers, apart from the platform's own (Stripe
// allocates the reads made with Stripe-Account apart).
func newStripeConnectFeed(cfg Config, st *store.Store, client *stripe.Client, spending *reconcile.Spending,
	logger *slog.Logger) (*reconcile.ConnectFeed, error) {
	return reconcile.NewConnectFeed(reconcile.ConnectFeedConfig{
		Provider: stripe.Provider, Source: client, Store: st, Policy: cfg.StripeConnect, Allocation: spending.ConnectAllocation,
		Interval: cfg.EventsPoll, Overlap: cfg.EventsOverlap, Logger: logger,
		// The events list's rate: the feed's polls keep it whole (one
		// replica leads them).
		Rate: func() float64 { return min(cfg.StripeOperationRate, cfg.StripeRate()) },
	})
}

// ConnectFeed returns the Stripe Connect accounts' feed scheduler; nil
// when it does not run here (-stripe-connect off, or the events feed off).
func (a *App) ConnectFeed() *reconcile.ConnectFeed { return a.connectFeed }

// connectFeedSetting says how the Stripe Connect accounts' feeds run, for
// the start-up log.
func connectFeedSetting(cfg Config) string {
	if !cfg.FeedOn() || !cfg.StripeConnect.Enabled() {
		return "off"
	}
	return fmt.Sprintf("%s accounts, %d to %d polls at once (what the events list's rate can use), oldest first, each at most every %s within a quarter of the Connect read allocation",
		cfg.StripeConnect.Mode, reconcile.DefaultConnectPool, reconcile.MaxConnectPool, cfg.EventsPoll)
}

// connectSweepSetting says how the Stripe Connect accounts' sweeps run,
// for the start-up log.
func connectSweepSetting(cfg Config) string {
	if !cfg.StripeConnect.Enabled() || cfg.SweepSchedule == "off" || cfg.SweepSchedule == "" {
		return "off"
	}
	return fmt.Sprintf("%s accounts, each at most once every %s within a tenth of the Connect read allocation, %d at once, oldest first",
		cfg.StripeConnect.Mode, reconcile.DefaultConnectSweepEvery, reconcile.DefaultConnectSweepPool)
}

// eventsFeedSetting says how the events feed runs, for the start-up log.
func eventsFeedSetting(cfg Config) string {
	switch {
	case !cfg.FeedOn():
		return "off"
	case len(cfg.StripeWebhookSecrets) == 0:
		return "at most every " + cfg.EventsPoll.String() + ", within a quarter of Stripe's read allocation (webhook-free: the only Stripe signal)"
	}
	return "at most every " + cfg.EventsPoll.String() + ", within a quarter of Stripe's read allocation"
}

// queueDepth adapts the store for the metrics' queue gauge.
func queueDepth(st *store.Store) server.QueueDepthFunc {
	return func(ctx context.Context) (pending, due, dead int, err error) {
		q, err := st.QueueDepth(ctx)
		return q.Pending, q.Due, q.Dead, err
	}
}

// WorkerName identifies this process's lease holders in reconcile_queue.
func WorkerName() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s-%d", cmp.Or(host, "billsync"), os.Getpid())
}
