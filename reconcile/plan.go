package reconcile

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// ExamplePlans is the commented example plans file (plans.example.yaml):
// billsync's plans when BILLSYNC_PLANS is unset, and the tests' fixture.
//
//go:embed plans.example.yaml
var ExamplePlans []byte

// Plan is one plan an app sells and the allowance it grants each period.
type Plan struct {
	Name      string `yaml:"name"`
	Allowance int64  `yaml:"allowance"`
	// StripePrices are Stripe price lookup keys or price ids (or legacy
	// plan ids) that mean this plan for the platform's own customers.
	StripePrices []string `yaml:"stripe_prices"`
	// StripeAccounts map more Stripe prices to this plan, for connected
	// accounts (Stripe Connect), the platform, or all of them.
	StripeAccounts []AccountRule `yaml:"stripe_accounts"`
	// KindePlans are Kinde plan codes that mean this plan.
	KindePlans []string `yaml:"kinde_plans"`
	// Rank orders plans when a customer's subscriptions map to several:
	// the higher rank wins, and a ranked plan beats an unranked one.
	// Unranked plans compare by what they grant (see better).
	Rank *int `yaml:"rank"`
	// TrialAllowance replaces Allowance for a trialing subscription's
	// period; nil means the full allowance. The trial and the first paid
	// period are different periods, so each is granted once.
	TrialAllowance *int64 `yaml:"trial_allowance"`
	// SeatAllowance is added per unit of the deciding item's quantity
	// (seats), on top of Allowance (or TrialAllowance).
	SeatAllowance int64 `yaml:"seat_allowance"`
	// Features are what the plan grants of the features the plans file
	// declares: true/false for a boolean, a number for a limit or a
	// meter's monthly allowance. Absent: not granted by this plan.
	Features map[string]FeatureValue `yaml:"features"`
}

// grantFor returns what one period of the plan grants for quantity units
// (fewer than one is read as one), in a trial or not. It saturates instead
// of overflowing: an absurd quantity must not wrap to a negative grant.
func (pl Plan) grantFor(quantity int64, trial bool) int64 {
	base := pl.Allowance
	if trial && pl.TrialAllowance != nil {
		base = *pl.TrialAllowance
	}
	quantity = max(quantity, 1)
	if pl.SeatAllowance > 0 && quantity > (math.MaxInt64-base)/pl.SeatAllowance {
		return math.MaxInt64
	}
	return base + pl.SeatAllowance*quantity
}

// Plans maps provider prices to plans. The zero value is not usable: build
// it with ParsePlans.
type Plans struct {
	list []Plan
	def  string
	// kinde maps a Kinde plan code to a plan name; stripe maps a Stripe
	// account scope (see scopeOf) to its rules.
	kinde  map[string]string
	stripe map[string]*scopeRules
	policy policy
	// features are the declared features by key (none without a
	// features: block: then accounts have no features, as before).
	features map[string]FeatureDef
}

// Policy is the plans file's optional policy block: which subscriptions
// keep their plan and when a period's grant waits. Absent keys take the
// defaults documented in plans.example.yaml.
type Policy struct {
	// KeepPlan lists the statuses whose subscription keeps its plan;
	// default active, trialing, past_due. Every other status falls to the
	// default plan.
	KeepPlan []string `yaml:"keep_plan"`
	// GrantWaitsForPayment: a subscription that keeps its plan but is not
	// paid up (any status but active and trialing, or collection paused)
	// gets no new grant and its account keeps the period last granted,
	// until it is paid up again. Default true.
	GrantWaitsForPayment *bool `yaml:"grant_waits_for_payment"`
	// PausedCollectionKeepsPlan: a subscription whose collection is paused
	// keeps its plan (false: the default plan). Default true.
	PausedCollectionKeepsPlan *bool `yaml:"paused_collection_keeps_plan"`
}

// policy is Policy with its defaults applied.
type policy struct {
	keep        map[string]bool
	grantWaits  bool
	pausedKeeps bool
}

// DefaultKeepPlan are the statuses that keep their plan unless the plans
// file says otherwise: past_due keeps it while the provider retries the
// payment.
var DefaultKeepPlan = []string{"active", "trialing", "past_due"}

// Statuses are the subscription statuses billsync knows (Stripe's; Kinde's
// are mapped onto them): the only words keep_plan accepts.
var Statuses = []string{"active", "trialing", "past_due", "unpaid", "paused", "incomplete", "incomplete_expired", "canceled"}

func (p Policy) resolve() (policy, []error) {
	var errs []error
	keep := p.KeepPlan
	switch {
	case keep == nil:
		keep = DefaultKeepPlan
	case len(keep) == 0:
		errs = append(errs, errors.New("policy.keep_plan is empty: every customer would be on the default plan (omit it for the default)"))
	}
	out := policy{keep: map[string]bool{}, grantWaits: true, pausedKeeps: true}
	for _, st := range keep {
		if !slices.Contains(Statuses, st) {
			errs = append(errs, fmt.Errorf("policy.keep_plan: unknown status %q (known: %s)", st, strings.Join(Statuses, ", ")))
		}
		out.keep[st] = true
	}
	if p.GrantWaitsForPayment != nil {
		out.grantWaits = *p.GrantWaitsForPayment
	}
	if p.PausedCollectionKeepsPlan != nil {
		out.pausedKeeps = *p.PausedCollectionKeepsPlan
	}
	return out, errs
}

