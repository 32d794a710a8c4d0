package stripe

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Limits is Stripe's rate-limit model (docs.stripe.com/rate-limits): each
// named API operation, "GET /v1/customers/{id}" apart from "GET
// /v1/customers", has its own limit, counted inside a global one. Live and
// sandbox keys have separate limits, as at Stripe. Rates are token buckets
// holding one second's worth of requests. The zero value limits nothing;
// DocumentedLimits is what Stripe publishes.
//
// A request over a limit answers Stripe's 429 with the header
// Stripe-Rate-Limited-Reason and changes nothing: it takes no token and
// does not count as in flight. Per-object limits (Stripe's
// "resource-specific") are not modelled.
type Limits struct {
	// Global is the requests per second of every operation together on a
	// sandbox (test) key; 0: no global rate limit.
	Global float64
	// LiveGlobal is Global for live-mode keys (sk_live_…, rk_live_…);
	// 0: Global.
	LiveGlobal float64
	// PerOperation is each operation's own limit in requests per second;
	// 0: none.
	PerOperation float64
	// Operations overrides PerOperation for some operations, keyed by the
	// route pattern the fake serves them under ("GET /v1/customers/{id}");
	// 0 there: that operation has no limit of its own.
	Operations map[string]float64
	// Concurrency caps the requests in flight at once (arrived, not yet
	// answered, Latency included); OperationConcurrency does the same for
	// each operation. 0: no cap. Stripe publishes no numbers for its
	// concurrency limiter, so DocumentedLimits sets none.
	Concurrency          int
	OperationConcurrency int
	// PerAccount is each connected account's own limit, in requests per
	// second, on the requests made in it (its Stripe-Account header), with
	// Stripe-Rate-Limited-Reason global-rate: Stripe limits each account.
	// They count against Global and PerOperation too (whether Stripe
	// counts a platform's requests in a connected account against the
	// platform's limits as well is not documented; the fake does, the
	// stricter). 0: none.
	PerAccount float64
	// Accounts overrides PerAccount for some accounts, by id (acct_…);
	// 0 there: that account has no limit of its own.
	Accounts map[string]float64
	// TargetKey, as Faults.TargetKey: when set, only requests made with
	// this key are limited, and a test driver on another key seeds data
	// as fast as it likes. Every key's requests are counted (Usage).
	TargetKey string
}

// The values of Stripe-Rate-Limited-Reason the fake sends.
const (
	ReasonGlobalRate          = "global-rate"
	ReasonGlobalConcurrency   = "global-concurrency"
	ReasonEndpointRate        = "endpoint-rate"
	ReasonEndpointConcurrency = "endpoint-concurrency"
)

// DocumentedLimits are Stripe's published limits: 100 requests/s for live
// keys and 25/s for sandbox keys in all, and 25/s for each operation.
func DocumentedLimits() Limits {
	return Limits{Global: 25, LiveGlobal: 100, PerOperation: 25}
}

// limitsJSON is Limits on the wire of /_mock/limits. Documented fills the
// rates left zero with DocumentedLimits'.
type limitsJSON struct {
	Documented           bool               `json:"documented,omitempty"`
	Global               float64            `json:"global"`
	LiveGlobal           float64            `json:"live_global"`
	PerOperation         float64            `json:"per_operation"`
	Operations           map[string]float64 `json:"operations,omitempty"`
	Concurrency          int                `json:"concurrency"`
	OperationConcurrency int                `json:"operation_concurrency"`
	PerAccount           float64            `json:"per_account,omitempty"`
	Accounts             map[string]float64 `json:"accounts,omitempty"`
	TargetKey            string             `json:"target_key,omitempty"`
}

// MarshalJSON writes the /_mock/limits shape.
func (l Limits) MarshalJSON() ([]byte, error) {
	return json.Marshal(limitsJSON{Global: l.Global, LiveGlobal: l.LiveGlobal, PerOperation: l.PerOperation,
		Operations: l.Operations, Concurrency: l.Concurrency, OperationConcurrency: l.OperationConcurrency,
		PerAccount: l.PerAccount, Accounts: l.Accounts, TargetKey: l.TargetKey})
}

// UnmarshalJSON reads the /_mock/limits shape; absent fields are zero, and
// {"documented":true} gives the rates left zero Stripe's published values.
func (l *Limits) UnmarshalJSON(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var j limitsJSON
	if err := dec.Decode(&j); err != nil {
		return err
	}
	*l = Limits{Global: j.Global, LiveGlobal: j.LiveGlobal, PerOperation: j.PerOperation, Operations: j.Operations,
		Concurrency: j.Concurrency, OperationConcurrency: j.OperationConcurrency, PerAccount: j.PerAccount,
		Accounts: j.Accounts, TargetKey: j.TargetKey}
	if j.Documented {
		d := DocumentedLimits()
		l.Global = cmp.Or(l.Global, d.Global)
		l.LiveGlobal = cmp.Or(l.LiveGlobal, d.LiveGlobal)
		l.PerOperation = cmp.Or(l.PerOperation, d.PerOperation)
	}
	return nil
}

// Validate reports every knob outside its range.
func (l Limits) Validate() error {
	var errs []error
	if l.Global < 0 || l.LiveGlobal < 0 || l.PerOperation < 0 || l.Concurrency < 0 || l.OperationConcurrency < 0 ||
		l.PerAccount < 0 {
		errs = append(errs, errors.New("limits must not be negative"))
	}
	for _, a := range slices.Sorted(maps.Keys(l.Accounts)) {
		if l.Accounts[a] < 0 || !strings.HasPrefix(a, "acct_") {
			errs = append(errs, fmt.Errorf("account %q: want an acct_ id and a limit not negative", a))
		}
	}
	for _, op := range slices.Sorted(maps.Keys(l.Operations)) {
		if l.Operations[op] < 0 {
			errs = append(errs, fmt.Errorf("operation %q: limit must not be negative", op))
		}
	}
	return errors.Join(errs...)
}

