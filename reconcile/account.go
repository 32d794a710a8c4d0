package reconcile

import (
	"cmp"
	"fmt"
	"strings"
	"time"
)

// Account is billsync's row for one (provider, customer): the state it keeps
// equal to the provider's.
type Account struct {
	ID                int64     `json:"id"`
	Provider          string    `json:"provider"`
	CustomerID        string    `json:"customer_id"`
	UserRef           string    `json:"user_ref"`
	Email             string    `json:"email"` // the provider's email for the customer; empty if none
	Plan              string    `json:"plan"`
	Status            string    `json:"status"`
	SubscriptionID    string    `json:"subscription_id"`
	PeriodStart       time.Time `json:"period_start"`
	PeriodEnd         time.Time `json:"period_end"`
	CancelAtPeriodEnd bool      `json:"cancel_at_period_end"`
	// ObservedAt is when the applied snapshot's fetch began (database
	// time); zero for an account never reconciled. Only a later snapshot
	// may change the account.
	ObservedAt time.Time `json:"observed_at"`
	// Features are the account's features as resolved from its plans and
	// its provider's entitlements (ResolveFeatures), sorted by key; only
	// granted ones. Written with the plan, in the same transaction.
	Features []Feature `json:"features,omitempty"`
	// Entitlements are the provider's entitlements last read for the
	// customer (one of the sources of Features), kept so a snapshot that
	// did not read them (a sweep's bulk listing) resolves from them.
	Entitlements []Entitlement `json:"entitlements,omitempty"`
}

// sameState reports whether a and b hold the same billing state (ids and
// ObservedAt aside).
func sameState(a, b Account) bool {
	return a.UserRef == b.UserRef && a.Email == b.Email && a.Plan == b.Plan && a.Status == b.Status &&
		a.SubscriptionID == b.SubscriptionID && a.PeriodStart.Equal(b.PeriodStart) &&
		a.PeriodEnd.Equal(b.PeriodEnd) && a.CancelAtPeriodEnd == b.CancelAtPeriodEnd &&
		sameFeatures(a.Features, b.Features) && sameEntitlements(a.Entitlements, b.Entitlements)
}

// calendarMonth returns the UTC calendar month holding t: the period of
// customers whose provider gives none.
func calendarMonth(t time.Time) (start, end time.Time) {
	t = t.UTC()
	start = time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
	return start, start.AddDate(0, 1, 0)
}

// FieldDiff is one field of an account, as support staff read it, before
// and after a reconcile.
type FieldDiff struct {
	Field, Before, After string
}

// Changed reports whether the reconcile changed the field.
func (d FieldDiff) Changed() bool { return d.Before != d.After }

// Diff returns the fields support staff read (plan, status, period, email)
// before and after a reconcile; "-" stands for none.
func Diff(before, after Account) []FieldDiff {
	dash := func(s string) string { return cmp.Or(s, "-") }
	diffs := []FieldDiff{
		{"plan", dash(before.Plan), dash(after.Plan)},
		{"status", dash(before.Status), dash(after.Status)},
		{"period", Period(before), Period(after)},
		{"email", dash(before.Email), dash(after.Email)},
	}
	if len(before.Features)+len(after.Features) > 0 { // none without a features: block, as before
		diffs = append(diffs, FieldDiff{"features", dash(featureList(before.Features)), dash(featureList(after.Features))})
	}
	return diffs
}

// featureList renders features as "export on (plan:pro), seats 20
// (plan:team)".
func featureList(fs []Feature) string {
	parts := make([]string, len(fs))
	for i, f := range fs {
		parts[i] = fmt.Sprintf("%s %s (%s)", f.Key, FeatureValueText(f), f.Source)
	}
	return strings.Join(parts, ", ")
}

// Period renders the account's period as "2026-01-01 – 2026-02-01" (UTC),
// or "-" for none.
func Period(a Account) string {
	if a.PeriodStart.IsZero() {
		return "-"
	}
	return a.PeriodStart.UTC().Format(time.DateOnly) + " – " + a.PeriodEnd.UTC().Format(time.DateOnly)
}
