package stripe

import (
	"context"
	"math"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/billsync/billsync/reconcile"
)

// Stripe's budget, as its rate-limits page documents it: one place, read
// by the client's limiters, the read counter, the allocation and the docs
// (docs/stripe-budget.md).
const (
	// LiveRate and SandboxRate are the global limits, requests per
	// second, of a live and of a sandbox (test mode) account.
	LiveRate    = 100
	SandboxRate = 25
	// OperationRate is each named API operation's own limit, requests per
	// second, inside the global one, unless Stripe's page names another.
	OperationRate = 25
	// ReadsPerTransaction and MinReadAllocation are the monthly read
	// allocation: on average at most 500 reads per transaction over a
	// rolling 30 days, and never less than 10,000 reads a month.
	ReadsPerTransaction = 500
	MinReadAllocation   = 10_000
)

// AllocationWindow is the rolling window Stripe allocates reads over.
const AllocationWindow = 30 * 24 * time.Hour

// DefaultRate is the global limit of the account a key belongs to: a live
// key (sk_live_…, rk_live_…) gets LiveRate, any other SandboxRate, so a
// live deployment has the live budget without a flag and a test key never
// spends more than a sandbox allows.
func DefaultRate(apiKey string) float64 {
	if LiveKey(apiKey) {
		return LiveRate
	}
	return SandboxRate
}

// LiveKey reports whether apiKey is a live-mode key (secret or restricted):
// it reads live-mode objects only.
func LiveKey(apiKey string) bool {
	return strings.HasPrefix(apiKey, "sk_live_") || strings.HasPrefix(apiKey, "rk_live_")
}

// ReadAllocation is the account's monthly read allocation: configured
// when positive (-stripe-read-allocation: an account whose allocation
// Stripe raised), otherwise 500 reads per transaction of the last 30
// days, at least 10,000. The reads on behalf of Connect accounts have an
// allocation of their own (Client.ConnectAllocation).
func ReadAllocation(configured float64, transactions int64) float64 {
	if configured > 0 {
		return configured
	}
	return max(MinReadAllocation, ReadsPerTransaction*float64(transactions))
}

// Operations billsync reads a customer with: the worker alternates between
// them when one's limit is spent (see Client.fetch).
const (
	opRetrieveCustomer  = "GET /v1/customers/{id}"
	opListSubscriptions = "GET /v1/subscriptions"
)

// namespaces are the path segments that group collections rather than
// name one (/v1/entitlements/features, /v2/core/events): the collection
// is the segment after them.
var namespaces = map[string]bool{
	"apps": true, "billing": true, "billing_portal": true, "checkout": true, "climate": true, "core": true,
	"entitlements": true, "financial_connections": true, "forwarding": true, "identity": true, "issuing": true,
	"radar": true, "reporting": true, "sigma": true, "tax": true, "terminal": true, "test_helpers": true,
	"treasury": true,
}

// Operation names a request the way Stripe's per-operation limits key it:
// the method and the path's template, every object id replaced by {id}:
// GET /v1/customers/cus_1 and GET /v1/customers/cus_2 are one operation,
// "GET /v1/customers/{id}"; GET /v1/customers (the list) is another.
// Segments alternate between a collection and an id after the version and
// any namespace (/v1/subscription_items, /v1/customers/{id}/balance_transactions,
// /v1/entitlements/active_entitlements).
func Operation(method, path string) string {
	segs := strings.Split(strings.Trim(path, "/"), "/")
	var b strings.Builder
	b.WriteString(method)
	b.WriteByte(' ')
	collection := true
	for i, s := range segs {
		b.WriteByte('/')
		switch {
		case i == 0 || (collection && namespaces[s]):
			b.WriteString(s) // the version, or a namespace: a collection follows
			continue
		case collection:
			b.WriteString(s)
		default:
			b.WriteString("{id}")
		}
		collection = !collection
	}
	return b.String()
}

// Reasons of Stripe-Rate-Limited-Reason, the header of a 429 from Stripe's
// limiters. A 429 without one is another kind (a lock_timeout on an object
// written concurrently): retried, but it slows nothing.
const (
	reasonGlobalRate          = "global-rate"
	reasonGlobalConcurrency   = "global-concurrency"
	reasonEndpointRate        = "endpoint-rate"
	reasonEndpointConcurrency = "endpoint-concurrency"
	reasonResourceSpecific    = "resource-specific"
	reasonNone                = "none" // a 429 without the header
)

// budget is a client's share of Stripe's limits: a limiter for the
// account's global rate and one per operation, each this replica's share
// (1/n of the rate when n replicas run workers) and slowed after a 429
// that names it. It also counts the reads made, by operation, for the
// allocation.
type budget struct {
	global  *throttle
	rate    float64 // the account's global rate, before sharing
	opRate  float64
	burst   int
	mu      sync.Mutex
	ops     map[string]*throttle
	led     map[string]bool // operations one replica at a time calls (a lease's duty): never shared out
	share   int             // replicas the rates are shared by; at least 1
	reads   map[string]*atomic.Int64
	readsMu sync.Mutex
	// accounts are the connected accounts' own throttles (Stripe Connect):
	// a 429 answered on behalf of one slows that account alone.
	accountsMu sync.Mutex
	accounts   map[string]*throttle
}

