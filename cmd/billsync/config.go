package main

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/billsync/billsync/app"
	"github.com/billsync/billsync/providers/stripe"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/server"
	"github.com/billsync/billsync/store"
)

// defaultDataDir is where the embedded PostgreSQL lives by default.
const defaultDataDir = ".billsync"

// defaultAddr is where serve listens by default (and healthcheck asks).
const defaultAddr = "127.0.0.1:8080"

// config is billsync's configuration, from flags over environment variables.
// Secrets come from NAME or NAME_FILE, never from flags (flags show in ps).
// What the assembly takes is app.Config; the rest is the database's, the
// plans file's, and the reasons a setting was refused (validateServe).
type config struct {
	app.Config

	DatabaseURL string
	// DatabaseDirectURL carries LISTEN (and nothing else) past a
	// transaction pooler: BILLSYNC_DATABASE_DIRECT_URL.
	DatabaseDirectURL string
	// DatabaseSchema is BILLSYNC_DATABASE_SCHEMA: billsync's tables in a
	// schema of their own.
	DatabaseSchema string
	// Pooling is BILLSYNC_DATABASE_POOLER (auto when unset).
	Pooling    store.Pooling
	poolingErr error
	DataDir    string
	DBTimeout  time.Duration
	NoMigrate  bool

	readAllocationErr    error
	connectAllocationErr error // a bad BILLSYNC_STRIPE_CONNECT_READ_ALLOCATION
	// connectMode is -stripe-connect (BILLSYNC_STRIPE_CONNECT), read with
	// BILLSYNC_STRIPE_CONNECT_ACCOUNTS into StripeConnect by validateStripe.
	connectMode, connectAccounts string
	PlansPath                    string
	eventsPollErr                error // a bad BILLSYNC_EVENTS_POLL, reported by validateServe
	sampleShareErr               error // a bad BILLSYNC_SAMPLE_SHARE, reported by validateServe
	importNotifyErr              error // a bad BILLSYNC_IMPORT_NOTIFY or -import-notify, reported by validateServe
	// PruneOlderThan is -prune-older-than (app.Config.PruneAge once valid).
	PruneOlderThan retentionFlag
	// AppWebhookAllowHosts, when set, are the only hosts the endpoints may
	// name (BILLSYNC_APP_WEBHOOK_ALLOW_HOSTS, comma-separated).
	AppWebhookAllowHosts []string

	// ownsCluster is set by serve, which outlives the commands run beside
	// it: it adopts an embedded cluster it finds running (pgembed.Config's
	// Adopt) and stops it on exit when no other billsync process uses it.
	ownsCluster bool
}

// app is the assembly's configuration, the prune age included.
func (c *config) app() app.Config {
	ac := c.Config
	ac.PruneAge = c.PruneOlderThan.d
	return ac
}

// commaList splits a comma-separated setting, dropping blanks.
func commaList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// validateAppWebhooks checks the app's endpoints, their secret and the
// host allowlist; its messages never quote the secret.
func (c *config) validateAppWebhooks() []error {
	var errs []error
	if len(c.AppWebhookURLs) == 0 {
		if c.AppWebhookSecret != "" {
			errs = append(errs, errors.New("BILLSYNC_APP_WEBHOOK_SECRET is set but BILLSYNC_APP_WEBHOOK_URL is not: set the app's endpoint, or unset the secret"))
		}
		return errs
	}
	if c.AppWebhookSecret == "" {
		errs = append(errs, errors.New("BILLSYNC_APP_WEBHOOK_URL is set but BILLSYNC_APP_WEBHOOK_SECRET is not: changes are signed with a whsec_<base64> secret (or set BILLSYNC_APP_WEBHOOK_SECRET_FILE)"))
	} else if err := server.ParseAppSecret(c.AppWebhookSecret); err != nil {
		errs = append(errs, fmt.Errorf("BILLSYNC_APP_WEBHOOK_SECRET: %w", err))
	}
	for _, raw := range c.AppWebhookURLs {
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
			errs = append(errs, fmt.Errorf("BILLSYNC_APP_WEBHOOK_URL: %q is not an http(s) URL with a host (and no user:password)", raw))
			continue
		}
		if len(c.AppWebhookAllowHosts) > 0 && !slices.Contains(c.AppWebhookAllowHosts, u.Hostname()) {
			errs = append(errs, fmt.Errorf("BILLSYNC_APP_WEBHOOK_URL: host %q is not in BILLSYNC_APP_WEBHOOK_ALLOW_HOSTS", u.Hostname()))
		}
	}
	return errs
}

