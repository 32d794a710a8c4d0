package reconcile

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// FeatureType is what kind of answer a feature gives the app.
type FeatureType string

const (
	// FeatureBoolean is on or off (export: true).
	FeatureBoolean FeatureType = "boolean"
	// FeatureLimit is a number the app enforces itself (seats: 5).
	FeatureLimit FeatureType = "limit"
	// FeatureMetered is a monthly allowance kept in the ledger, as its own
	// meter: granted once per period like the plan's allowance, debited
	// by usage that names it.
	FeatureMetered FeatureType = "metered"
)

// Sources of a feature's value, as the answer names them:
// plan:<plan>, stripe:<feature lookup key>, kinde:<feature code>.
const (
	sourcePlan = "plan"
)

// FeatureDef is one feature the plans file declares: its key, its type,
// and which provider features grant it.
type FeatureDef struct {
	Key  string      `yaml:"key"`
	Type FeatureType `yaml:"type"`
	// Stripe maps Stripe feature lookup keys to what each grants: true for
	// a boolean feature, a number for a limit or a meter (Stripe's
	// entitlements carry no number of their own).
	Stripe map[string]FeatureValue `yaml:"stripe"`
	// Kinde lists the Kinde feature codes that grant it; a limit or a
	// meter takes the entitlement's entitlement_limit_max (a limit without
	// one is unlimited; a meter without one grants nothing).
	Kinde []string `yaml:"kinde"`
}

// FeatureValue is what a plan or a provider feature grants: On for a
// boolean feature, N for a limit or a meter.
type FeatureValue struct {
	On bool
	N  *int64
}

// UnmarshalYAML reads true/false or a whole number.
func (v *FeatureValue) UnmarshalYAML(n *yaml.Node) error {
	var b bool
	if n.Tag == "!!bool" && n.Decode(&b) == nil {
		*v = FeatureValue{On: b}
		return nil
	}
	var i int64
	if n.Tag == "!!int" && n.Decode(&i) == nil {
		*v = FeatureValue{On: true, N: &i}
		return nil
	}
	return fmt.Errorf("line %d: %q is neither true/false nor a whole number", n.Line, n.Value)
}

// Entitlement is one feature a provider grants the customer now (Stripe:
// an active entitlement; Kinde: an entitlement of its billing API).
type Entitlement struct {
	Provider string `json:"provider"`
	// Key is the provider's name for the feature: Stripe's feature
	// lookup_key, Kinde's feature_code.
	Key string `json:"key"`
	// Limit is the provider's number for it (Kinde's
	// entitlement_limit_max), nil when it gives none.
	Limit *int64 `json:"limit,omitempty"`
}

// Feature is one feature's answer for an account: granted by at least one
// source, with its value and the source that gave it.
type Feature struct {
	Key  string      `json:"key"`
	Type FeatureType `json:"type"`
	// Limit is the limit or the meter's monthly allowance (the largest any
	// source grants); nil for a boolean feature, or an unlimited limit.
	Limit *int64 `json:"limit"`
	// Source names what granted it: plan:<plan>, stripe:<lookup key>,
	// kinde:<feature code>.
	Source string `json:"source"`
}