// maxAccountThrottles bounds the connected accounts' throttles kept: past
// it, one no 429 has slowed (it is what a new one would be) is dropped.
const maxAccountThrottles = 10_000

// ledOperations are the operations of duties one replica holds at a time
// (the sweep's customer list, the events feed): their holder has the whole
// operation's rate.
var ledOperations = map[string]bool{"GET /v1/customers": true, "GET /v1/events": true}

// knownOperations are the operations billsync calls most, made up front
// so their rates are reported before their first call.
var knownOperations = []string{opRetrieveCustomer, opListSubscriptions, "GET /v1/customers", "GET /v1/events"}

func newBudget(global, perOperation float64, burst int) *budget {
	b := &budget{
		global: newThrottle(global, burst), rate: global, opRate: perOperation, burst: burst, ops: map[string]*throttle{},
		led: ledOperations, share: 1, reads: map[string]*atomic.Int64{}, accounts: map[string]*throttle{},
	}
	for _, op := range knownOperations {
		b.of(op)
	}
	return b
}

// of returns op's throttle, made on first use at op's share.
func (b *budget) of(op string) *throttle {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, ok := b.ops[op]
	if !ok {
		t = newThrottle(b.opShare(op), b.burst)
		b.ops[op] = t
	}
	return t
}

// opShare is op's rate for this replica. Called with mu held.
func (b *budget) opShare(op string) float64 {
	if b.led[op] {
		return b.opRate
	}
	return b.opRate / float64(b.share)
}

// setShare shares the rates among n replicas.
func (b *budget) setShare(n int) {
	n = max(n, 1)
	b.mu.Lock()
	defer b.mu.Unlock()
	if n == b.share {
		return
	}
	b.share = n
	b.global.setBase(b.rate / float64(n))
	for op, t := range b.ops {
		t.setBase(b.opShare(op))
	}
}

// count adds one read of op, made on behalf of the connected account
// ("" for the platform's own): Stripe allocates the platform's reads on
// behalf of its accounts apart from its own, so those are counted under
// op's reconcile.ConnectOperation name.
func (b *budget) count(op, account string) {
	if account != "" {
		op = reconcile.ConnectOperation(op)
	}
	b.readsMu.Lock()
	c, ok := b.reads[op]
	if !ok {
		c = new(atomic.Int64)
		b.reads[op] = c
	}
	b.readsMu.Unlock()
	c.Add(1)
}

// takeReads returns the reads counted since the last call, by operation.
func (b *budget) takeReads() map[string]int64 {
	b.readsMu.Lock()
	defer b.readsMu.Unlock()
	out := map[string]int64{}
	for op, c := range b.reads {
		if n := c.Swap(0); n > 0 {
			out[op] = n
		}
	}
	return out
}

// ofAccount returns the connected account's throttle, made on first use
// at an operation's rate (Stripe limits each account on its own; one
// account's polls and fetches rarely come near it until a 429 slows it);
// nil for the platform's own requests ("").
func (b *budget) ofAccount(account string) *throttle {
	if account == "" {
		return nil
	}
	b.accountsMu.Lock()
	defer b.accountsMu.Unlock()
	t, ok := b.accounts[account]
	if ok {
		return t
	}
	if len(b.accounts) >= maxAccountThrottles {
		b.dropAccountThrottle()
	}
	t = newThrottle(b.opRate, b.burst)
	b.accounts[account] = t
	return t
}

// dropAccountThrottle drops one account's throttle, one no 429 slows
// where there is one. Called with accountsMu held.
func (b *budget) dropAccountThrottle() {
	victim := ""
	for a, t := range b.accounts {
		victim = a
		if t.rate() >= t.base {
			break
		}
	}
	delete(b.accounts, victim)
}

// answered reacts to an attempt's answer: a 429 from Stripe's limiters
// slows what its reason names, any other answer lets the throttles it
// passed recover. A 429 answered on behalf of a connected account
// (account) slows that account's throttle alone, whatever its reason:
// Stripe limits each account on its own, and the platform's throttles
// already keep billsync within the platform's. It returns the 429's
// reason ("" for any other status).
func (b *budget) answered(op, account string, resp *http.Response) string {
	now := time.Now()
	acct := b.ofAccount(account)
	if resp.StatusCode != http.StatusTooManyRequests {
		b.global.recover(now)
		b.of(op).recover(now)
		if acct != nil {
			acct.recover(now)
		}
		return ""
	}
	reason := resp.Header.Get("Stripe-Rate-Limited-Reason")
	switch {
	case reason == "":
		return reasonNone
	case acct != nil:
		acct.slow(now)
		return reason
	}
	switch reason {
	case reasonGlobalRate, reasonGlobalConcurrency:
		b.global.slow(now)
	case reasonEndpointRate, reasonEndpointConcurrency:
		b.of(op).slow(now)
	}
	return reason
}