// bindCommon registers the flags every database-using command shares,
// with defaults from the environment.
func (c *config) bindCommon(fs *flag.FlagSet, getenv func(string) string) {
	fs.StringVar(&c.DataDir, "data-dir", cmp.Or(getenv("BILLSYNC_DATA_DIR"), defaultDataDir),
		"embedded PostgreSQL data directory, used when DATABASE_URL is unset (env BILLSYNC_DATA_DIR)")
	fs.DurationVar(&c.DBTimeout, "db-timeout", 10*time.Second,
		"deadline of each database call (a hung database costs a request or a reconcile at most this, and never blocks shutdown)")
	c.DatabaseURL = getenv("DATABASE_URL")
	c.DatabaseDirectURL = getenv("BILLSYNC_DATABASE_DIRECT_URL")
	c.DatabaseSchema = getenv("BILLSYNC_DATABASE_SCHEMA")
	if c.Pooling, c.poolingErr = store.ParsePooling(getenv("BILLSYNC_DATABASE_POOLER")); c.poolingErr != nil {
		c.poolingErr = fmt.Errorf("BILLSYNC_DATABASE_POOLER: %w", c.poolingErr)
	}
	c.AppWebhookURLs = commaList(getenv("BILLSYNC_APP_WEBHOOK_URL"))
	c.AppWebhookAllowHosts = commaList(getenv("BILLSYNC_APP_WEBHOOK_ALLOW_HOSTS"))
}