// featureKey is what a feature key may be: it is part of ledger keys
// (grant.<meter>:…), so no colon.
var featureKey = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,62}$`)

// parseFeatures checks the declared features and every plan's values.
func parseFeatures(defs []FeatureDef, plans []Plan) (map[string]FeatureDef, []error) {
	var errs []error
	byKey := map[string]FeatureDef{}
	stripeKeys, kindeCodes := map[string]string{}, map[string]string{}
	for i, d := range defs {
		switch {
		case !featureKey.MatchString(d.Key):
			errs = append(errs, fmt.Errorf("features[%d]: key %q: use 1-63 of a-z, 0-9, _ and -, starting with a letter", i, d.Key))
		case byKey[d.Key].Key != "":
			errs = append(errs, fmt.Errorf("features[%d]: feature %q declared twice", i, d.Key))
		}
		switch d.Type {
		case FeatureBoolean, FeatureLimit, FeatureMetered:
		default:
			errs = append(errs, fmt.Errorf("feature %q: type %q: use boolean, limit or metered", d.Key, d.Type))
		}
		for lk, v := range d.Stripe {
			if other, dup := stripeKeys[lk]; dup {
				errs = append(errs, fmt.Errorf("feature %q: Stripe lookup key %q already grants feature %q", d.Key, lk, other))
			}
			stripeKeys[lk] = d.Key
			errs = append(errs, checkValue(d, fmt.Sprintf("stripe %q", lk), v)...)
		}
		for _, code := range d.Kinde {
			if other, dup := kindeCodes[code]; dup {
				errs = append(errs, fmt.Errorf("feature %q: Kinde feature code %q already grants feature %q", d.Key, code, other))
			}
			kindeCodes[code] = d.Key
		}
		byKey[d.Key] = d
	}
	for _, pl := range plans {
		for key, v := range pl.Features {
			d, ok := byKey[key]
			if !ok {
				errs = append(errs, fmt.Errorf("plan %q: feature %q is not declared under features: (declared: %s)", pl.Name, key, strings.Join(slices.Sorted(maps.Keys(byKey)), ", ")))
				continue
			}
			errs = append(errs, checkValue(d, "plan "+pl.Name, v)...)
		}
	}
	return byKey, errs
}

func checkValue(d FeatureDef, where string, v FeatureValue) []error {
	switch {
	case d.Type == FeatureBoolean && v.N != nil:
		return []error{fmt.Errorf("feature %q (%s): boolean: give true or false, not %d", d.Key, where, *v.N)}
	case d.Type != FeatureBoolean && v.N == nil:
		return []error{fmt.Errorf("feature %q (%s): %s: give a whole number", d.Key, where, d.Type)}
	case v.N != nil && *v.N < 0:
		return []error{fmt.Errorf("feature %q (%s): %d is negative", d.Key, where, *v.N)}
	}
	return nil
}

// defs returns the declared features; none for nil plans (an app API
// configured without a plans file).
func (p *Plans) defs() map[string]FeatureDef {
	if p == nil {
		return nil
	}
	return p.features
}

// FeatureDefs returns the declared features, sorted by key.
func (p *Plans) FeatureDefs() []FeatureDef {
	return slices.SortedFunc(maps.Values(p.defs()), func(a, b FeatureDef) int { return cmp.Compare(a.Key, b.Key) })
}

// FeatureDef returns the declared feature key.
func (p *Plans) FeatureDef(key string) (FeatureDef, bool) {
	d, ok := p.defs()[key]
	return d, ok
}

// ErrUnknownFeature: the plans file declares no such feature (404).
var ErrUnknownFeature = errors.New("unknown feature")

// UnknownFeatureError names the features that exist.
type UnknownFeatureError struct {
	Key   string
	Known []string
}

func (e *UnknownFeatureError) Error() string {
	return fmt.Sprintf("%s %q: the plans file declares %s", ErrUnknownFeature, e.Key, orNoneList(e.Known))
}

// Is makes it ErrUnknownFeature and ErrNotFound (404).
func (e *UnknownFeatureError) Is(target error) bool {
	return target == ErrUnknownFeature || target == ErrNotFound
}

func orNoneList(keys []string) string {
	if len(keys) == 0 {
		return "none"
	}
	return strings.Join(keys, ", ")
}

// Unknown returns an *UnknownFeatureError for key, naming the declared
// features.
func (p *Plans) Unknown(key string) error {
	known := make([]string, 0, len(p.defs()))
	for _, d := range p.FeatureDefs() {
		known = append(known, d.Key)
	}
	return &UnknownFeatureError{Key: key, Known: known}
}

// ResolveFeatures gives the one answer per feature from every source: the
// plans (planNames: the plan of each subscription that keeps its plan, or
// the default plan; the deciding plan first) and the provider's
// entitlements. A boolean is on when any source grants it; a limit or a
// meter is the largest any source grants (an unlimited limit beats every
// number); at a tie the first source wins, in the order: plans as given,
// then entitlements by provider and key. Features no source grants are
// absent. Entitlements no declared feature maps are ignored. It is pure.
func ResolveFeatures(plans *Plans, planNames []string, ents []Entitlement) []Feature {
	type grant struct {
		source string
		v      FeatureValue
	}
	byKey := map[string][]grant{}
	seen := map[string]bool{}
	for _, name := range planNames {
		pl, ok := plans.Named(name)
		if !ok || seen[name] {
			continue
		}
		seen[name] = true
		for _, key := range slices.Sorted(maps.Keys(pl.Features)) {
			byKey[key] = append(byKey[key], grant{sourcePlan + ":" + name, pl.Features[key]})
		}
	}
	for _, e := range sortedEntitlements(slices.Clone(ents)) {
		d, v, ok := plans.entitlementGrants(e)
		if ok {
			byKey[d.Key] = append(byKey[d.Key], grant{e.Provider + ":" + e.Key, v})
		}
	}
	var out []Feature
	for _, key := range slices.Sorted(maps.Keys(byKey)) {
		d := plans.features[key]
		var best *grant
		for i, g := range byKey[key] {
			if !g.v.On || d.Type == FeatureMetered && g.v.N == nil {
				continue // not granted; a meter needs a number
			}
			if best == nil || largerLimit(g.v.N, best.v.N) {
				best = &byKey[key][i]
			}
		}
		if best == nil {
			continue
		}
		f := Feature{Key: key, Type: d.Type, Source: best.source}
		if d.Type != FeatureBoolean && best.v.N != nil {
			n := *best.v.N
			f.Limit = &n
		}
		out = append(out, f)
	}
	return out
}

// largerLimit reports whether a is larger than b; nil is unlimited.
func largerLimit(a, b *int64) bool {
	switch {
	case b == nil:
		return false
	case a == nil:
		return true
	}
	return *a > *b
}

// entitlementGrants returns the feature a provider entitlement grants and
// what it grants, or false when the plans file maps it to none.
func (p *Plans) entitlementGrants(e Entitlement) (FeatureDef, FeatureValue, bool) {
	for _, d := range p.features {
		switch e.Provider {
		case ProviderStripe:
			if v, ok := d.Stripe[e.Key]; ok {
				return d, v, true
			}
		case ProviderKinde:
			if slices.Contains(d.Kinde, e.Key) {
				v := FeatureValue{On: true}
				if e.Limit != nil {
					n := *e.Limit
					v.N = &n
				}
				return d, v, true
			}
		}
	}
	return FeatureDef{}, FeatureValue{}, false
}

// Mapped returns the entitlements the plans file maps to a feature (nil
// when none): the ones an account keeps.
func (p *Plans) Mapped(ents []Entitlement) []Entitlement {
	var out []Entitlement
	for _, e := range ents {
		if _, _, ok := p.entitlementGrants(e); ok {
			out = append(out, e)
		}
	}
	return sortedEntitlements(out)
}

// sortedEntitlements sorts ents by provider and key (stable: a key a
// provider gives twice keeps its order) and returns them.
func sortedEntitlements(ents []Entitlement) []Entitlement {
	slices.SortStableFunc(ents, func(a, b Entitlement) int {
		return cmp.Or(cmp.Compare(a.Provider, b.Provider), cmp.Compare(a.Key, b.Key))
	})
	return ents
}

// FeatureNamed returns the account's answer for key, if granted.
func FeatureNamed(features []Feature, key string) (Feature, bool) {
	for _, f := range features {
		if f.Key == key {
			return f, true
		}
	}
	return Feature{}, false
}

// sameFeatures reports whether two answers are equal.
func sameFeatures(a, b []Feature) bool {
	return slices.EqualFunc(a, b, func(x, y Feature) bool {
		return x.Key == y.Key && x.Type == y.Type && x.Source == y.Source && !largerLimit(x.Limit, y.Limit) && !largerLimit(y.Limit, x.Limit)
	})
}

// sameEntitlements reports whether two lists of provider entitlements are
// equal.
func sameEntitlements(a, b []Entitlement) bool {
	return slices.EqualFunc(a, b, func(x, y Entitlement) bool {
		return x.Provider == y.Provider && x.Key == y.Key && !largerLimit(x.Limit, y.Limit) && !largerLimit(y.Limit, x.Limit)
	})
}

// describeFeatures says which features a reconcile gained and lost.
func describeFeatures(before, after []Feature) []string {
	var parts []string
	for _, f := range after {
		if g, ok := FeatureNamed(before, f.Key); !ok {
			parts = append(parts, fmt.Sprintf("feature %s gained (%s)", f.Key, describeFeature(f)))
		} else if !sameFeatures([]Feature{g}, []Feature{f}) {
			parts = append(parts, fmt.Sprintf("feature %s now %s", f.Key, describeFeature(f)))
		}
	}
	for _, f := range before {
		if _, ok := FeatureNamed(after, f.Key); !ok {
			parts = append(parts, fmt.Sprintf("feature %s lost", f.Key))
		}
	}
	return parts
}

// describeFeature renders a feature's value and source: "20 from
// plan:team", "on from stripe:export", "unlimited from kinde:seats".
func describeFeature(f Feature) string { return FeatureValueText(f) + " from " + f.Source }

// FeatureValueText renders a granted feature's value: "on", its limit
// (a meter's monthly allowance), or "unlimited".
func FeatureValueText(f Feature) string {
	switch {
	case f.Limit != nil:
		return fmt.Sprint(*f.Limit)
	case f.Type != FeatureBoolean:
		return "unlimited"
	}
	return "on"
}

// DescribeFeature is describeFeature for the console and the CLI.
func DescribeFeature(f Feature) string { return describeFeature(f) }

// FeatureCheck is the app's answer for one feature of one account.
type FeatureCheck struct {
	Type FeatureType `json:"type"`
	// Allowed: a boolean or a limit is granted by some source; a meter
	// has some of its allowance left this period.
	Allowed bool `json:"allowed"`
	// Limit is the limit or the meter's monthly allowance; null for a
	// boolean, an unlimited limit, or a feature no source grants.
	Limit *int64 `json:"limit"`
	// Used and Remaining are a meter's figures for the current period
	// (null for other features).
	Used      *int64 `json:"used"`
	Remaining *int64 `json:"remaining"`
	// Source names what granted it (plan:pro, stripe:<lookup key>,
	// kinde:<feature code>); null when nothing does.
	Source *string `json:"source"`
}

// Check answers feature d for u. A meter the account lost mid-period
// keeps what it was granted (never clawed back): it is allowed while some
// is left, as a debit would be.
func Check(d FeatureDef, u UserAccount) FeatureCheck {
	c := FeatureCheck{Type: d.Type}
	f, granted := FeatureNamed(u.Account.Features, d.Key)
	if granted {
		src := f.Source
		c.Source, c.Limit, c.Allowed = &src, f.Limit, true
	}
	if d.Type == FeatureMetered {
		m := MeterOf(u.Meters, d.Key)
		used, left := m.Used, m.Balance
		c.Used, c.Remaining, c.Allowed = &used, &left, left > 0
	}
	return c
}

// Checks answers every declared feature for u, by key.
func (p *Plans) Checks(u UserAccount) map[string]FeatureCheck {
	out := make(map[string]FeatureCheck, len(p.defs()))
	for key, d := range p.defs() {
		out[key] = Check(d, u)
	}
	return out
}

// CheckNamed answers feature key for u; an undeclared key is an
// *UnknownFeatureError.
func (p *Plans) CheckNamed(key string, u UserAccount) (FeatureCheck, error) {
	d, ok := p.defs()[key]
	if !ok {
		return FeatureCheck{}, p.Unknown(key)
	}
	return Check(d, u), nil
}

// CheckDebit reports why d cannot debit under these plans: an undeclared
// feature (*UnknownFeatureError) or one that is not metered (ErrInvalid).
func (p *Plans) CheckDebit(d Debit) error {
	if d.Feature == "" {
		return nil
	}
	def, ok := p.defs()[d.Feature]
	switch {
	case !ok:
		return p.Unknown(d.Feature)
	case def.Type != FeatureMetered:
		return fmt.Errorf("%w: feature %q is a %s, not metered: only a meter is debited", ErrInvalid, d.Feature, def.Type)
	}
	return nil
}
