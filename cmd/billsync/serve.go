package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/billsync/billsync/providers/kinde"
	"github.com/billsync/billsync/providers/stripe"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/server"
	"github.com/billsync/billsync/store"
)

func runServe(ctx context.Context, args []string, stdout io.Writer, logger *slog.Logger) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), `usage: billsync serve [flags]

Verifies webhooks and stores them in PostgreSQL before answering 200, and
runs the workers that reconcile each signalled customer against its
provider's API. Stripe is on with STRIPE_WEBHOOK_SECRET and STRIPE_API_KEY,
or with STRIPE_API_KEY alone on the events feed (webhook-free; see
docs/events-feed.md); Kinde with KINDE_DOMAIN, KINDE_CLIENT_ID and
KINDE_CLIENT_SECRET; at least one must be. With STRIPE_API_KEY, one replica
also lists Stripe's events every -events-poll as a second signal. Each
secret also as *_FILE; see docs/configuration.md.`)
		fs.PrintDefaults()
	}
	var cfg config
	cfg.bindServe(fs, os.Getenv)
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg.ownsCluster = true
	if err := errors.Join(cfg.loadSecrets(os.Getenv), cfg.validateServe()); err != nil {
		return fmt.Errorf("configuration:\n%w", err)
	}
	plans, err := loadPlans(cfg.PlansPath)
	if err != nil {
		return err
	}

	st, closeDB, err := openDatabase(ctx, cfg, logger)
	if err != nil {
		return err
	}
	defer closeDB()
	if err := prepareSchema(ctx, st, cfg.NoMigrate, logger); err != nil {
		return err
	}
	// Behind a transaction pooler with no direct URL nothing can LISTEN:
	// workers, the app deliverer and the change feed's long polls look
	// for work every store.PollWithoutListen instead of their 1 s.
	var poll time.Duration
	if !st.Connection().Listen {
		poll = store.PollWithoutListen
	}
	metrics := server.NewMetrics(queueDepth(st), logger)
	metrics.CollectSweeps(st.SweepStats, logger)
	metrics.CollectAppChanges(st.DeliveryStats, logger)

	// Workers stop with the server, whether by signal or by a listen error:
	// their context ends at the signal, the HTTP drain starts with it, and
	// -shutdown-timeout bounds both.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var reconciler server.Reconciler // the admin API's resyncs take a worker's path
	claimErr := func() error { return nil }
	var feeds []string       // providers whose events feed runs here
	var sweeps server.Sweeps // nil without workers: the admin API answers 503
	provs, err := newProviders(cfg, logger, metrics)
	if err != nil {
		return err
	}
	var spending *reconcile.Spending // the Stripe budget every replica shares
	lastReport := func(context.Context) {}
	if provs.stripe != nil {
		metrics.SetProviderRateLimit(stripe.Provider, cfg.stripeRate())
		// It outlives the signal: its last report comes once the HTTP
		// server has drained (the admin API's resyncs, the intake's
		// thin-event reads) and the workers have stopped, so it counts
		// every read this process made, within what is left of
		// -shutdown-timeout. (A serve that fails before it listens exits
		// without it: the replica is dropped when it is no longer seen.)
		var stopSpending func()
		spending, stopSpending, err = spendStripe(context.WithoutCancel(ctx), st, provs.stripe, cfg.Workers > 0, metrics, logger)
		if err != nil {
			return err
		}
		lastReport = func(shutCtx context.Context) {
			done := make(chan struct{})
			go func() { defer close(done); stopSpending() }()
			select {
			case <-done:
			case <-shutCtx.Done():
				logger.Warn("budget: no time left for the last read report; the replica is dropped when it is no longer seen")
			}
		}
	}
	if provs.kinde != nil {
		metrics.SetProviderRateLimit(kinde.Provider, cfg.KindeRateLimit)
	}
	// A provider's intake is on when its webhooks can be verified: Stripe
	// with STRIPE_WEBHOOK_SECRET, Kinde with KINDE_DOMAIN (its key set) and
	// the M2M credentials its fetches need (validateServe refuses half a
	// Kinde configuration).
	var verifiers []server.Verifier
	if len(cfg.StripeWebhookSecrets) > 0 {
		stripeVerifier, err := stripe.NewVerifier(cfg.StripeWebhookSecrets, cfg.StripeTolerance)
		if err != nil {
			return err
		}
		stripeVerifier.SetOnConnect(func() { metrics.ObserveConnectEvent(stripe.Provider) })
		verifiers = append(verifiers, stripeVerifier)
	}
	if cfg.kindeOn() {
		// Nothing is fetched yet: serve starts while Kinde is unreachable,
		// and a token whose key cannot be fetched then gets 503 (Kinde
		// retries), never 200.
		kindeVerifier, err := kinde.NewVerifier(ctx, kinde.VerifierConfig{
			Domain: cfg.KindeDomain, ReplayWindow: cfg.KindeReplayWindow, Logger: logger,
		})
		if err != nil {
			return err
		}
		verifiers = append(verifiers, kindeVerifier)
	}
	// The app's endpoints get their cursors before anything here writes a
	// change: a new endpoint starts from now, and gets this process's
	// changes from the first.
	var deliverer *reconcile.Deliverer
	if len(cfg.AppWebhookURLs) > 0 {
		sender, err := server.NewAppSender(server.AppSenderConfig{Secret: cfg.AppWebhookSecret})
		if err != nil {
			return err
		}
		deliverer, err = reconcile.NewDeliverer(reconcile.DelivererConfig{Name: workerName(), Store: st, Sender: sender,
			Endpoints: cfg.AppWebhookURLs, Lease: cfg.AppWebhookLease, Poll: poll, Logger: logger.With("component", "app-webhooks"), OnAttempt: metrics.ObserveAppDelivery})
		if err != nil {
			return err
		}
		if err := deliverer.Register(ctx); err != nil {
			return err
		}
	}
	if cfg.feedOn() && provs.stripe != nil {
		feed, err := newStripeFeed(cfg, st, provs.stripe, spending, logger)
		if err != nil {
			return err
		}
		// Only while the feed runs: a feed turned off leaves its last
		// state in the database, whose poll time would age into a false
		// BillsyncEventsFeedStalled alert.
		metrics.CollectFeeds(st.FeedStates, logger)
		feeds = append(feeds, stripe.Provider)
		wg.Add(1)
		go func() { defer wg.Done(); feed.Run(ctx) }()
	}
	var intakes []string
	for _, v := range verifiers {
		intakes = append(intakes, v.Provider())
	}
	logger.Info("providers on", "intake", strings.Join(intakes, ", "), "fetch", provs.names(), "workers", cfg.Workers,
		"events_feed", eventsFeedSetting(cfg))
	if cfg.Workers > 0 {
		worker, err := reconcile.NewWorker(reconcile.WorkerConfig{
			Name: workerName(), Store: st, Providers: provs.list(), Plans: plans,
			Logger: logger, Concurrency: cfg.Workers, OnOutcome: metrics.ObserveReconcile, RecheckDelay: cfg.RecheckDelay,
			Poll: poll,
		})
		if err != nil {
			return err
		}
		reconciler = worker
		claimErr = worker.ClaimErr
		metrics.CollectFetchSlots(worker.Slots)
		wg.Add(2)
		go func() { defer wg.Done(); st.Listen(ctx, logger, worker.Wake) }()
		go func() { defer wg.Done(); worker.Run(ctx) }()
		// Every provider is swept: Stripe by its bulk listing, Kinde by
		// queueing every Kinde account within its own pace. The runner
		// stops the sweeps the admin API, the console and the schedule
		// start with the workers, within -shutdown-timeout.
		sweepers, err := provs.sweepers(st, plans, logger, cfg, "", nil)
		if err != nil {
			return err
		}
		runner, err := reconcile.NewSweepRunner(reconcile.SweepRunnerConfig{Sweepers: sweepers, Logger: logger})
		if err != nil {
			return err
		}
		sweeps = runner
		wg.Add(1)
		go func() { defer wg.Done(); runner.Run(ctx) }()
		if sched, _ := parseSweepSchedule(cfg.SweepSchedule); sched != nil { // validated above
			wait := scheduleSweeps(ctx, sched, runner, logger)
			wg.Add(1)
			go func() { defer wg.Done(); <-ctx.Done(); wait() }()
		}
	}
	if sched, _ := parsePruneSchedule(cfg.PruneSchedule); sched != nil { // validated above
		wait := schedulePrunes(ctx, sched, st, reconcile.Retention{OlderThan: cfg.PruneOlderThan.d}, logger)
		wg.Add(1)
		go func() { defer wg.Done(); <-ctx.Done(); wait() }()
	}
	// Long polls of the change feed and the app deliverer wake when a
	// change commits.
	var committed reconcile.Signal
	wakeDeliverer := func() {}
	if deliverer != nil {
		wakeDeliverer = deliverer.Wake
		wg.Add(1)
		go func() { defer wg.Done(); deliverer.Run(ctx) }()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		st.ListenChanges(ctx, logger, func() { committed.Fire(); wakeDeliverer() })
	}()
	srv := server.New(server.Config{
		Logger:    logger,
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
		Metrics: metrics,
		// A hung database gets the provider a 503 (it retries), not a
		// request held open for as long as the database hangs.
		StoreTimeout: cfg.IntakeTimeout,
		Admin: server.Admin{Token: cfg.AdminToken, Store: st, Reconciler: reconciler, Sweeps: sweeps, Changes: st,
			ProviderLimits: map[string]float64{stripe.Provider: cfg.stripeRate(), kinde.Provider: cfg.KindeRateLimit},
			EventsFeeds:    feeds},
		App: server.App{Token: cfg.AppToken, Store: st, Plans: plans, Feed: st, Committed: &committed, FeedPoll: poll,
			Stopping: ctx.Done()},
	})
	// Workers finish the job in hand and release their leases; sweeps
	// apply the pages in hand and stay resumable.
	stopWorkers := func(shutCtx context.Context) error {
		cancel()
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
			return nil
		case <-shutCtx.Done():
			return fmt.Errorf("workers still busy after -shutdown-timeout %s: their leases run out on their own", cfg.ShutdownTimeout)
		}
	}
	return listenAndServe(ctx, cfg.Addr, srv, cfg.ShutdownTimeout, stdout, logger, stopWorkers, lastReport, cfg.AdminToken != "", intakes...)
}