// bindServe registers serve's flags.
func (c *config) bindServe(fs *flag.FlagSet, getenv func(string) string) {
	c.bindCommon(fs, getenv)
	fs.StringVar(&c.Addr, "addr", cmp.Or(getenv("BILLSYNC_ADDR"), defaultAddr), "HTTP listen address (env BILLSYNC_ADDR)")
	fs.BoolVar(&c.NoMigrate, "no-migrate", false, "refuse to start if migrations are pending instead of applying them")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", 20*time.Second,
		"on SIGTERM, how long in-flight requests and reconciles may take to finish (a database call then in flight is cut off within -db-timeout)")
	fs.DurationVar(&c.IntakeTimeout, "intake-timeout", server.DefaultStoreTimeout,
		"how long a webhook delivery may wait for its verification (a Kinde key set) and its store together, and /readyz for the database, before answering 503 with Retry-After")
	fs.DurationVar(&c.StripeTolerance, "stripe-tolerance", 300*time.Second, "oldest Stripe-Signature timestamp accepted")
	fs.Func("kinde-replay-window", "oldest Kinde webhook token (signed timestamp claim) accepted; keep it above Kinde's 36 h of retries (env KINDE_REPLAY_WINDOW; default 72h)", func(v string) error {
		d, err := time.ParseDuration(v)
		c.KindeReplayWindow = d
		return err
	})
	fs.DurationVar(&c.AppWebhookLease, "app-webhook-lease", 2*time.Minute,
		"how long a replica holds an app delivery it claimed; another replica sends it again after this if the first died (longer than the 10 s attempt deadline)")
	if v := getenv("BILLSYNC_IMPORT_NOTIFY"); v != "" {
		c.importNotifyErr = c.setImportNotify("BILLSYNC_IMPORT_NOTIFY", v)
	}
	fs.BoolFunc("import-notify", "send the app's webhooks an import's changes too, after every live change (env BILLSYNC_IMPORT_NOTIFY; default true); false: an import's changes reach the change feed only", func(v string) error {
		c.importNotifyErr = c.setImportNotify("-import-notify", v)
		return nil
	})
	c.bindReconcile(fs, getenv)
	c.bindSweep(fs)
	fs.IntVar(&c.Workers, "workers", reconcile.DefaultMaxInFlight, "the most provider fetches in flight at once in this process (0: intake only); below it each provider keeps as many as its rate (-stripe-rate, -kinde-rate) can use at its observed latency, so this is a bound, not the throughput knob")
	fs.DurationVar(&c.RecheckDelay, "recheck-delay", time.Second,
		"when a read contradicts the customer's newest event (the provider's API lagging its webhook), wait this long and read once more; negative: never")
	c.EventsPoll = reconcile.DefaultFeedInterval
	if v := getenv("BILLSYNC_EVENTS_POLL"); v != "" {
		c.eventsPollErr = c.setEventsPoll(v)
	}
	fs.Func("events-poll", "how often the Stripe events feed lists Stripe's events (a duration, or off; env BILLSYNC_EVENTS_POLL; default 1m; one replica polls at a time; needs STRIPE_API_KEY); see docs/events-feed.md", func(v string) error {
		c.eventsPollErr = nil
		return c.setEventsPoll(v)
	})
	fs.DurationVar(&c.EventsOverlap, "events-overlap", reconcile.DefaultFeedOverlap,
		"how far before its cursor each events poll lists again: Stripe may list an event a little after its created time")
	c.StripeEndpointID = getenv("STRIPE_WEBHOOK_ENDPOINT_ID")
	c.SampleShare = reconcile.DefaultSampleShare
	if v := getenv("BILLSYNC_SAMPLE_SHARE"); v != "" {
		c.SampleShare, c.sampleShareErr = envFloat(getenv, "BILLSYNC_SAMPLE_SHARE")
	}
	fs.Func("sample-share",
		"the share of each provider's rate and of what Stripe's read allocation leaves that the correctness sample spends reading accounts through the dry run, every minute (env BILLSYNC_SAMPLE_SHARE; default 0.05; 0: off; one replica samples at a time; needs -workers > 0); see docs/correctness.md", func(v string) error {
			var err error
			c.SampleShare, err = strconv.ParseFloat(v, 64)
			c.sampleShareErr = nil
			return err
		})
	fs.StringVar(&c.SweepSchedule, "sweep-schedule", cmp.Or(getenv("BILLSYNC_SWEEP_SCHEDULE"), defaultSweepSchedule),
		"when to sweep: a five-field cron spec in UTC, or off (env BILLSYNC_SWEEP_SCHEDULE; one replica sweeps at a time; needs -workers > 0)")
	fs.BoolVar(&c.AutoImport, "import-at-start", getenv("BILLSYNC_IMPORT_AT_START") == "" || envBool(getenv, "BILLSYNC_IMPORT_AT_START"),
		"at start, import every provider no import or sweep of which ever completed (env BILLSYNC_IMPORT_AT_START; default true; needs -workers > 0); see docs/import.md")
	fs.StringVar(&c.PruneSchedule, "prune-schedule", cmp.Or(getenv("BILLSYNC_PRUNE_SCHEDULE"), "off"),
		"when to prune (see billsync prune): a five-field cron spec in UTC, or off (env BILLSYNC_PRUNE_SCHEDULE; one replica prunes at a time)")
	c.PruneOlderThan.fromEnv(cmp.Or(getenv("BILLSYNC_PRUNE_OLDER_THAN"), defaultRetention))
	fs.Var(&c.PruneOlderThan, "prune-older-than", "what a scheduled prune deletes: handled events and log rows older than this, days (90d) or a duration (env BILLSYNC_PRUNE_OLDER_THAN; at least 72h)")
}