type plansFile struct {
	Default string `yaml:"default"`
	Policy  Policy `yaml:"policy"`
	// Features declares the features plans and providers may grant.
	Features []FeatureDef `yaml:"features"`
	Plans    []Plan       `yaml:"plans"`
}

// ParsePlans reads a plans file (YAML). Unknown keys, duplicate names or
// prices, negative allowances and a missing default are errors: a typo here
// would silently grant the wrong allowance.
func ParsePlans(data []byte) (*Plans, error) {
	var f plansFile
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("plans: %w", err)
	}
	p := &Plans{list: f.Plans, def: f.Default, kinde: map[string]string{}, stripe: map[string]*scopeRules{}}
	var errs []error
	p.policy, errs = f.Policy.resolve()
	names := map[string]bool{}
	for i, pl := range f.Plans {
		switch {
		case strings.TrimSpace(pl.Name) == "":
			errs = append(errs, fmt.Errorf("plans[%d]: name is empty", i))
		case names[pl.Name]:
			errs = append(errs, fmt.Errorf("plans[%d]: plan %q defined twice", i, pl.Name))
		}
		names[pl.Name] = true
		if pl.Allowance < 0 {
			errs = append(errs, fmt.Errorf("plan %q: allowance %d is negative", pl.Name, pl.Allowance))
		}
		if pl.TrialAllowance != nil && *pl.TrialAllowance < 0 {
			errs = append(errs, fmt.Errorf("plan %q: trial_allowance %d is negative", pl.Name, *pl.TrialAllowance))
		}
		if pl.SeatAllowance < 0 {
			errs = append(errs, fmt.Errorf("plan %q: seat_allowance %d is negative", pl.Name, pl.SeatAllowance))
		}
		for _, ref := range pl.KindePlans {
			if other, dup := p.kinde[ref]; dup {
				errs = append(errs, fmt.Errorf("plan %q: %s price %q already maps to plan %q", pl.Name, ProviderKinde, ref, other))
			}
			p.kinde[ref] = pl.Name
		}
		errs = append(errs, p.addStripe(pl)...)
	}
	var ferrs []error
	p.features, ferrs = parseFeatures(f.Features, f.Plans)
	errs = append(errs, ferrs...)
	switch {
	case len(f.Plans) == 0:
		errs = append(errs, errors.New("plans: no plans defined"))
	case f.Default == "":
		errs = append(errs, errors.New("plans: no default plan (the plan of customers with no subscription that keeps its plan)"))
	case !names[f.Default]:
		errs = append(errs, fmt.Errorf("plans: default plan %q is not defined", f.Default))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return p, nil
}

// Keeps reports whether sub keeps its plan under the plans file's policy:
// its status is one of keep_plan, and its collection is not paused unless
// paused_collection_keeps_plan allows it.
func (p *Plans) Keeps(sub Subscription) bool {
	return p.policy.keep[sub.Status] && (!sub.CollectionPaused || p.policy.pausedKeeps)
}

// waitsForPayment reports whether sub, which keeps its plan, may be granted
// nothing new: with grant_waits_for_payment, a subscription is paid up only
// when active or trialing with collection not paused (past_due means the
// renewal invoice failed although the period moved on).
func (p *Plans) waitsForPayment(sub Subscription) bool {
	paidUp := (sub.Status == "active" || sub.Status == "trialing") && !sub.CollectionPaused
	return p.policy.grantWaits && !paidUp
}

// Default returns the plan of customers with no subscription that keeps
// its plan.
func (p *Plans) Default() Plan {
	pl, _ := p.Named(p.def)
	return pl
}

// List returns every plan, in the plans file's order (a copy: changing it
// changes nothing here).
func (p *Plans) List() []Plan {
	list := make([]Plan, len(p.list))
	for i, pl := range p.list {
		pl.StripePrices, pl.KindePlans = slices.Clone(pl.StripePrices), slices.Clone(pl.KindePlans)
		pl.StripeAccounts = slices.Clone(pl.StripeAccounts)
		for j, r := range pl.StripeAccounts {
			pl.StripeAccounts[j] = AccountRule{Accounts: slices.Clone(r.Accounts), Prices: slices.Clone(r.Prices),
				Products: slices.Clone(r.Products)}
		}
		pl.Features = maps.Clone(pl.Features)
		list[i] = pl
	}
	return list
}

// Named returns the plan called name.
func (p *Plans) Named(name string) (Plan, bool) {
	for _, pl := range p.list {
		if pl.Name == name {
			return pl, true
		}
	}
	return Plan{}, false
}

// ForPrice returns the plan the first mapped ref means for provider, to
// a customer of account (a connected account's acct_ id, "" for the
// platform's own: see SplitConnected). It is ForItem for a price known by
// its refs alone (no product read).
func (p *Plans) ForPrice(provider, account string, refs []string) (Plan, bool) {
	return p.ForItem(provider, account, Item{PriceRefs: refs})
}
