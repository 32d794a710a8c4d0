package stripe_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	stripemock "github.com/billsync/billsync/mocks/stripe"
	"github.com/billsync/billsync/providers/stripe"
	"github.com/billsync/billsync/reconcile"
)

// TestFetchReadsEveryActiveEntitlement: a customer entitled to 105
// features (more than the summary event's 10, more than a page of 100)
// gets all of them from Fetch, read in two pages; with entitlements off,
// Fetch asks nothing more and reports none.
func TestFetchReadsEveryActiveEntitlement(t *testing.T) {
	f := newFake(t, stripemock.Options{}, nil)
	cus := f.customer(t, map[string]string{"user_id": "u1"})
	f.subscribe(t, cus, "price_pro")
	const count = 105
	want := make([]string, count)
	for i := range count {
		want[i] = fmt.Sprintf("flag-%03d", i)
		f.h.Feature("price_pro", want[i])
	}
	f.h.Feature("price_team", "team-only") // a product the customer does not hold
	require.Len(t, f.Entitled(cus), count)
	f.seen()

	cfg := testConfig(f.URL)
	cfg.Entitlements = true
	snap, err := f.h.NewStripeClient(cfg).Fetch(context.Background(), cus)
	require.NoError(t, err)
	require.False(t, snap.KeepEntitlements)
	got := make([]string, len(snap.Entitlements))
	for i, e := range snap.Entitlements {
		require.Equal(t, reconcile.Entitlement{Provider: "stripe", Key: e.Key}, e)
		got[i] = e.Key
	}
	require.ElementsMatch(t, want, got)
	var pages []string
	for _, r := range f.seen() {
		if r.path == "/v1/entitlements/active_entitlements" {
			pages = append(pages, r.query)
		}
	}
	require.Len(t, pages, 2, "100 a page, then the rest")
	require.Contains(t, pages[1], "starting_after=")

	off, err := f.h.NewStripeClient(testConfig(f.URL)).Fetch(context.Background(), cus)
	require.NoError(t, err)
	require.False(t, off.KeepEntitlements, "off: Stripe grants nothing")
	require.Empty(t, off.Entitlements)
	for _, r := range f.seen() {
		require.NotEqual(t, "/v1/entitlements/active_entitlements", r.path, "entitlements are off")
	}
}

// TestListPageKeepsEntitlements: the sweep's listing does not read
// entitlements when they are on (the account keeps the last fetched), and
// reports none read-as-empty when they are off.
func TestListPageKeepsEntitlements(t *testing.T) {
	f := newFake(t, stripemock.Options{}, nil)
	cus := f.customer(t, nil)
	f.subscribe(t, cus, "price_pro")
	for _, on := range []bool{true, false} {
		cfg := testConfig(f.URL)
		cfg.Entitlements = on
		snaps, _, _, err := f.h.NewStripeClient(cfg).ListPage(context.Background(), "")
		require.NoError(t, err)
		require.Len(t, snaps, 1)
		require.Equal(t, on, snaps[0].KeepEntitlements, "entitlements on: %t", on)
	}
}

// TestEntitlementsPageOf reads the recorded summary event's list (a real
// Stripe object) and the shapes a page may take.
func TestEntitlementsPageOf(t *testing.T) {
	raw, err := os.ReadFile("../../../shared/fixtures/real-providers/stripe-sync-engine-events/active_entitlement_summary_updated.json")
	if err != nil {
		t.Skipf("shared fixtures: %v", err)
	}
	var ev struct {
		Data struct {
			Object struct {
				Entitlements json.RawMessage `json:"entitlements"`
			} `json:"object"`
		} `json:"data"`
	}
	require.NoError(t, json.Unmarshal(raw, &ev))
	ents, more, err := stripe.EntitlementsPageOf(ev.Data.Object.Entitlements)
	require.NoError(t, err)
	require.False(t, more)
	require.Equal(t, []reconcile.Entitlement{{Provider: "stripe", Key: "journeys"}}, ents)

	tests := map[string]struct {
		page string
		want []reconcile.Entitlement
		more bool
		err  string
	}{
		"expanded feature": {page: `{"data":[{"id":"ent_1","feature":{"id":"feat_1","lookup_key":"export"}}],"has_more":true}`,
			want: []reconcile.Entitlement{{Provider: "stripe", Key: "export"}}, more: true},
		"no lookup key":    {page: `{"data":[{"id":"ent_1","feature":"feat_1"}],"has_more":false}`},
		"repeated key":     {page: `{"data":[{"id":"a","lookup_key":"x"},{"id":"b","lookup_key":"x"}]}`, want: []reconcile.Entitlement{{Provider: "stripe", Key: "x"}}},
		"entry not object": {page: `{"data":[7,{"id":"b","lookup_key":"y"}]}`, want: []reconcile.Entitlement{{Provider: "stripe", Key: "y"}}},
		"data not a list":  {page: `{"data":{},"has_more":false}`, err: "not an array"},
		"has_more string":  {page: `{"data":[],"has_more":"yes"}`, err: "not a boolean"},
		"not JSON":         {page: `<html>`, err: "invalid character"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			ents, more, err := stripe.EntitlementsPageOf([]byte(tt.page))
			if tt.err != "" {
				require.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, ents)
			require.Equal(t, tt.more, more)
		})
	}
}