// setEventsPoll reads -events-poll: a positive duration, or off.
func (c *config) setEventsPoll(v string) error {
	if v == "off" {
		c.EventsPoll = 0
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return fmt.Errorf("BILLSYNC_EVENTS_POLL / -events-poll %q: want a positive duration like 1m, or off", v)
	}
	c.EventsPoll = d
	return nil
}

// bindReconcile registers the flags of every command that reconciles
// (serve, sweep, resync, replay): they must read the provider and the plans
// alike. The sweep's own flags are bindSweep's.
func (c *config) bindReconcile(fs *flag.FlagSet, getenv func(string) string) {
	fs.StringVar(&c.StripeAPIURL, "stripe-api-url", getenv("STRIPE_API_URL"), "Stripe API base URL, e.g. a fake Stripe (env STRIPE_API_URL; default api.stripe.com)")
	fs.Float64Var(&c.StripeRateLimit, "stripe-rate", 0, "the Stripe account's global rate, requests per second, shared by every replica running workers (each takes its share; every request counts: fetches, sweep pages, retries, feed polls); 0 (the default) follows the key: 100 live, 25 test; see docs/stripe-budget.md")
	fs.Float64Var(&c.StripeOperationRate, "stripe-operation-rate", stripe.OperationRate, "requests per second of each Stripe API operation (GET /v1/customers/{id}, GET /v1/subscriptions, …), within -stripe-rate and shared like it: Stripe's default is 25")
	fs.Func("stripe-endpoint-rate", "gone: use -stripe-operation-rate", func(string) error {
		return errors.New("gone: Stripe limits each API operation (method and path), not each endpoint family; billsync now follows that by itself (-stripe-operation-rate, default 25)")
	})
	c.StripeReadAllocation, c.readAllocationErr = envFloat(getenv, "BILLSYNC_STRIPE_READ_ALLOCATION")
	c.StripeConnectReadAllocation, c.connectAllocationErr = envFloat(getenv, "BILLSYNC_STRIPE_CONNECT_READ_ALLOCATION")
	fs.Float64Var(&c.StripeConnectReadAllocation, "stripe-connect-read-allocation", c.StripeConnectReadAllocation, "the read allocation of the platform's reads on behalf of its Stripe Connect accounts, reads per 30 days (env BILLSYNC_STRIPE_CONNECT_READ_ALLOCATION); 0 (the default) derives it as Stripe does: 500 per transaction of the connected accounts' customers over the last 30 days, at least 10,000")
	fs.Float64Var(&c.StripeReadAllocation, "stripe-read-allocation", c.StripeReadAllocation, "the Stripe account's read allocation, reads per 30 days (env BILLSYNC_STRIPE_READ_ALLOCATION); 0 (the default) derives it as Stripe does: 500 per transaction of the last 30 days, at least 10,000. The platform's own reads: those on behalf of Connect accounts have their own allocation, derived from theirs")
	fs.StringVar(&c.UserRefKey, "user-ref-key", "user_id", "Stripe customer metadata key holding the app's user reference")
	fs.StringVar(&c.KindeDomain, "kinde-domain", getenv("KINDE_DOMAIN"), "Kinde business domain, e.g. https://yourbusiness.kinde.com (env KINDE_DOMAIN; Kinde is on when it and KINDE_CLIENT_ID/KINDE_CLIENT_SECRET are set)")
	fs.Float64Var(&c.KindeRateLimit, "kinde-rate", 10, "Kinde Management API requests per second of this process (token requests, fetches and retries of every worker count; Kinde publishes no number, it answers 429 with RateLimit-Reset)")
	fs.BoolVar(&c.StripeEntitlements, "stripe-entitlements", envBool(getenv, "BILLSYNC_STRIPE_ENTITLEMENTS"),
		"read each customer's Stripe active entitlements with every fetch (one more request a reconcile), a source of features (env BILLSYNC_STRIPE_ENTITLEMENTS=true; the key needs read access to entitlements)")
	c.connectAccounts = getenv("BILLSYNC_STRIPE_CONNECT_ACCOUNTS")
	fs.StringVar(&c.connectMode, "stripe-connect", cmp.Or(getenv("BILLSYNC_STRIPE_CONNECT"), reconcile.ConnectOff),
		"which Stripe Connect accounts billsync serves: off (their events are stored as ignored), all (every account that authorises the platform), listed (the acct_ ids in BILLSYNC_STRIPE_CONNECT_ACCOUNTS, comma-separated); env BILLSYNC_STRIPE_CONNECT; see docs/connect.md")
	fs.BoolVar(&c.KindeEntitlements, "kinde-entitlements", envBool(getenv, "BILLSYNC_KINDE_ENTITLEMENTS"),
		"read each customer's Kinde billing entitlements with every fetch, a source of features (env BILLSYNC_KINDE_ENTITLEMENTS=true; scope read:billing_entitlements)")
	fs.StringVar(&c.PlansPath, "plans", getenv("BILLSYNC_PLANS"), "plans file (YAML; env BILLSYNC_PLANS; default: the built-in plans.example.yaml)")
}

