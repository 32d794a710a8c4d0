package stripe

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/mocks/stripe/openapi"
	"github.com/billsync/billsync/reconcile"
)

func readTestdata(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	require.NoError(t, err)
	return b
}

func day(s string) time.Time {
	d, err := time.Parse(time.DateOnly, s)
	if err != nil {
		panic(err)
	}
	return d
}

func TestPeriodOf(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		raw        []byte
		start, end time.Time
		ok         bool
	}{
		{"Basil_ItemLevel", readTestdata(t, "subscription_basil.json"), day("2025-12-01"), day("2026-01-01"), true},
		{"2024-06-20_SubscriptionLevel", readTestdata(t, "subscription_2024-06-20.json"), day("2024-07-01"), day("2024-08-01"), true},
		{"LegacyPlan_SubscriptionLevel", readTestdata(t, "subscription_legacy_plan.json"), day("2018-01-01"), day("2018-02-01"), true},
		{"Absent_NullOnItems", readTestdata(t, "subscription_no_period.json"), time.Time{}, time.Time{}, false},
		{"ItemLevelWinsOverSubscriptionLevel", []byte(`{"current_period_start":1000,"current_period_end":2000,
			"items":{"data":[{"current_period_start":1764547200,"current_period_end":1767225600}]}}`),
			day("2025-12-01"), day("2026-01-01"), true},
		{"FirstItemWithBothBounds", []byte(`{"items":{"data":[{"current_period_start":1764547200},
			{"current_period_start":1719792000,"current_period_end":1722470400}]}}`),
			day("2024-07-01"), day("2024-08-01"), true},
		{"OnlyStart", []byte(`{"current_period_start":1764547200}`), time.Time{}, time.Time{}, false},
		{"ZeroIsAbsent", []byte(`{"current_period_start":0,"current_period_end":1767225600}`), time.Time{}, time.Time{}, false},
		{"WrongType", []byte(`{"current_period_start":"1764547200","current_period_end":1767225600}`), time.Time{}, time.Time{}, false},
		{"NotAnObject", []byte(`[1,2]`), time.Time{}, time.Time{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start, end, ok := periodOf(tt.raw)
			require.Equal(t, tt.ok, ok)
			require.True(t, tt.start.Equal(start), "start %s, want %s", start, tt.start)
			require.True(t, tt.end.Equal(end), "end %s, want %s", end, tt.end)
		})
	}
}

func TestPriceRefsOf(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		raw  []byte
		want []string
	}{
		{"Basil_LookupKeyThenPriceID", readTestdata(t, "subscription_basil.json"), []string{"pro_monthly", "price_1RbasilPro0001"}},
		{"2024-06-20", readTestdata(t, "subscription_2024-06-20.json"), []string{"team_monthly", "price_1PoldTeam0002"}},
		{"LegacyPlanIDOnly", readTestdata(t, "subscription_legacy_plan.json"), []string{"gold-monthly"}},
		{"Absent", readTestdata(t, "subscription_no_price.json"), nil},
		{"TopLevelPlanOnly", []byte(`{"plan":{"id":"silver-2016","object":"plan"}}`), []string{"silver-2016"}},
		{"PriceAsID", []byte(`{"items":{"data":[{"price":"price_X"}]}}`), []string{"price_X"}},
		{"AllItemsInOrder", []byte(`{"items":{"data":[
			{"price":{"id":"price_seats","lookup_key":null}},
			{"price":{"id":"price_pro","lookup_key":"pro"},"plan":{"id":"price_pro"}}]}}`),
			[]string{"price_seats", "pro", "price_pro"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, priceRefsOf(tt.raw))
		})
	}
}

func TestStatusAndCancelOf(t *testing.T) {
	t.Parallel()
	status, ok := statusOf(readTestdata(t, "subscription_legacy_plan.json"))
	require.True(t, ok)
	require.Equal(t, "trialing", status)
	_, ok = statusOf([]byte(`{"status":null}`))
	require.False(t, ok)

	c := cancelOf(readTestdata(t, "subscription_2024-06-20.json"))
	require.True(t, c.AtPeriodEnd)
	require.True(t, day("2024-08-01").Equal(c.At))
	require.True(t, time.Unix(1720000000, 0).Equal(c.CanceledAt))

	c = cancelOf(readTestdata(t, "subscription_basil.json"))
	require.Equal(t, cancellation{}, c, "nulls are absent, not time.Unix(0)")
}

