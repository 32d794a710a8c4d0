package app

import (
	"cmp"
	"time"

	"github.com/billsync/billsync/providers/stripe"
	"github.com/billsync/billsync/reconcile"
)

// Config is billsync's parsed and validated configuration: cmd builds it
// from flags and the environment (and checks it, every error at once);
// the workshop fills what it needs. A zero setting is off, or the part's
// default, as its flag says.
type Config struct {
	Addr            string        // -addr: where Run listens
	ShutdownTimeout time.Duration // -shutdown-timeout: the bounded stop
	IntakeTimeout   time.Duration // -intake-timeout (0: server.DefaultStoreTimeout)

	StripeAPIKey         string
	StripeAPIURL         string
	StripeWebhookSecrets []string
	// StripeConnectSecrets verify the Connect webhook endpoint's
	// deliveries (STRIPE_CONNECT_WEBHOOK_SECRET); a delivery to either
	// URL verifies against either endpoint's secrets.
	StripeConnectSecrets []string
	// StripeConnect says which connected accounts billsync serves
	// (-stripe-connect, BILLSYNC_STRIPE_CONNECT_ACCOUNTS): docs/connect.md.
	StripeConnect        reconcile.ConnectPolicy
	StripeTolerance      time.Duration
	StripeRateLimit      float64
	StripeOperationRate  float64
	StripeReadAllocation float64
	// StripeConnectReadAllocation is the connected accounts' read
	// allocation (-stripe-connect-read-allocation); 0 derives it.
	StripeConnectReadAllocation float64
	UserRefKey                  string
	// StripeEntitlements and KindeEntitlements make every fetch read the
	// provider's entitlements too (features from Stripe Entitlements or
	// Kinde's billing entitlements); off by default.
	StripeEntitlements bool

	// Kinde is on when KindeDomain and the M2M credentials are all set.
	KindeDomain       string
	KindeClientID     string
	KindeClientSecret string
	KindeReplayWindow time.Duration
	KindeRateLimit    float64
	KindeSweepPace    time.Duration
	KindeEntitlements bool

	// Workers bounds the provider fetches in flight in this process; 0 = intake
	// only.
	Workers int
	// RecheckDelay is the worker's wait before reading a customer again
	// when the first read contradicts its newest event (a stale read).
	RecheckDelay time.Duration
	// WorkerLease is how long the worker's claims hold unless renewed
	// (0: reconcile.DefaultLease). Not a flag: the demo shortens it, so its
	// "restart after a kill" takes a second.
	WorkerLease time.Duration

	// AdminToken opens /admin/api/… to whoever sends it as a Bearer
	// token; empty leaves the admin API absent.
	AdminToken string
	// AppToken opens /api/users/… (the app's reads and usage debits) to
	// whoever sends it as a Bearer token; empty leaves that API absent.
	AppToken string
	// SweepSchedule is when to sweep (a cron spec; "" or off: never).
	SweepSchedule string
	// AutoImport starts, when the workers start, the import of every
	// provider whose customers were never all listed (docs/import.md);
	// serve's -import-at-start, on by default.
	AutoImport bool
	// SweepParallel pins how many parts of the Stripe customer list a
	// sweep lists at once; 0 adapts to the latency.
	SweepParallel int

	// EventsPoll is how often the Stripe events feed lists events; 0 is
	// off. EventsOverlap is how far before its cursor each poll lists.
	EventsPoll    time.Duration
	EventsOverlap time.Duration
	// StripeEndpointID is the Stripe webhook endpoint whose status the feed
	// reads (STRIPE_WEBHOOK_ENDPOINT_ID); empty: found by URL.
	StripeEndpointID string
	// SampleShare is the share of each provider's budget the correctness
	// sample spends (-sample-share; docs/correctness.md); 0 is off. It
	// runs with the workers.
	SampleShare float64
	// PruneSchedule is when to prune (a cron spec; "" or off: never);
	// PruneAge what a scheduled prune keeps (-prune-older-than).
	PruneSchedule string
	PruneAge      time.Duration

	// AppWebhookURLs are the app's endpoints for signed account changes
	// (BILLSYNC_APP_WEBHOOK_URL, comma-separated). Every command that can
	// change an account reads it: each change is queued for each endpoint
	// in the change's own transaction.
	AppWebhookURLs []string
	// AppWebhookSecret signs them (whsec_<base64>; serve only).
	AppWebhookSecret string
	// AppWebhookLease is how long a replica holds a claimed delivery: a
	// replica killed mid-delivery delays that account's changes this long.
	AppWebhookLease time.Duration
	// QuietImports: an import's changes reach the change feed but not the
	// app's webhooks (BILLSYNC_IMPORT_NOTIFY=false); by default they are
	// delivered after every live change.
	QuietImports bool
}

// FeedOn reports whether the Stripe events feed runs.
func (c *Config) FeedOn() bool { return c.EventsPoll > 0 && c.StripeAPIKey != "" }

// StripeRate is -stripe-rate, or the key's default when it is 0.
func (c *Config) StripeRate() float64 {
	return cmp.Or(c.StripeRateLimit, stripe.DefaultRate(c.StripeAPIKey))
}

// KindeOn reports whether Kinde is configured: the domain and both M2M
// credentials (cmd refuses a half configuration).
func (c *Config) KindeOn() bool {
	return c.KindeDomain != "" && c.KindeClientID != "" && c.KindeClientSecret != ""
}

// KindeSweepInterval is how far apart the sweep queues Kinde accounts:
// KindeSweepPace, or by default two request slots, so the sweep uses at
// most half of -kinde-rate.
func (c *Config) KindeSweepInterval() time.Duration {
	if c.KindeSweepPace > 0 {
		return c.KindeSweepPace
	}
	return time.Duration(2 * float64(time.Second) / c.KindeRateLimit)
}
