package reconcile

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"sync"
	"time"
)

// The correctness sample (docs/correctness.md): the webhooks, the events
// feed and the sweep heal drift, and the sample measures how right
// billsync is between sweeps. Every SampleInterval one replica (a lease)
// reads a few accounts from the provider through the dry run, the same
// fetch, decision and transaction as a reconcile rolled back, and records
// each as equal or drifted; a drifted account is queued for the worker at
// once (TriggerSample), which heals it.

// Sample classes: the first difference of a drifted account, in this
// order (SampleClassOf).
const (
	SampleClassPlan     = "plan"
	SampleClassStatus   = "status"
	SampleClassPeriod   = "period"
	SampleClassBalance  = "balance"  // only the ledger would move: a grant or a meter's
	SampleClassFeatures = "features" // features or the entitlements they come from
	// SampleClassOther is a change in the fields no class above names
	// (email, app user reference, subscription id, cancel at period end),
	// or an account never reconciled.
	SampleClassOther = "other"
	// SampleClassMissing is an account the provider says it does not know
	// (ErrCustomerUnknown). A reconcile would end ignored, so it is not
	// queued: it is drift no reconcile heals.
	SampleClassMissing = "missing"
)

// SampleClasses are the classes in the order an account's first
// difference is picked.
var SampleClasses = []string{SampleClassPlan, SampleClassStatus, SampleClassPeriod, SampleClassBalance,
	SampleClassFeatures, SampleClassOther, SampleClassMissing}

// SampleClassOf classifies a dry run's outcome: drifted when applying it
// would change the account (ResultApplied), with the class of its first
// difference, or when the provider does not know the customer (unknown:
// SampleClassMissing). Unchanged, stale and ignored outcomes are equal (a
// reconcile would write nothing): class "".
func SampleClassOf(out Outcome, unknown bool) (drifted bool, class string) {
	if unknown {
		return true, SampleClassMissing
	}
	if out.Result != ResultApplied {
		return false, ""
	}
	b, a := out.Before, out.After
	switch {
	case b.Plan != a.Plan:
		return true, SampleClassPlan
	case b.Status != a.Status:
		return true, SampleClassStatus
	case !b.PeriodStart.Equal(a.PeriodStart) || !b.PeriodEnd.Equal(a.PeriodEnd):
		return true, SampleClassPeriod
	case out.Granted > 0:
		return true, SampleClassBalance
	case !sameFeatures(b.Features, a.Features) || !sameEntitlements(b.Entitlements, a.Entitlements):
		return true, SampleClassFeatures
	case !b.ObservedAt.IsZero() && sameState(b, a):
		// Applied with the state unchanged: only the ledger moved (a
		// meter's grant, or one a crash lost).
		return true, SampleClassBalance
	}
	return true, SampleClassOther
}

// SampleBudget is a provider's budget as the sample sizes itself by.
type SampleBudget struct {
	// Rate is the requests per second this replica may send the provider
	// (Provider.Budget); 0 unknown.
	Rate float64
	// Allocation is the reads the provider allows over ReadWindow (Stripe's
	// read allocation), and Projected the reads of that window at the pace
	// recorded (SpendView); Allocation 0: the provider has none.
	Allocation, Projected float64
	// ReadsPerAccount is what one account's read costs (a reconcile's
	// fetch: 1, 2 with entitlements read); default 1.
	ReadsPerAccount float64
}

// DefaultSampleShare is serve's default share of the provider's budget
// the sample spends (-sample-share).
const DefaultSampleShare = 0.05

// SampleInterval is how often the sample runs.
const SampleInterval = time.Minute

// SampleSize returns how many accounts a minute the sample reads with
// share of b: share × the rate's requests a minute, and share × the reads
// the allocation leaves a minute ((Allocation − Projected) ÷ the minutes
// of ReadWindow), whichever is fewer, in accounts (÷ ReadsPerAccount). It
// may be below 1 (Sampler rounds by carrying the rest to the next minute)
// and is 0 when share is 0 or the allocation is spent. Neither a rate nor
// an allocation known: 1.
func SampleSize(share float64, b SampleBudget) float64 {
	if !(share > 0) {
		return 0
	}
	reads := cmp.Or(b.ReadsPerAccount, 1)
	size := math.Inf(1)
	if b.Rate > 0 {
		size = share * b.Rate * SampleInterval.Seconds() / reads
	}
	if b.Allocation > 0 {
		left := max(0, b.Allocation-b.Projected) * float64(SampleInterval) / float64(ReadWindow)
		size = min(size, share*left/reads)
	}
	if math.IsInf(size, 1) {
		return 1
	}
	return size
}