func TestSnapshotOf(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		raw  []byte
		want reconcile.Snapshot
		err  string // substring of the permanent error's reason
	}{
		{name: "Basil", raw: readTestdata(t, "subscription_basil.json"), want: reconcile.Snapshot{
			Provider: "stripe", CustomerID: "cus_TbasilAda0001", SubscriptionID: "sub_1RbasilPro0001", Status: "active",
			PriceRefs: []string{"pro_monthly", "price_1RbasilPro0001"}, PeriodStart: day("2025-12-01"), PeriodEnd: day("2026-01-01"),
		}},
		{name: "PreBasil_2024-06-20", raw: readTestdata(t, "subscription_2024-06-20.json"), want: reconcile.Snapshot{
			Provider: "stripe", CustomerID: "cus_QoldGrace0002", SubscriptionID: "sub_1PoldTeam0002", Status: "active",
			PriceRefs: []string{"team_monthly", "price_1PoldTeam0002"}, PeriodStart: day("2024-07-01"), PeriodEnd: day("2024-08-01"),
			CancelAtPeriodEnd: true,
		}},
		{name: "LegacyPlan", raw: readTestdata(t, "subscription_legacy_plan.json"), want: reconcile.Snapshot{
			Provider: "stripe", CustomerID: "cus_BlegacyLin03", SubscriptionID: "sub_BlegacyPlan03", Status: "trialing",
			PriceRefs: []string{"gold-monthly"}, PeriodStart: day("2018-01-01"), PeriodEnd: day("2018-02-01"),
		}},
		{name: "CanceledNeedsNothingButKeepsWhatItHas", raw: readTestdata(t, "subscription_canceled_basil.json"), want: reconcile.Snapshot{
			Provider: "stripe", CustomerID: "cus_TbasilAda0001", SubscriptionID: "sub_1RcanceledOld06", Status: "canceled",
			PriceRefs: []string{"pro_monthly", "price_1RbasilPro0001"}, PeriodStart: day("2025-09-01"), PeriodEnd: day("2025-10-01"),
		}},
		{name: "CancelAtPeriodEndViaCancelAt", raw: []byte(`{"id":"sub_c","status":"active","customer":"cus_c",
			"cancel_at_period_end":false,"cancel_at":1767225600,
			"items":{"data":[{"price":{"id":"price_p"},"current_period_start":1764547200,"current_period_end":1767225600}]}}`),
			want: reconcile.Snapshot{Provider: "stripe", CustomerID: "cus_c", SubscriptionID: "sub_c", Status: "active",
				PriceRefs: []string{"price_p"}, PeriodStart: day("2025-12-01"), PeriodEnd: day("2026-01-01"), CancelAtPeriodEnd: true}},
		{name: "ExpandedCustomer", raw: []byte(`{"id":"sub_e","status":"canceled","customer":{"id":"cus_e","object":"customer"}}`),
			want: reconcile.Snapshot{Provider: "stripe", CustomerID: "cus_e", SubscriptionID: "sub_e", Status: "canceled"}},
		{name: "ErrLiveWithoutPeriod", raw: readTestdata(t, "subscription_no_period.json"),
			err: "stripe subscription sub_1RnoPeriod0004 (past_due): no current period in either the item shape"},
		{name: "ErrLiveWithoutPrice", raw: readTestdata(t, "subscription_no_price.json"),
			err: "stripe subscription sub_1RnoPrice0005 (active): no price reference"},
		{name: "ErrLivePeriodInverted", raw: []byte(`{"id":"sub_i","status":"active","plan":{"id":"p"},
			"current_period_start":1767225600,"current_period_end":1764547200}`),
			err: "current period ends (2025-12-01T00:00:00Z) before it starts (2026-01-01T00:00:00Z)"},
		{name: "CanceledPeriodInvertedIsDropped", raw: []byte(`{"id":"sub_j","status":"canceled",
			"current_period_start":1767225600,"current_period_end":1764547200}`),
			want: reconcile.Snapshot{Provider: "stripe", SubscriptionID: "sub_j", Status: "canceled"}},
		{name: "ErrNoStatus", raw: []byte(`{"id":"sub_s","object":"subscription"}`), err: "stripe subscription sub_s: no status"},
		{name: "ErrNotASubscription", raw: readTestdata(t, "subscription_updated_basil.json"), err: `object is "event"`},
		{name: "ErrNoID", raw: []byte(`{}`), err: "no id"},
		{name: "ErrNotJSON", raw: []byte(`<html>502 Bad Gateway</html>`), err: "no id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			snap, err := snapshotOf(tt.raw)
			if tt.err != "" {
				require.Error(t, err)
				var perm *reconcile.PermanentError
				require.ErrorAs(t, err, &perm)
				require.Contains(t, perm.Reason, tt.err)
				require.Equal(t, reconcile.Snapshot{}, snap)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, snap)
		})
	}
}

