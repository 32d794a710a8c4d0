package kinde

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	kindemock "github.com/billsync/billsync/mocks/kinde"
	"github.com/billsync/billsync/reconcile"
)

func limit(n int64) *int64 { return &n }

// TestFetchEntitlementsPaged: with entitlements on, Fetch reads every
// entitlement of the customer's live agreements, page after page
// (starting_after the last id), with entitlement_limit_max as the limit;
// an expired agreement's are not read; with them off, nothing is asked.
func TestFetchEntitlementsPaged(t *testing.T) {
	f := newFakeKinde(t, kindemock.Options{})
	var many []kindemock.Entitlement
	for i := range 12 {
		many = append(many, kindemock.Entitlement{FeatureCode: fmt.Sprintf("flag_%02d", i)})
	}
	many = append(many, kindemock.Entitlement{FeatureCode: "seats", LimitMax: limit(20)})
	f.SetAgreements("customer_1", []kindemock.Agreement{
		{PlanCode: "customer_pro_plan", Entitlements: many},
		{PlanCode: "customer_seats_plan", Entitlements: []kindemock.Entitlement{{FeatureCode: "seats", LimitMax: limit(5)}}},
	})
	c := testClient(t, f, Config{PageSize: 5, Entitlements: true})
	snap, err := c.Fetch(context.Background(), "customer_1")
	require.NoError(t, err)
	require.False(t, snap.KeepEntitlements)
	require.Len(t, snap.Entitlements, 14)
	require.Contains(t, snap.Entitlements, reconcile.Entitlement{Provider: "kinde", Key: "seats", Limit: limit(20)})
	require.Contains(t, snap.Entitlements, reconcile.Entitlement{Provider: "kinde", Key: "seats", Limit: limit(5)})
	require.Contains(t, snap.Entitlements, reconcile.Entitlement{Provider: "kinde", Key: "flag_11"})
	require.Equal(t, 3, f.count("/api/v1/billing/entitlements"), "14 entitlements, 5 a page")

	off := testClient(t, f, Config{PageSize: 5})
	snap, err = off.Fetch(context.Background(), "customer_1")
	require.NoError(t, err)
	require.False(t, snap.KeepEntitlements)
	require.Empty(t, snap.Entitlements)
	require.Equal(t, 3, f.count("/api/v1/billing/entitlements"), "off: not asked")
}

func TestEntitlementsPageOf(t *testing.T) {
	tests := map[string]struct {
		page string
		want entitlementsPage
		err  string
	}{
		"documented": {page: `{"code":"OK","has_more":true,"entitlements":[{"id":"e1","fixed_charge":35,"price_name":"Pro","unit_amount":null,"feature_code":"seats","feature_name":"Seats","entitlement_limit_max":10,"entitlement_limit_min":1}],"plans":[{"code":"pro","subscribed_on":"2025-06-01T12:00:00Z"}]}`,
			want: entitlementsPage{Entitlements: []reconcile.Entitlement{{Provider: "kinde", Key: "seats", Limit: limit(10)}}, Last: "e1", More: true}},
		"null limit":    {page: `{"entitlements":[{"id":"e1","feature_code":"export","entitlement_limit_max":null}]}`, want: entitlementsPage{Entitlements: []reconcile.Entitlement{{Provider: "kinde", Key: "export"}}, Last: "e1"}},
		"float limit":   {page: `{"entitlements":[{"id":"e1","feature_code":"seats","entitlement_limit_max":100.0}]}`, want: entitlementsPage{Entitlements: []reconcile.Entitlement{{Provider: "kinde", Key: "seats", Limit: limit(100)}}, Last: "e1"}},
		"no code":       {page: `{"entitlements":[{"id":"e1"}]}`, want: entitlementsPage{Last: "e1"}},
		"empty":         {page: `{"has_more":false,"entitlements":[]}`},
		"negative":      {page: `{"entitlements":[{"id":"e1","feature_code":"seats","entitlement_limit_max":-1}]}`, err: "not a whole number"},
		"fraction":      {page: `{"entitlements":[{"id":"e1","feature_code":"seats","entitlement_limit_max":1.5}]}`, err: "not a whole number"},
		"string limit":  {page: `{"entitlements":[{"id":"e1","feature_code":"seats","entitlement_limit_max":"10"}]}`, err: "is not a number"},
		"huge":          {page: `{"entitlements":[{"id":"e1","feature_code":"seats","entitlement_limit_max":1e300}]}`, err: "not a whole number"},
		"entry not obj": {page: `{"entitlements":[7]}`, err: "not an object"},
		"not JSON":      {page: `<html>`, err: "unreadable page"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := entitlementsPageOf([]byte(tt.page))
			if tt.err != "" {
				require.ErrorContains(t, err, tt.err)
				require.True(t, reconcile.IsPermanent(err))
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

// FuzzEntitlementsPageOf: no page makes the reader panic; what it reads
// names a feature code and a limit from 0.
func FuzzEntitlementsPageOf(f *testing.F) {
	for _, seed := range []string{
		`{"code":"OK","has_more":true,"entitlements":[{"id":"e1","feature_code":"seats","entitlement_limit_max":10}],"plans":[]}`,
		`{"entitlements":[{"id":"e1","feature_code":"x","entitlement_limit_max":null},{"feature_key":"y"}]}`,
		`{"entitlements":null}`, `[]`, `{"entitlements":[{"entitlement_limit_max":9.2233720368547758e18,"feature_code":"z"}]}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, page []byte) {
		got, err := entitlementsPageOf(page)
		if err != nil {
			require.True(t, reconcile.IsPermanent(err))
			return
		}
		for _, e := range got.Entitlements {
			if e.Key == "" || (e.Limit != nil && *e.Limit < 0) {
				t.Fatalf("read %+v from %q", e, page)
			}
		}
	})
}