// newStripeFeed builds the Stripe events feed. The webhook endpoint's
// status is read on each poll when webhooks are expected (a webhook
// secret is set) or STRIPE_WEBHOOK_ENDPOINT_ID names the endpoint.
// Its interval follows spending's read allocation (a quarter of it),
// never faster than -events-poll.
func newStripeFeed(cfg config, st *store.Store, client *stripe.Client, spending *reconcile.Spending,
	logger *slog.Logger) (*reconcile.Feed, error) {
	fc := reconcile.FeedConfig{
		Provider: stripe.Provider, Source: client, Store: st, Allocation: spending.Allocation,
		Interval: cfg.EventsPoll, Overlap: cfg.EventsOverlap, Logger: logger,
	}
	if len(cfg.StripeWebhookSecrets) > 0 || cfg.StripeEndpointID != "" {
		fc.Endpoint = stripe.Endpoint{Client: client, ID: cfg.StripeEndpointID}
	}
	return reconcile.NewFeed(fc)
}

// eventsFeedSetting says how the events feed runs, for the start-up log.
func eventsFeedSetting(cfg config) string {
	switch {
	case !cfg.feedOn():
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

// workerName identifies this process's lease holders in reconcile_queue.
func workerName() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s-%d", cmp.Or(host, "billsync"), os.Getpid())
}

// listenAndServe serves h on addr until ctx is done; then, within grace in
// all, it lets in-flight requests finish and runs stop (the background
// work's own shutdown) alongside, and then last, with what is left.
func listenAndServe(ctx context.Context, addr string, h http.Handler, grace time.Duration, stdout io.Writer, logger *slog.Logger,
	stop func(context.Context) error, last func(context.Context), console bool, intakes ...string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	hs := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	var hooks []string
	for _, p := range intakes {
		hooks = append(hooks, "POST /webhooks/"+p)
	}
	// The admin token opens the console; without one it is not served.
	consoleURL := "off (set BILLSYNC_ADMIN_TOKEN)"
	if console {
		consoleURL = "http://" + ln.Addr().String() + "/admin/"
	}
	fmt.Fprintf(stdout, "billsync listening on http://%s (console: %s; webhooks: %s)\n", ln.Addr(), consoleURL, cmp.Or(strings.Join(hooks, ", "), "none"))
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	logger.Info("shutting down", slog.Duration("grace", grace))
	shutCtx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- stop(shutCtx) }()
	var errs []error
	if err := hs.Shutdown(shutCtx); err != nil {
		errs = append(errs, fmt.Errorf("shutdown: %w", err))
	}
	errs = append(errs, <-stopped)
	last(shutCtx)
	return errors.Join(errs...)
}