// bindSweep registers the flags of the commands that sweep (serve, sweep);
// a command that reconciles one customer has no use for them.
func (c *config) bindSweep(fs *flag.FlagSet) {
	fs.IntVar(&c.SweepParallel, "sweep-parallel", 0, "Stripe list requests a sweep keeps in flight (parts of the customer list, by creation time), all within its half of -stripe-rate; 0 (the default) adapts to what that half can use at the list requests' observed latency, a number pins it (1: one page at a time)")
	fs.DurationVar(&c.KindeSweepPace, "kinde-sweep-pace", 0, "how far apart a sweep or import queues Kinde customers (Kinde lists no customer's state, so the workers reconcile each customer found); default 2/-kinde-rate, half of the budget, so webhook work goes first")
}

// envFloat reads a number from an environment variable; 0 when unset.
func envFloat(getenv func(string) string, name string) (float64, error) {
	v := strings.TrimSpace(getenv(name))
	if v == "" {
		return 0, nil
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return 0, fmt.Errorf("%s %q: want a number", name, v)
	}
	return f, nil
}

// setImportNotify sets QuietImports from v, the value of name
// (BILLSYNC_IMPORT_NOTIFY or -import-notify).
func (c *config) setImportNotify(name, v string) error {
	notify, err := strconv.ParseBool(strings.TrimSpace(v))
	if err != nil {
		return fmt.Errorf("%s %q: want true or false", name, v)
	}
	c.QuietImports = !notify
	return nil
}

// envBool reads a boolean environment variable: true, 1 or yes (any
// case) is true; anything else, unset included, false.
func envBool(getenv func(string) string, name string) bool {
	switch strings.ToLower(strings.TrimSpace(getenv(name))) {
	case "true", "1", "yes":
		return true
	}
	return false
}

// loadSecrets reads the secrets from the environment and checks the whole
// configuration, so a mistake stops billsync at start with a clear message.
func (c *config) loadSecrets(getenv func(string) string) error {
	var errs []error
	key, err := secret(getenv, "STRIPE_API_KEY")
	errs = append(errs, err)
	c.StripeAPIKey = key
	errs = append(errs, c.loadKinde(getenv))
	admin, err := secret(getenv, "BILLSYNC_ADMIN_TOKEN")
	errs = append(errs, err)
	c.AdminToken = admin
	app, err := secret(getenv, "BILLSYNC_APP_TOKEN")
	errs = append(errs, err)
	c.AppToken = app
	c.AppWebhookSecret, err = secret(getenv, "BILLSYNC_APP_WEBHOOK_SECRET")
	errs = append(errs, err)
	whsec, err := secret(getenv, "STRIPE_WEBHOOK_SECRET")
	errs = append(errs, err)
	c.StripeWebhookSecrets = commaList(whsec)
	connect, err := secret(getenv, "STRIPE_CONNECT_WEBHOOK_SECRET")
	errs = append(errs, err)
	c.StripeConnectSecrets = commaList(connect)
	return errors.Join(errs...)
}

