package reconcile

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Stripe Connect: each connected account sells its own prices, with ids
// of its own, so a plans file maps Stripe prices per account. A plan's
// stripe_prices keep meaning what they always did (the platform's own
// customers); its stripe_accounts rules name the accounts they hold for
// and what they map: prices (lookup keys or price ids, as stripe_prices)
// and products (the value of the price's product's metadata.billsync_plan,
// which a platform sets on the products it creates for its accounts).

// AccountRule maps Stripe prices to a plan for some accounts.
type AccountRule struct {
	// Accounts are the accounts the rule holds for: connected accounts'
	// acct_ ids, AccountsPlatform (the platform's own customers) or
	// AccountsAll (the platform and every connected account), alone. The
	// file may give one as a plain word (accounts: all).
	Accounts Accounts `yaml:"accounts"`
	// Prices are price lookup keys or price ids (or legacy plan ids), as
	// stripe_prices. A price id is one account's: a rule of another
	// account never maps it.
	Prices []string `yaml:"prices"`
	// Products are values of the price's product's metadata key
	// ProductPlanKey: a price whose product says one of them means the
	// plan. Reading them costs a product read per (account, product)
	// now and then (see providers/stripe), so only a file that has one
	// makes billsync read products.
	Products []string `yaml:"products"`
}

// Accounts are a rule's accounts: a YAML list, or one word.
type Accounts []string

// UnmarshalYAML reads a list, or one word as a list of it.
func (a *Accounts) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		var one string
		if err := n.Decode(&one); err != nil {
			return err
		}
		*a = Accounts{one}
		return nil
	}
	return n.Decode((*[]string)(a))
}

// Words of AccountRule.Accounts besides connected accounts' ids.
const (
	AccountsAll      = "all"
	AccountsPlatform = PlatformAccount
)

// ProductPlanKey is the product metadata key whose value names a plan
// for the rules' products (Item.ProductPlan).
const ProductPlanKey = "billsync_plan"

// scopeAll is the scope of rules for every account: no account id, and
// not "" (the platform's).
const scopeAll = "*"

// scopeRules are the Stripe rules of one scope (an account, or all).
type scopeRules struct {
	prices   map[string]string // price ref → plan name
	products map[string]string // product metadata value → plan name
}

// rules returns the scope's rules, made on first use.
func (p *Plans) rules(scope string) *scopeRules {
	r := p.stripe[scope]
	if r == nil {
		r = &scopeRules{prices: map[string]string{}, products: map[string]string{}}
		p.stripe[scope] = r
	}
	return r
}

// addStripe indexes pl's Stripe prices: stripe_prices for the platform,
// then each stripe_accounts rule for its accounts. A ref or product value
// mapped twice in one scope is an error, whichever plans map it: the file
// would mean two plans at once. A scope of one account may map what the
// rules for all map otherwise (the account's own rule wins).
func (p *Plans) addStripe(pl Plan) []error {
	var errs []error
	add := func(where, scope, kind string, m map[string]string, vals []string) {
		for _, v := range vals {
			switch other, dup := m[v]; {
			case strings.TrimSpace(v) == "":
				errs = append(errs, fmt.Errorf("plan %q: %s: an empty %s", pl.Name, where, kind))
			case dup:
				errs = append(errs, fmt.Errorf("plan %q: %s: %s %q already maps to plan %q%s", pl.Name, where, kind, v, other, scopeWords(scope)))
			}
			m[v] = pl.Name
		}
	}
	add("stripe_prices", "", "stripe price", p.rules("").prices, pl.StripePrices)
	for i, r := range pl.StripeAccounts {
		where := fmt.Sprintf("stripe_accounts[%d]", i)
		scopes, err := scopesOf(r.Accounts)
		if err != nil {
			errs = append(errs, fmt.Errorf("plan %q: %s: %w", pl.Name, where, err))
		}
		if len(r.Prices) == 0 && len(r.Products) == 0 {
			errs = append(errs, fmt.Errorf("plan %q: %s maps nothing (give prices or products)", pl.Name, where))
		}
		for _, scope := range scopes {
			add(where, scope, "stripe price", p.rules(scope).prices, r.Prices)
			add(where, scope, "product "+ProductPlanKey, p.rules(scope).products, r.Products)
		}
	}
	return errs
}

// scopesOf reads a rule's accounts into scopes: scopeAll, "" for the
// platform, or the account's id.
func scopesOf(accounts []string) ([]string, error) {
	if len(accounts) == 0 {
		return nil, errors.New("accounts is empty (acct_ ids, platform, or all)")
	}
	var scopes []string
	for _, a := range accounts {
		var scope string
		switch {
		case a == AccountsAll && len(accounts) > 1:
			return nil, fmt.Errorf("accounts: %s already names every account: give it alone", AccountsAll)
		case a == AccountsAll:
			scope = scopeAll
		case a == AccountsPlatform:
			scope = ""
		case !IsConnectedAccount(a):
			return nil, fmt.Errorf("accounts: %q is not a connected account's acct_ id, %s or %s", a, AccountsPlatform, AccountsAll)
		default:
			scope = a
		}
		if slices.Contains(scopes, scope) {
			return nil, fmt.Errorf("accounts: %q given twice", a)
		}
		scopes = append(scopes, scope)
	}
	return scopes, nil
}

// scopeWords names a scope in an error.
func scopeWords(scope string) string {
	switch scope {
	case "":
		return " for the platform's customers"
	case scopeAll:
		return " for all accounts"
	}
	return " for connected account " + scope
}

// ForItem returns the plan item's price means for provider, to a
// customer of account (a connected account's acct_ id, "" for the
// platform's own: see SplitConnected). Kinde's plan codes hold for its
// one account. For Stripe, the rules of the customer's own account (for
// the platform: stripe_prices and rules naming platform) are asked first,
// then the rules for all; within each, the item's first mapped ref, then
// its product's plan (Item.ProductPlan). So a connected account's rule
// never maps another account's price, and an account's own rule beats
// one for all.
func (p *Plans) ForItem(provider, account string, item Item) (Plan, bool) {
	if provider != ProviderStripe {
		if provider == ProviderKinde && account == "" {
			for _, ref := range item.PriceRefs {
				if name, ok := p.kinde[ref]; ok {
					return p.Named(name)
				}
			}
		}
		return Plan{}, false
	}
	for _, scope := range []string{account, scopeAll} {
		r := p.stripe[scope]
		if r == nil {
			continue
		}
		for _, ref := range item.PriceRefs {
			if name, ok := r.prices[ref]; ok {
				return p.Named(name)
			}
		}
		if name, ok := r.products[item.ProductPlan]; ok && item.ProductPlan != "" {
			return p.Named(name)
		}
	}
	return Plan{}, false
}

// ReadsProductPlans reports whether any rule maps a product's plan: only
// then does a Stripe read need each price's product (Item.ProductPlan).
func (p *Plans) ReadsProductPlans() bool {
	for _, r := range p.stripe {
		if len(r.products) > 0 {
			return true
		}
	}
	return false
}