// live reports whether key is a live-mode key: its requests draw on the
// live limits, apart from the sandbox's.
func live(key string) bool {
	return strings.HasPrefix(key, "sk_live_") || strings.HasPrefix(key, "rk_live_")
}

// gate is where every authenticated API request arrives: it applies the
// Limits, tracks the requests in flight and counts usage. It has its own
// lock, taken for no I/O.
type gate struct {
	mu       sync.Mutex
	limits   Limits
	buckets  map[string]*rate.Limiter // by mode ("live", "test"), mode + " " + operation, and "account " + id
	inflight map[string]int           // keyed as buckets
	usage    map[usageKey]*Usage      // by API key and account
}

// usageKey is whose requests a Usage counts: a key's, in one account ("":
// the platform).
type usageKey struct{ key, account string }

func newGate() *gate {
	return &gate{buckets: map[string]*rate.Limiter{}, inflight: map[string]int{}, usage: map[usageKey]*Usage{}}
}

// set replaces the limits; the buckets start again full.
func (g *gate) set(l Limits) {
	g.mu.Lock()
	defer g.mu.Unlock()
	l.Operations = maps.Clone(l.Operations)
	l.Accounts = maps.Clone(l.Accounts)
	g.limits = l
	g.buckets = map[string]*rate.Limiter{}
}

func (g *gate) get() Limits {
	g.mu.Lock()
	defer g.mu.Unlock()
	l := g.limits
	l.Operations = maps.Clone(l.Operations)
	l.Accounts = maps.Clone(l.Accounts)
	return l
}

// admit decides, as the request arrives (now by the fake's clock), whether
// the limits let a request for op made with key in account ("" for the
// platform) through, and counts it. Admitted, it is in flight until done
// is called; refused, it returns the reason (a Stripe-Rate-Limited-Reason)
// and has changed nothing.
func (g *gate) admit(key, account, method, op string, now time.Time) (done func(), reason string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	mode := "test"
	if live(key) {
		mode = "live"
	}
	l := g.limits
	limited := l.TargetKey == "" || l.TargetKey == key
	globalRate := l.Global
	if mode == "live" && l.LiveGlobal > 0 {
		globalRate = l.LiveGlobal
	}
	opRate, ok := l.Operations[op]
	if !ok {
		opRate = l.PerOperation
	}
	opKey := mode + " " + op
	global, perOp := g.bucket(mode, globalRate), g.bucket(opKey, opRate)
	var own *rate.Limiter // the connected account's own limit
	if account != "" {
		accountRate, ok := l.Accounts[account]
		if !ok {
			accountRate = l.PerAccount
		}
		own = g.bucket("account "+account, accountRate)
	}
	if limited {
		switch {
		case own != nil && own.TokensAt(now) < 1:
			reason = ReasonGlobalRate
		case global != nil && global.TokensAt(now) < 1:
			reason = ReasonGlobalRate
		case l.Concurrency > 0 && g.inflight[mode] >= l.Concurrency:
			reason = ReasonGlobalConcurrency
		case perOp != nil && perOp.TokensAt(now) < 1:
			reason = ReasonEndpointRate
		case l.OperationConcurrency > 0 && g.inflight[opKey] >= l.OperationConcurrency:
			reason = ReasonEndpointConcurrency
		}
	}
	g.count(usageKey{key, account}, method, op, reason)
	if reason != "" {
		return nil, reason
	}
	if limited {
		for _, b := range []*rate.Limiter{global, perOp, own} {
			if b != nil {
				b.AllowN(now, 1)
			}
		}
	}
	g.inflight[mode]++
	g.inflight[opKey]++
	return func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.inflight[mode]--
		g.inflight[opKey]--
	}, ""
}

// bucket returns the token bucket named name for r requests per second
// (one second's worth of burst), made full on first use; nil for no limit.
func (g *gate) bucket(name string, r float64) *rate.Limiter {
	if r <= 0 {
		return nil
	}
	b, ok := g.buckets[name]
	if !ok {
		b = rate.NewLimiter(rate.Limit(r), max(1, int(math.Ceil(r))))
		g.buckets[name] = b
	}
	return b
}

// rateLimited is Stripe's 429, as its limiters send it; reason "" is a 429
// of another kind (an injected one), which carries no
// Stripe-Rate-Limited-Reason. Neither carries Retry-After unless a test
// asks (Faults.RetryAfter).
func rateLimited(reason string, retryAfter time.Duration) *stripeError {
	return &stripeError{status: http.StatusTooManyRequests, retryAfter: retryAfter, limitedReason: reason,
		Type: typeInvalidRequest, Code: "rate_limit",
		Message: "Request rate limit exceeded. Learn more about rate limits here https://stripe.com/docs/rate-limits."}
}

// SetLimits replaces the rate limits (see Limits); their buckets start
// full. It refuses, changing nothing, limits that Validate refuses and
// operations the fake does not serve (a typo would limit nothing).
func (s *Server) SetLimits(l Limits) error {
	errs := []error{l.Validate()}
	for _, op := range slices.Sorted(maps.Keys(l.Operations)) {
		if !contains(s.patterns, op) {
			errs = append(errs, fmt.Errorf("operation %q: not one the fake serves (want a route pattern such as \"GET /v1/customers/{id}\")", op))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("limits: %w", err)
	}
	s.gate.set(l)
	return nil
}

// Limits returns the current rate limits.
func (s *Server) Limits() Limits { return s.gate.get() }