// loadKinde reads Kinde's M2M credentials (each also as NAME_FILE) and
// KINDE_REPLAY_WINDOW (unless the flag set it).
func (c *config) loadKinde(getenv func(string) string) error {
	var errs []error
	var err error
	c.KindeClientID, err = secret(getenv, "KINDE_CLIENT_ID")
	errs = append(errs, err)
	c.KindeClientSecret, err = secret(getenv, "KINDE_CLIENT_SECRET")
	errs = append(errs, err)
	if w := getenv("KINDE_REPLAY_WINDOW"); w != "" && c.KindeReplayWindow == 0 {
		d, err := time.ParseDuration(w)
		if err != nil {
			errs = append(errs, fmt.Errorf("KINDE_REPLAY_WINDOW %q: want a duration like 72h: %w", w, err))
		}
		c.KindeReplayWindow = d
	}
	return errors.Join(errs...)
}

func (c *config) validateServe() error {
	var errs []error
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		errs = append(errs, fmt.Errorf("BILLSYNC_ADDR %q: want host:port: %w", c.Addr, err))
	}
	kindeErr := c.validateKinde()
	errs = append(errs, kindeErr)
	// Stripe is optional once Kinde is on, but whatever of it is set must
	// be complete. With no provider at all the Stripe messages say what to
	// set, and one more line that Kinde would do too.
	stripeSet := len(c.StripeWebhookSecrets) > 0 || c.StripeAPIKey != ""
	if !c.KindeOn() && kindeErr == nil && !stripeSet {
		errs = append(errs, errors.New("no provider is configured: set Stripe's STRIPE_WEBHOOK_SECRET and STRIPE_API_KEY, or Kinde's KINDE_DOMAIN, KINDE_CLIENT_ID and KINDE_CLIENT_SECRET, or both"))
	}
	if !c.KindeOn() || stripeSet {
		errs = append(errs, c.validateStripe()...)
	}
	if c.sampleShareErr != nil {
		errs = append(errs, c.sampleShareErr)
	} else if !(c.SampleShare >= 0 && c.SampleShare <= 1) {
		errs = append(errs, fmt.Errorf("BILLSYNC_SAMPLE_SHARE / -sample-share %v: want a share of the budget from 0 (off) to 1 (the default is %v)", c.SampleShare, reconcile.DefaultSampleShare))
	}
	if c.AdminToken != "" && len(c.AdminToken) < 16 {
		errs = append(errs, errors.New("BILLSYNC_ADMIN_TOKEN is shorter than 16 characters: it opens the admin API and the support console, use a long random value (openssl rand -hex 32)"))
	}
	if c.AppToken != "" && len(c.AppToken) < 16 {
		errs = append(errs, errors.New("BILLSYNC_APP_TOKEN is shorter than 16 characters: it spends allowances, use a long random value (openssl rand -hex 32)"))
	}
	if c.AppToken != "" && c.AppToken == c.AdminToken {
		errs = append(errs, errors.New("BILLSYNC_APP_TOKEN equals BILLSYNC_ADMIN_TOKEN: the app must not hold the admin token, use two different values"))
	}
	errs = append(errs, c.validateAppWebhooks()...)
	errs = append(errs, c.poolingErr)
	if len(c.AppWebhookURLs) > 0 && c.AppWebhookLease <= server.DefaultAppTimeout {
		errs = append(errs, fmt.Errorf("-app-webhook-lease must be longer than the %s attempt deadline, or a slow attempt could be sent twice at once", server.DefaultAppTimeout))
	}
	if c.Workers < 0 {
		errs = append(errs, errors.New("-workers must be 0 or more"))
	}
	if c.ShutdownTimeout <= 0 || c.DBTimeout <= 0 || c.IntakeTimeout <= 0 {
		errs = append(errs, errors.New("-shutdown-timeout, -db-timeout and -intake-timeout must be positive"))
	}
	if _, err := parseSweepSchedule(c.SweepSchedule); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, c.eventsPollErr, c.importNotifyErr)
	if c.EventsOverlap < 0 {
		errs = append(errs, errors.New("-events-overlap must not be negative"))
	}
	switch sched, err := parsePruneSchedule(c.PruneSchedule); {
	case err != nil:
		errs = append(errs, err)
	case sched == nil: // off: what it would keep does not matter
	case c.PruneOlderThan.envErr != nil:
		errs = append(errs, fmt.Errorf("BILLSYNC_PRUNE_OLDER_THAN %w", c.PruneOlderThan.envErr))
	default:
		if err := (reconcile.Retention{OlderThan: c.PruneOlderThan.d}).Validate(); err != nil {
			errs = append(errs, fmt.Errorf("-prune-older-than: %w", err))
		}
	}
	return errors.Join(errs...)
}