// FuzzEntitlementsPage: no page of active entitlements makes the reader
// panic, and every entitlement it reads names a lookup key, once.
func FuzzEntitlementsPage(f *testing.F) {
	for _, seed := range []string{
		`{"object":"list","data":[{"id":"ent_1","object":"entitlements.active_entitlement","feature":"feat_1","livemode":false,"lookup_key":"export"}],"has_more":false}`,
		`{"data":[{"id":"ent_1","feature":{"id":"feat_1","lookup_key":"seats"}}],"has_more":true}`,
		`{"data":null}`, `{"data":[null,1,"x",{}]}`, `[]`, `{"has_more":null}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, page []byte) {
		ents, _, err := stripe.EntitlementsPageOf(page)
		if err != nil {
			return
		}
		seen := map[string]bool{}
		for _, e := range ents {
			if e.Key == "" || seen[e.Key] || e.Provider != "stripe" || e.Limit != nil {
				t.Fatalf("read %+v from %q", e, page)
			}
			seen[e.Key] = true
		}
	})
}

// BenchmarkFetchEntitlements is a reconcile's fetch at the provider's
// latency (every answer held that long, as Stripe's take), with the
// entitlements off and on: listed while the customer is retrieved, "on"
// costs the same round trip as "off" (the ratio of their ns/op, from the
// same run, is the figure; sequential reads would make it 2).
func BenchmarkFetchEntitlements(b *testing.B) {
	raw, err := os.ReadFile(filepath.Join("testdata", "customer_expanded_basil.json"))
	if err != nil {
		b.Fatal(err)
	}
	page := []byte(`{"object":"list","url":"/v1/entitlements/active_entitlements","has_more":false,"data":[` +
		`{"id":"ent_1","object":"entitlements.active_entitlement","feature":"feat_1","livemode":false,"lookup_key":"export"},` +
		`{"id":"ent_2","object":"entitlements.active_entitlement","feature":"feat_2","livemode":false,"lookup_key":"seats-50"}]}`)
	for _, latency := range []time.Duration{50 * time.Millisecond, 300 * time.Millisecond} {
		hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(latency)
			w.Header().Set("Content-Type", "application/json")
			if r.URL.Path == "/v1/entitlements/active_entitlements" {
				_, _ = w.Write(page)
				return
			}
			_, _ = w.Write(raw)
		}))
		b.Cleanup(hs.Close)
		for _, on := range []bool{false, true} {
			b.Run(fmt.Sprintf("latency=%s/entitlements=%t", latency, on), func(b *testing.B) {
				cfg := testConfig(hs.URL)
				cfg.RateLimit, cfg.Burst, cfg.Entitlements = 1e9, 1000, on
				c, err := stripe.NewClient(cfg)
				if err != nil {
					b.Fatal(err)
				}
				for b.Loop() {
					snap, err := c.Fetch(context.Background(), "cus_TmixedMay0007")
					if err != nil {
						b.Fatal(err)
					}
					if on && len(snap.Entitlements) != 2 {
						b.Fatalf("read %d entitlements", len(snap.Entitlements))
					}
				}
			})
		}
	}
}