// sampleCredit turns a fractional size a minute into whole accounts a
// round: what a round cannot take (a size of 0.25 a minute) is carried,
// so a sample of 0.25 a minute reads one account every fourth minute and
// the share holds however small the budget.
type sampleCredit struct{ carried float64 }

// take adds a round's size and returns the whole accounts it pays for.
func (c *sampleCredit) take(size float64) int {
	if !(size > 0) {
		return 0
	}
	c.carried += size
	n := math.Floor(c.carried)
	c.carried -= n
	return int(n)
}

// SampleAccount is an account picked for the sample.
type SampleAccount struct {
	ID         int64
	CustomerID string
}

// Sample is one account compared with its provider.
type Sample struct {
	Provider   string
	CustomerID string
	AccountID  int64
	Drifted    bool
	Class      string // "" when equal
}

// DriftedSample is a drifted sample as the console lists it.
type DriftedSample struct {
	Sample
	SampledAt time.Time
}

// SampleStore is what the sample needs from the database.
type SampleStore interface {
	// SampleLock takes the lease that lets one sampler of provider run at
	// a time across replicas (see SweepStore.SweepLock); ErrLeaseHeld
	// when another holds it.
	SampleLock(ctx context.Context, provider string) (held context.Context, release func(), err error)
	// PickSample picks n of provider's accounts, recent of them among
	// those changed lately (the more recently the likelier), the rest
	// uniformly at random; every account when provider has n or fewer.
	PickSample(ctx context.Context, provider string, n, recent int) ([]SampleAccount, error)
	// RecordSamples stores samples and queues each drifted account a
	// reconcile can heal (every class but SampleClassMissing) with
	// TriggerSample, in one transaction.
	RecordSamples(ctx context.Context, samples []Sample) error
}

// SamplerConfig configures a Sampler.
type SamplerConfig struct {
	Provider string
	// Worker previews each account: its fetch slots, its decision, the
	// store's Preview (its Store must be an OnDemandStore).
	Worker *Worker
	Store  SampleStore
	// Share is the share of the provider's budget the sample spends
	// (SampleSize), 0 < Share <= 1.
	Share float64
	// Budget is the provider's budget now, asked every round (so the
	// size follows the replicas' shares, 429s and the allocation).
	Budget   func() SampleBudget
	Interval time.Duration // between rounds; default SampleInterval
	// OnSample, when set, sees every account compared (metrics).
	OnSample func(Sample)
	Logger   *slog.Logger
}

// Sampler runs the correctness sample of one provider. Run it on every
// replica: its lease lets one sample at a time.
type Sampler struct {
	cfg SamplerConfig
	st  OnDemandStore
	log *slog.Logger

	mu     sync.Mutex
	credit sampleCredit
}