func TestPick(t *testing.T) {
	t.Parallel()
	mk := func(id, status string, created int64) []byte {
		b, err := json.Marshal(map[string]any{"id": id, "status": status, "created": created})
		require.NoError(t, err)
		return b
	}
	tests := []struct {
		name string
		subs [][]byte
		want string // id; "" = none
	}{
		{"None", nil, ""},
		{"LiveOlderBeatsCanceledNewer", [][]byte{mk("sub_new", "canceled", 200), mk("sub_old", "active", 100)}, "sub_old"},
		{"NewestLive", [][]byte{mk("sub_a", "active", 100), mk("sub_t", "trialing", 300), mk("sub_c", "canceled", 400)}, "sub_t"},
		{"PastDueIsLive", [][]byte{mk("sub_u", "unpaid", 300), mk("sub_p", "past_due", 100)}, "sub_p"},
		{"NoneLive_NewestOfRest", [][]byte{mk("sub_1", "canceled", 100), mk("sub_2", "incomplete_expired", 300), mk("sub_3", "unpaid", 200)}, "sub_2"},
		{"TieKeepsListOrder", [][]byte{mk("sub_first", "active", 100), mk("sub_second", "active", 100)}, "sub_first"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := pick(tt.subs)
			require.NoError(t, err)
			if tt.want == "" {
				require.Nil(t, got)
				return
			}
			id, _ := stringAt(got, "id")
			require.Equal(t, tt.want, id)
		})
	}

	t.Run("ErrEntryWithoutStatus", func(t *testing.T) {
		_, err := pick([][]byte{mk("sub_a", "active", 1), []byte(`{"id":"sub_b"}`)})
		require.True(t, reconcile.IsPermanent(err))
		require.ErrorContains(t, err, "sub_b: no status")
	})
}

// TestReadersOnStripeMock runs the readers on the subscription Stripe's own
// OpenAPI mock returns: the current (basil) shape, as Stripe documents it.
func TestReadersOnStripeMock(t *testing.T) {
	// Not parallel: every stripe-mock also binds the fixed HTTPS port 12112
	// (openapi.Start sets only -http-addr), so two at once collide.
	base := openapi.Start(t)
	req, err := http.NewRequest(http.MethodGet, base+"/v1/subscriptions/sub_123", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer sk_test_123")
	req.Header.Set("Stripe-Version", APIVersion)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(raw))

	// What the fixture holds, decoded without the readers.
	var fixture struct {
		Status             string `json:"status"`
		CurrentPeriodStart *int64 `json:"current_period_start"`
		Items              struct {
			Data []struct {
				CurrentPeriodStart int64 `json:"current_period_start"`
				CurrentPeriodEnd   int64 `json:"current_period_end"`
				Price              struct {
					ID string `json:"id"`
				} `json:"price"`
			} `json:"data"`
		} `json:"items"`
	}
	require.NoError(t, json.Unmarshal(raw, &fixture))
	require.Nil(t, fixture.CurrentPeriodStart, "stripe-mock should answer the basil shape: no subscription-level period")
	require.NotEmpty(t, fixture.Items.Data)
	item := fixture.Items.Data[0]

	status, ok := statusOf(raw)
	require.True(t, ok)
	require.Equal(t, fixture.Status, status)

	start, end, ok := periodOf(raw)
	require.True(t, ok, "the item-level period must be found")
	require.Equal(t, item.CurrentPeriodStart, start.Unix())
	require.Equal(t, item.CurrentPeriodEnd, end.Unix())

	require.Contains(t, priceRefsOf(raw), item.Price.ID)

	// stripe-mock's fixture is generated data: its item period ends before it
	// starts (end 976287773, start 1896570518 in v0.203.0). A live
	// subscription like that must be a permanent error saying so, never a
	// snapshot with a nonsense period.
	snap, err := snapshotOf(raw)
	if end.After(start) || !(reconcile.Snapshot{Status: status}).Live() {
		require.NoError(t, err)
		require.Equal(t, "sub_123", snap.SubscriptionID)
		return
	}
	require.True(t, reconcile.IsPermanent(err))
	require.ErrorContains(t, err, "before it starts")
}

// FuzzReadSubscription feeds arbitrary bytes to the snapshot builder: it must
// never panic, every failure must be permanent with a reason, and a live
// snapshot must carry a real period and a price reference.
func FuzzReadSubscription(f *testing.F) {
	seeds, err := filepath.Glob(filepath.Join("testdata", "*.json"))
	if err != nil {
		f.Fatal(err)
	}
	for _, name := range seeds {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"id":"sub_x","status":"active","items":{"data":[{"current_period_start":1,"current_period_end":2,"price":"p"}]}}`))
	f.Add([]byte(`{"id":"sub_x","status":"active","current_period_start":9223372036854775807,"current_period_end":-1,"plan":{"id":1}}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		snap, err := snapshotOf(raw)
		if err != nil {
			var perm *reconcile.PermanentError
			require.ErrorAs(t, err, &perm)
			require.NotEmpty(t, perm.Reason)
			return
		}
		require.NotEmpty(t, snap.SubscriptionID)
		require.NotEmpty(t, snap.Status)
		if snap.Live() {
			require.False(t, snap.PeriodStart.IsZero())
			require.True(t, snap.PeriodEnd.After(snap.PeriodStart))
			require.NotEmpty(t, snap.PriceRefs)
		}
		_, _ = pick([][]byte{raw})
	})
}