// validateStripe checks the Stripe side of serve's configuration.
func (c *config) validateStripe() []error {
	var errs []error
	// Without a webhook secret, Stripe runs on the events feed alone
	// (webhook-free mode): that needs the API key and the feed on.
	if len(c.StripeWebhookSecrets) == 0 && !c.FeedOn() {
		errs = append(errs, errors.New("STRIPE_WEBHOOK_SECRET is not set: billsync cannot verify Stripe webhooks without it (comma-separate several to rotate; or set STRIPE_WEBHOOK_SECRET_FILE); or run on the events feed alone: STRIPE_API_KEY set and -events-poll not off"))
	}
	for name, secrets := range map[string][]string{"STRIPE_WEBHOOK_SECRET": c.StripeWebhookSecrets, "STRIPE_CONNECT_WEBHOOK_SECRET": c.StripeConnectSecrets} {
		if slices.ContainsFunc(secrets, func(s string) bool { return !strings.HasPrefix(s, "whsec_") }) {
			errs = append(errs, fmt.Errorf("%s: each secret should start with whsec_ (copy it from the endpoint's page in the Stripe dashboard)", name))
		}
	}
	var err error
	if c.StripeConnect, err = reconcile.ParseConnectPolicy(c.connectMode, c.connectAccounts); err != nil {
		errs = append(errs, fmt.Errorf("-stripe-connect: %w", err))
	}
	if len(c.StripeConnectSecrets) > 0 && !c.StripeConnect.Enabled() {
		errs = append(errs, errors.New("STRIPE_CONNECT_WEBHOOK_SECRET is set but -stripe-connect is off: set -stripe-connect all or listed (BILLSYNC_STRIPE_CONNECT) to serve connected accounts"))
	}
	if c.StripeAPIURL != "" {
		if u, err := url.Parse(c.StripeAPIURL); err != nil || u.Scheme == "" || u.Host == "" {
			errs = append(errs, fmt.Errorf("STRIPE_API_URL %q: want an absolute URL like http://127.0.0.1:12112", c.StripeAPIURL))
		}
	}
	if c.Workers > 0 && c.StripeAPIKey == "" {
		errs = append(errs, errors.New("STRIPE_API_KEY is not set: the reconcile worker reads customers from the Stripe API (or set STRIPE_API_KEY_FILE, or -workers 0 for intake only)"))
	}
	if c.StripeRateLimit < 0 {
		errs = append(errs, errors.New("-stripe-rate must not be negative (0: follow the key, 100 live, 25 test)"))
	}
	if c.StripeOperationRate <= 0 {
		errs = append(errs, errors.New("-stripe-operation-rate must be positive (Stripe's default is 25)"))
	}
	if c.readAllocationErr != nil {
		errs = append(errs, c.readAllocationErr)
	} else if c.StripeReadAllocation < 0 {
		errs = append(errs, errors.New("-stripe-read-allocation must not be negative (0: derive it from transactions)"))
	}
	if c.connectAllocationErr != nil {
		errs = append(errs, c.connectAllocationErr)
	} else if c.StripeConnectReadAllocation < 0 {
		errs = append(errs, errors.New("-stripe-connect-read-allocation must not be negative (0: derive it from the connected accounts' transactions)"))
	}
	if c.SweepParallel < 0 {
		errs = append(errs, errors.New("-sweep-parallel must not be negative (0: the default)"))
	}
	if c.StripeTolerance <= 0 {
		errs = append(errs, errors.New("-stripe-tolerance must be positive"))
	}
	return errs
}