// NewSampler checks cfg and returns a Sampler.
func NewSampler(cfg SamplerConfig) (*Sampler, error) {
	var errs []error
	if cfg.Provider == "" || cfg.Worker == nil || cfg.Store == nil || cfg.Budget == nil {
		errs = append(errs, errors.New("provider, worker, store and budget are required"))
	}
	if !(cfg.Share > 0 && cfg.Share <= 1) {
		errs = append(errs, fmt.Errorf("share %v is not a share of the budget (0 < share <= 1)", cfg.Share))
	}
	if cfg.Interval < 0 {
		errs = append(errs, errors.New("negative interval"))
	}
	var st OnDemandStore
	if cfg.Worker != nil {
		var ok bool
		if st, ok = cfg.Worker.cfg.Store.(OnDemandStore); !ok {
			errs = append(errs, errors.New("the worker's store cannot preview"))
		}
		if _, ok := cfg.Worker.providers[cfg.Provider]; !ok && cfg.Provider != "" {
			errs = append(errs, fmt.Errorf("provider %q is not the worker's", cfg.Provider))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("sampler: %w", err)
	}
	cfg.Interval = cmp.Or(cfg.Interval, SampleInterval)
	log := cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	// A new leader samples at once: one account's credit.
	return &Sampler{cfg: cfg, st: st, log: log.With(slog.String("provider", cfg.Provider)), credit: sampleCredit{carried: 1}}, nil
}

// sampleTakeover bounds how long a replica that does not sample waits
// before it tries to take the lease again.
const sampleTakeover = 15 * time.Second

// Run samples whenever this replica holds the sample's lease, until ctx
// ends: a round at once, then one every Interval, holding the lease
// between rounds. The others try to take it every sampleTakeover (or
// Interval, when shorter). A failed round is logged; the next is a new
// sample.
func (s *Sampler) Run(ctx context.Context) {
	leadership{lock: func(ctx context.Context) (context.Context, func(), error) {
		return s.cfg.Store.SampleLock(ctx, s.cfg.Provider)
	}, retry: min(s.cfg.Interval, sampleTakeover), log: s.log, what: "sample"}.run(ctx, s.lead)
}

// lead runs a round at once and then every Interval until ctx ends or the
// lease is lost.
func (s *Sampler) lead(ctx, held context.Context) {
	ctx, cancel := whileHeld(ctx, held)
	defer cancel()
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for ctx.Err() == nil {
		if r, err := s.Round(ctx); err != nil && ctx.Err() == nil {
			s.log.WarnContext(ctx, "sample round failed", slog.Any("error", err))
		} else if r.Compared > 0 {
			s.log.DebugContext(ctx, "sampled", slog.Int("compared", r.Compared), slog.Int("drifted", r.Drifted),
				slog.Float64("size", r.Size))
		}
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	}
	if held.Err() != nil {
		s.log.WarnContext(ctx, "sample: lease lost; another replica samples now", slog.Any("error", context.Cause(held)))
	}
}

// SampleRound is what one round did.
type SampleRound struct {
	Size     float64 // accounts a minute the budget gave (SampleSize)
	Picked   int     // accounts picked (the size, with the carried rest)
	Compared int     // accounts read and compared
	Drifted  int
	Failed   int // accounts not compared: the read or the dry run failed
}

// Round runs one round: it sizes the sample by the budget, picks that many
// accounts (half among those changed lately, half uniformly), previews
// each, records the samples and queues the drifted ones. The caller holds
// the lease (Run does).
func (s *Sampler) Round(ctx context.Context) (SampleRound, error) {
	var r SampleRound
	r.Size = SampleSize(s.cfg.Share, s.cfg.Budget()) * float64(s.cfg.Interval) / float64(SampleInterval)
	s.mu.Lock()
	n := s.credit.take(r.Size)
	s.mu.Unlock()
	if n == 0 {
		return r, nil
	}
	recent := n / 2
	if n%2 == 1 && rand.IntN(2) == 0 {
		recent++
	}
	accounts, err := s.cfg.Store.PickSample(ctx, s.cfg.Provider, n, recent)
	if err != nil {
		return r, fmt.Errorf("pick the sample: %w", err)
	}
	r.Picked = len(accounts)
	samples := make([]Sample, 0, len(accounts))
	for _, a := range accounts {
		job := Job{Provider: s.cfg.Provider, CustomerID: a.CustomerID, Trigger: TriggerSample, Actor: "sample"}
		out, unknown, err := s.cfg.Worker.dryRun(ctx, s.st, job)
		if err != nil {
			if ctx.Err() != nil {
				return r, ctx.Err()
			}
			r.Failed++
			s.log.InfoContext(ctx, "sample: account not compared", slog.String("customer", a.CustomerID), slog.Any("error", err))
			continue
		}
		sm := Sample{Provider: s.cfg.Provider, CustomerID: a.CustomerID, AccountID: a.ID}
		sm.Drifted, sm.Class = SampleClassOf(out, unknown)
		if sm.Drifted {
			r.Drifted++
			s.log.InfoContext(ctx, "sample: account drifted", slog.String("customer", a.CustomerID),
				slog.Int64("account", a.ID), slog.String("class", sm.Class), slog.String("outcome", out.Text))
		}
		samples = append(samples, sm)
	}
	if len(samples) == 0 {
		return r, nil
	}
	if err := s.cfg.Store.RecordSamples(ctx, samples); err != nil {
		return r, fmt.Errorf("record the sample: %w", err)
	}
	r.Compared = len(samples)
	if s.cfg.OnSample != nil {
		for _, sm := range samples {
			s.cfg.OnSample(sm)
		}
	}
	return r, nil
}
