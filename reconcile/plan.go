package reconcile

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
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
	// plan ids) that mean this plan.
	StripePrices []string `yaml:"stripe_prices"`
	// KindePlans are Kinde plan codes that mean this plan.
	KindePlans []string `yaml:"kinde_plans"`
}

// Plans maps provider prices to plans. The zero value is not usable: build
// it with ParsePlans.
type Plans struct {
	list    []Plan
	def     string
	byPrice map[string]map[string]string // provider → price ref → plan name
}

type plansFile struct {
	Default string `yaml:"default"`
	Plans   []Plan `yaml:"plans"`
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
	p := &Plans{list: f.Plans, def: f.Default, byPrice: map[string]map[string]string{"stripe": {}, "kinde": {}}}
	var errs []error
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
		for provider, refs := range map[string][]string{"stripe": pl.StripePrices, "kinde": pl.KindePlans} {
			for _, ref := range refs {
				if other, dup := p.byPrice[provider][ref]; dup {
					errs = append(errs, fmt.Errorf("plan %q: %s price %q already maps to plan %q", pl.Name, provider, ref, other))
				}
				p.byPrice[provider][ref] = pl.Name
			}
		}
	}
	switch {
	case len(f.Plans) == 0:
		errs = append(errs, errors.New("plans: no plans defined"))
	case f.Default == "":
		errs = append(errs, errors.New("plans: no default plan (the plan of customers with no live subscription)"))
	case !names[f.Default]:
		errs = append(errs, fmt.Errorf("plans: default plan %q is not defined", f.Default))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return p, nil
}

// Default returns the plan of customers with no live subscription.
func (p *Plans) Default() Plan {
	pl, _ := p.Named(p.def)
	return pl
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

// ForPrice returns the plan the first mapped ref means for provider.
func (p *Plans) ForPrice(provider string, refs []string) (Plan, bool) {
	for _, ref := range refs {
		if name, ok := p.byPrice[provider][ref]; ok {
			return p.Named(name)
		}
	}
	return Plan{}, false
}