// snapshot returns the rates in force now (after shares and slowdowns),
// global and by operation, for metrics and `billsync stripe check`.
func (b *budget) snapshot() (global float64, ops map[string]float64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	ops = map[string]float64{}
	for op, t := range b.ops {
		ops[op] = t.rate()
	}
	return b.global.rate(), ops
}

// Slowing after a 429 and recovering: the rate halves on each 429 that
// names it (down to 1/32 of its share) and climbs back by a twentieth of
// its share a second while answers come: additive increase,
// multiplicative decrease, as TCP meets a link it cannot see.
const (
	slowFloor      = 1.0 / 32
	recoverPerSec  = 0.05
	slowCoalescing = 100 * time.Millisecond // 429s of one burst halve the rate once
)

// throttle is a token bucket at a share of a rate (base), slowed by 429s.
type throttle struct {
	mu     sync.Mutex
	lim    *rate.Limiter
	base   float64   // requests per second before any slowdown; ≤ 0 = unlimited
	factor float64   // (0, 1]: the slowdown in force
	slowed time.Time // the last halving: 429s of one burst halve once
	grown  time.Time // the last change, halving or growth: growth is by the time since
}

func newThrottle(perSecond float64, burst int) *throttle {
	t := &throttle{base: perSecond, factor: 1}
	if perSecond > 0 {
		t.lim = rate.NewLimiter(rate.Limit(perSecond), max(burst, 1))
	}
	return t
}

// limiter is the bucket to wait for; nil when unlimited.
func (t *throttle) limiter() *rate.Limiter {
	if t == nil {
		return nil
	}
	return t.lim
}

func (t *throttle) rate() float64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.lim == nil {
		return math.Inf(1)
	}
	return t.base * t.factor
}

func (t *throttle) setBase(perSecond float64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.lim == nil {
		return
	}
	t.base = perSecond
	t.lim.SetLimit(rate.Limit(t.base * t.factor))
}

func (t *throttle) slow(now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.lim == nil || now.Sub(t.slowed) < slowCoalescing {
		return
	}
	t.factor = max(t.factor/2, slowFloor)
	t.slowed, t.grown = now, now
	t.lim.SetLimit(rate.Limit(t.base * t.factor))
}

func (t *throttle) recover(now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.lim == nil || t.factor >= 1 {
		return
	}
	t.factor = min(1, t.factor+recoverPerSec*now.Sub(t.grown).Seconds())
	t.grown = now
	t.lim.SetLimit(rate.Limit(t.base * t.factor))
}

var _ reconcile.Spender = (*Client)(nil)

// TakeReads returns the reads (GETs answered, retries included) made
// since the last call, by operation: Stripe's allocation counts every
// read request. Those made on behalf of a connected account are under
// their operation's reconcile.ConnectOperation name.
func (c *Client) TakeReads() map[string]int64 { return c.budget.takeReads() }

// SetReplicas shares the global rate and each operation's among n
// replicas running workers; the operations of duties one replica holds at
// a time (the sweep's list, the events feed) keep their whole rate.
func (c *Client) SetReplicas(n int) { c.budget.setShare(n) }

// Allocation is the account's read allocation (ReadAllocation) with
// Config.ReadAllocation.
func (c *Client) Allocation(transactions int64) float64 {
	return ReadAllocation(c.readAllocation, transactions)
}

// ConnectAllocation is the allocation of the platform's reads on behalf of
// its connected accounts: Config.ConnectReadAllocation when set, else 500
// a transaction of theirs over the rolling 30 days, at least 10,000
// (Stripe's floor, which its page sets for every account;
// -stripe-read-allocation is the platform's own and does not change it).
func (c *Client) ConnectAllocation(transactions int64) float64 {
	return ReadAllocation(c.connectAllocation, transactions)
}

// Rates returns the rates in force now, requests per second: this
// replica's share of the global rate and of each operation called so far,
// after any slowdown a 429 brought.
func (c *Client) Rates() (global float64, operations map[string]float64) { return c.budget.snapshot() }

// readCustomer reads a customer's snapshot by whichever of the two read
// operations has budget now: the retrieve while its limiter has a token,
// the subscriptions list when the retrieve's are spent and the list has
// more. A quiet queue reads by retrieve alone; a queue deeper than one
// operation carries reads at both operations' rates (2 × 25/s where the
// global rate allows), each within its own limit.
func (c *Client) readCustomer(ctx context.Context, customerID string) (reconcile.Snapshot, error) {
	retrieve, list := c.budget.tokens(opRetrieveCustomer), c.budget.tokens(opListSubscriptions)
	if retrieve < 1 && list > retrieve {
		return c.fetchBySubscriptions(ctx, customerID)
	}
	return c.fetchCustomer(ctx, customerID)
}

// tokens is op's limiter's tokens now (negative when requests wait for
// it); +Inf when it is unlimited.
func (b *budget) tokens(op string) float64 {
	l := b.of(op).limiter()
	if l == nil {
		return math.Inf(1)
	}
	return l.Tokens()
}