// validateKinde checks the Kinde side: all of KINDE_DOMAIN,
// KINDE_CLIENT_ID and KINDE_CLIENT_SECRET, or none. A half configuration
// is an error, never a quietly disabled provider whose webhooks get 404.
func (c *config) validateKinde() error {
	set := map[string]bool{"KINDE_DOMAIN": c.KindeDomain != "", "KINDE_CLIENT_ID": c.KindeClientID != "", "KINDE_CLIENT_SECRET": c.KindeClientSecret != ""}
	var missing []string
	for _, name := range []string{"KINDE_DOMAIN", "KINDE_CLIENT_ID", "KINDE_CLIENT_SECRET"} {
		if !set[name] {
			missing = append(missing, name)
		}
	}
	if len(missing) == 3 {
		return nil
	}
	var errs []error
	if len(missing) > 0 {
		errs = append(errs, fmt.Errorf("half a Kinde configuration: %s not set (Kinde needs KINDE_DOMAIN and an M2M application's KINDE_CLIENT_ID and KINDE_CLIENT_SECRET, or *_FILE; unset all three to run without Kinde)", strings.Join(missing, ", ")))
	}
	if c.KindeDomain != "" {
		if u, err := url.Parse(c.KindeDomain); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || strings.Trim(u.Path, "/") != "" {
			errs = append(errs, fmt.Errorf("KINDE_DOMAIN %q: want the business domain's URL like https://yourbusiness.kinde.com", c.KindeDomain))
		}
	}
	if c.KindeRateLimit <= 0 {
		errs = append(errs, errors.New("-kinde-rate must be positive"))
	}
	if c.KindeReplayWindow < 0 || c.KindeSweepPace < 0 {
		errs = append(errs, errors.New("KINDE_REPLAY_WINDOW and -kinde-sweep-pace must not be negative"))
	}
	return errors.Join(errs...)
}

// secret returns the value of name, or the trimmed contents of the file
// named by name_FILE. Setting both is an error: one would silently win.
func secret(getenv func(string) string, name string) (string, error) {
	v, file := getenv(name), getenv(name+"_FILE")
	switch {
	case v != "" && file != "":
		return "", fmt.Errorf("%s and %s_FILE are both set: use one", name, name)
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("%s_FILE: %w", name, err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	return v, nil
}

// requireStripeKey reads STRIPE_API_KEY (or _FILE) into c for a command
// that cannot work without it; why, when set, says what it needs it for.
func (c *config) requireStripeKey(getenv func(string) string, why string) error {
	key, err := secret(getenv, "STRIPE_API_KEY")
	if err == nil && key == "" {
		err = fmt.Errorf("STRIPE_API_KEY is not set%s (or set STRIPE_API_KEY_FILE)", why)
	}
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	c.StripeAPIKey = key
	return nil
}
