package stripe

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-json-experiment/json/jsontext"
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
	first := func(raw []byte) object {
		items := itemsOf(objectOf(raw))
		if len(items) == 0 {
			return object{}
		}
		return items[0]
	}
	tests := []struct {
		name       string
		sub        []byte
		item       object
		start, end time.Time
		ok         bool
	}{
		{"Basil_ItemLevel", readTestdata(t, "subscription_basil.json"), first(readTestdata(t, "subscription_basil.json")),
			day("2025-12-01"), day("2026-01-01"), true},
		{"2024-06-20_SubscriptionLevel", readTestdata(t, "subscription_2024-06-20.json"), first(readTestdata(t, "subscription_2024-06-20.json")),
			day("2024-07-01"), day("2024-08-01"), true},
		{"LegacyPlan_SubscriptionLevel", readTestdata(t, "subscription_legacy_plan.json"), first(readTestdata(t, "subscription_legacy_plan.json")),
			day("2018-01-01"), day("2018-02-01"), true},
		{"Absent_NullOnItems", readTestdata(t, "subscription_no_period.json"), first(readTestdata(t, "subscription_no_period.json")),
			time.Time{}, time.Time{}, false},
		{"ItemLevelWinsOverSubscriptionLevel", []byte(`{"current_period_start":1000,"current_period_end":2000}`),
			objectOf([]byte(`{"current_period_start":1764547200,"current_period_end":1767225600}`)), day("2025-12-01"), day("2026-01-01"), true},
		{"ItemWithOneBoundTakesSubscriptions", []byte(`{"current_period_start":1719792000,"current_period_end":1722470400}`),
			objectOf([]byte(`{"current_period_start":1764547200}`)), day("2024-07-01"), day("2024-08-01"), true},
		{"OnlyStart", []byte(`{"current_period_start":1764547200}`), object{}, time.Time{}, time.Time{}, false},
		{"ZeroIsAbsent", []byte(`{"current_period_start":0,"current_period_end":1767225600}`), object{}, time.Time{}, time.Time{}, false},
		{"WrongType", []byte(`{"current_period_start":"1764547200","current_period_end":1767225600}`), object{}, time.Time{}, time.Time{}, false},
		{"NotAnObject", []byte(`[1,2]`), objectOf([]byte(`"x"`)), time.Time{}, time.Time{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start, end, ok := periodOf(objectOf(tt.sub), tt.item)
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
		item object
		want []string
	}{
		{"Basil_LookupKeyThenPriceID", itemsOf(objectOf(readTestdata(t, "subscription_basil.json")))[0], []string{"pro_monthly", "price_1RbasilPro0001"}},
		{"2024-06-20", itemsOf(objectOf(readTestdata(t, "subscription_2024-06-20.json")))[0], []string{"team_monthly", "price_1PoldTeam0002"}},
		{"LegacyPlanIDOnly", itemsOf(objectOf(readTestdata(t, "subscription_legacy_plan.json")))[0], []string{"gold-monthly"}},
		{"TopLevelPlanOnly", objectOf([]byte(`{"plan":{"id":"silver-2016","object":"plan"}}`)), []string{"silver-2016"}},
		{"PriceAsID", objectOf([]byte(`{"price":"price_X"}`)), []string{"price_X"}},
		{"NullLookupKey", objectOf([]byte(`{"price":{"id":"price_seats","lookup_key":null},"plan":{"id":"price_seats"}}`)), []string{"price_seats"}},
		{"Absent", objectOf([]byte(`{"price":null}`)), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, priceRefsOf(tt.item))
		})
	}
}

func TestStatusAndCancelOf(t *testing.T) {
	t.Parallel()
	status, ok := statusOf(objectOf(readTestdata(t, "subscription_legacy_plan.json")))
	require.True(t, ok)
	require.Equal(t, "trialing", status)
	_, ok = statusOf(objectOf([]byte(`{"status":null}`)))
	require.False(t, ok)

	c := cancelOf(objectOf(readTestdata(t, "subscription_2024-06-20.json")))
	require.True(t, c.AtPeriodEnd)
	require.True(t, day("2024-08-01").Equal(c.At))
	require.True(t, time.Unix(1720000000, 0).Equal(c.CanceledAt))

	c = cancelOf(objectOf(readTestdata(t, "subscription_basil.json")))
	require.Equal(t, cancellation{}, c, "nulls are absent, not time.Unix(0)")
}

func TestQuantityAndPauseOf(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]int64{`{"quantity":50}`: 50, `{"quantity":0}`: 0, `{"quantity":null}`: 1, `{}`: 1,
		`{"quantity":"5"}`: 1, `{"quantity":-3}`: 1} {
		require.Equal(t, want, quantityOf(objectOf([]byte(raw))), raw)
	}
	for raw, want := range map[string]bool{`{"pause_collection":{"behavior":"void","resumes_at":null}}`: true,
		`{"pause_collection":null}`: false, `{}`: false, `{"pause_collection":"void"}`: false, `{"pause_collection":{}}`: true} {
		require.Equal(t, want, collectionPausedOf(objectOf([]byte(raw))), raw)
	}
}

// item is a reconcile.Item for tests: one unit unless said otherwise.
func item(start, end time.Time, refs ...string) reconcile.Item {
	return reconcile.Item{PriceRefs: refs, Quantity: 1, PeriodStart: start, PeriodEnd: end}
}

func TestSubscriptionOf(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		raw  []byte
		want reconcile.Subscription
		err  string // substring of the permanent error's reason
	}{
		{name: "Basil", raw: readTestdata(t, "subscription_basil.json"), want: reconcile.Subscription{
			ID: "sub_1RbasilPro0001", Status: "active", Created: day("2025-12-01"),
			Items: []reconcile.Item{item(day("2025-12-01"), day("2026-01-01"), "pro_monthly", "price_1RbasilPro0001")},
		}},
		{name: "PreBasil_2024-06-20", raw: readTestdata(t, "subscription_2024-06-20.json"), want: reconcile.Subscription{
			ID: "sub_1PoldTeam0002", Status: "active", Created: day("2024-07-01"), CancelAtPeriodEnd: true,
			Items: []reconcile.Item{{PriceRefs: []string{"team_monthly", "price_1PoldTeam0002"}, Quantity: 3,
				PeriodStart: day("2024-07-01"), PeriodEnd: day("2024-08-01")}},
		}},
		{name: "LegacyPlan", raw: readTestdata(t, "subscription_legacy_plan.json"), want: reconcile.Subscription{
			ID: "sub_BlegacyPlan03", Status: "trialing", Created: day("2018-01-01"), TrialEnd: day("2018-02-01"),
			Items: []reconcile.Item{item(day("2018-01-01"), day("2018-02-01"), "gold-monthly")},
		}},
		{name: "Canceled", raw: readTestdata(t, "subscription_canceled_basil.json"), want: reconcile.Subscription{
			ID: "sub_1RcanceledOld06", Status: "canceled", Created: day("2025-09-01"),
			Items: []reconcile.Item{item(day("2025-09-01"), day("2025-10-01"), "pro_monthly", "price_1RbasilPro0001")},
		}},
		{name: "LiveWithoutPeriodHasZeroPeriod", raw: readTestdata(t, "subscription_no_period.json"), want: reconcile.Subscription{
			ID: "sub_1RnoPeriod0004", Status: "past_due", Created: day("2025-12-01"),
			Items: []reconcile.Item{item(time.Time{}, time.Time{}, "pro_monthly", "price_1RbasilPro0001")},
		}},
		{name: "LiveWithoutPriceHasNoItems", raw: readTestdata(t, "subscription_no_price.json"), want: reconcile.Subscription{
			ID: "sub_1RnoPrice0005", Status: "active", Created: day("2025-12-01"),
		}},
		{name: "TopLevelPlanWithoutItems", raw: []byte(`{"id":"sub_t","status":"active","plan":{"id":"silver-2016"},"quantity":4,
			"current_period_start":1764547200,"current_period_end":1767225600}`), want: reconcile.Subscription{
			ID: "sub_t", Status: "active", Items: []reconcile.Item{{PriceRefs: []string{"silver-2016"}, Quantity: 4,
				PeriodStart: day("2025-12-01"), PeriodEnd: day("2026-01-01")}},
		}},
		{name: "CancelAtPeriodEndViaCancelAt", raw: []byte(`{"id":"sub_c","status":"active","cancel_at_period_end":false,"cancel_at":1767225600,
			"items":{"data":[{"price":{"id":"price_p"},"current_period_start":1764547200,"current_period_end":1767225600}]}}`),
			want: reconcile.Subscription{ID: "sub_c", Status: "active", CancelAtPeriodEnd: true,
				Items: []reconcile.Item{item(day("2025-12-01"), day("2026-01-01"), "price_p")}}},
		{name: "CancelAtAfterPeriodIsNotAtPeriodEnd", raw: []byte(`{"id":"sub_c","status":"active","cancel_at":1767225601,
			"items":{"data":[{"price":{"id":"price_p"},"current_period_start":1764547200,"current_period_end":1767225600}]}}`),
			want: reconcile.Subscription{ID: "sub_c", Status: "active",
				Items: []reconcile.Item{item(day("2025-12-01"), day("2026-01-01"), "price_p")}}},
		{name: "TrialAndPause", raw: []byte(`{"id":"sub_p","status":"trialing","trial_end":1767225600,
			"pause_collection":{"behavior":"keep_as_draft","resumes_at":null},
			"items":{"data":[{"price":{"id":"price_p"},"quantity":7,"current_period_start":1764547200,"current_period_end":1767225600}]}}`),
			want: reconcile.Subscription{ID: "sub_p", Status: "trialing", TrialEnd: day("2026-01-01"), CollectionPaused: true,
				Items: []reconcile.Item{{PriceRefs: []string{"price_p"}, Quantity: 7, PeriodStart: day("2025-12-01"), PeriodEnd: day("2026-01-01")}}}},
		{name: "ErrPeriodInverted", raw: []byte(`{"id":"sub_i","status":"active","plan":{"id":"p"},
			"current_period_start":1767225600,"current_period_end":1764547200}`),
			err: "current period ends (2025-12-01T00:00:00Z) before it starts (2026-01-01T00:00:00Z)"},
		{name: "ErrNoStatus", raw: []byte(`{"id":"sub_s","object":"subscription"}`), err: "stripe subscription sub_s: no status"},
		{name: "ErrNotASubscription", raw: readTestdata(t, "subscription_updated_basil.json"), err: `object is "event"`},
		{name: "ErrNoID", raw: []byte(`{}`), err: "no id"},
		{name: "ErrNotJSON", raw: []byte(`<html>502 Bad Gateway</html>`), err: "no id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sub, err := subscriptionOf(tt.raw)
			if tt.err != "" {
				require.Error(t, err)
				var perm *reconcile.PermanentError
				require.ErrorAs(t, err, &perm)
				require.Contains(t, perm.Reason, tt.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, sub)
		})
	}
}

// TestCustomerExpanded reads a recorded-shape customer with three current
// subscriptions: mixed intervals on one (a yearly add-on listed before the
// monthly plan) with a cancel_at inside the monthly period, 50 trial seats,
// and one with paused collection.
func TestCustomerExpanded(t *testing.T) {
	t.Parallel()
	raw := readTestdata(t, "customer_expanded_basil.json")
	cust, err := customerOfJSON(raw, "user_id")
	require.NoError(t, err)
	require.Equal(t, "cus_TmixedMay0007", cust.id)
	require.Equal(t, "u_may", cust.userRef)
	require.Equal(t, "may@example.com", cust.email)
	require.True(t, cust.complete)
	require.False(t, cust.deleted)
	require.Len(t, cust.subs, 3)

	// Stripe's order is newest first; the reader keeps that order whatever
	// order the subscriptions come in.
	reversed := []object{cust.subs[2], cust.subs[1], cust.subs[0]}
	subs, err := subscriptionsOf(reversed)
	require.NoError(t, err)
	require.Equal(t, []reconcile.Subscription{
		{ID: "sub_1RtrialSeat0072", Status: "trialing", Created: day("2025-11-20"), TrialEnd: day("2025-12-04"),
			Items: []reconcile.Item{{PriceRefs: []string{"team_seat", "price_1RteamSeat0072"}, Quantity: 50,
				PeriodStart: day("2025-11-20"), PeriodEnd: day("2025-12-04")}}},
		{ID: "sub_1RmixedPro0071", Status: "active", Created: day("2025-06-01"), CancelAtPeriodEnd: true,
			Items: []reconcile.Item{
				item(day("2025-06-01"), day("2026-06-01"), "addon_yearly", "price_1RaddonYear0071"),
				item(day("2025-12-01"), day("2026-01-01"), "pro_monthly", "price_1RproMonth0071"),
			}},
		{ID: "sub_1RpausedOld0070", Status: "active", Created: day("2025-01-10"), CollectionPaused: true,
			Items: []reconcile.Item{item(day("2025-12-10"), day("2026-01-10"), "pro_monthly", "price_1RproMonth0071")}},
	}, subs)

	t.Run("Deleted", func(t *testing.T) {
		cust, err := customerOfJSON([]byte(`{"id":"cus_gone","object":"customer","deleted":true}`), "user_id")
		require.NoError(t, err)
		require.True(t, cust.deleted)
	})
	t.Run("HasMoreIsIncomplete", func(t *testing.T) {
		cust, err := customerOfJSON([]byte(`{"id":"cus_m","subscriptions":{"object":"list","data":[{"id":"sub_1","status":"active"}],"has_more":true}}`), "user_id")
		require.NoError(t, err)
		require.False(t, cust.complete)
	})
	t.Run("NotExpandedIsIncomplete", func(t *testing.T) {
		cust, err := customerOfJSON([]byte(`{"id":"cus_n","subscriptions":"oops"}`), "user_id")
		require.NoError(t, err)
		require.False(t, cust.complete)
		cust, err = customerOfJSON([]byte(`{"id":"cus_n"}`), "user_id")
		require.NoError(t, err)
		require.False(t, cust.complete)
	})
	t.Run("EmptyIsComplete", func(t *testing.T) {
		cust, err := customerOfJSON([]byte(`{"id":"cus_e","subscriptions":{"object":"list","data":[],"has_more":false}}`), "user_id")
		require.NoError(t, err)
		require.True(t, cust.complete)
		require.Empty(t, cust.subs)
	})
	t.Run("ErrNoID", func(t *testing.T) {
		_, err := customerOfJSON([]byte(`{"object":"customer"}`), "user_id")
		require.True(t, reconcile.IsPermanent(err))
	})
	t.Run("ErrOneUnreadableSubscriptionFailsTheCustomer", func(t *testing.T) {
		_, err := subscriptionsOf([]object{cust.subs[0], objectOf([]byte(`{"id":"sub_b"}`))})
		require.True(t, reconcile.IsPermanent(err))
		require.ErrorContains(t, err, "sub_b: no status")
	})
}

// TestReadersAreLenient pins what the readers accept of bytes that are
// JSON but not as Stripe writes it: only JSON that is not JSON at all, or a
// page that is not a list, fails; anything else leaves the odd field absent
// and reads the rest.
func TestReadersAreLenient(t *testing.T) {
	t.Parallel()
	customer := func(t *testing.T, raw string) customerJSON {
		t.Helper()
		cust, err := customerOfJSON([]byte(raw), "user_id")
		require.NoError(t, err)
		return cust
	}
	t.Run("RepeatedKeyLastWins", func(t *testing.T) {
		cust := customer(t, `{"id":"cus_a","id":"cus_b","metadata":{"user_id":"u1","user_id":"u2"}}`)
		require.Equal(t, "cus_b", cust.id)
		require.Equal(t, "u2", cust.userRef)
	})
	t.Run("InvalidUTF8IsReplaced", func(t *testing.T) {
		cust := customer(t, "{\"id\":\"cus_\xff\",\"email\":\"a\\ud800@example.com\"}")
		require.Equal(t, "cus_\uFFFD", cust.id)
		require.Equal(t, "a\uFFFD@example.com", cust.email)
	})
	t.Run("KeysMatchExactly", func(t *testing.T) {
		cust := customer(t, `{"id":"cus_a","ID":"cus_b","Email":"x@example.com"}`)
		require.Equal(t, "cus_a", cust.id)
		require.Empty(t, cust.email)
	})
	t.Run("WrongTypedContainersAreAbsent", func(t *testing.T) {
		cust := customer(t, `{"id":"cus_a","metadata":[1],"subscriptions":{"data":[7,{"id":"sub_1","status":"active","items":"x"}],"has_more":false}}`)
		require.Empty(t, cust.userRef)
		require.True(t, cust.complete)
		require.Len(t, cust.subs, 2)
		require.False(t, cust.subs[0].ID.ok, "a number where a subscription belongs is one with nothing in it")
		require.Nil(t, cust.subs[1].Items.Data)
		_, err := subscriptionsOf(cust.subs)
		require.ErrorContains(t, err, "no id")
	})
	t.Run("NotJSONIsAllAbsent", func(t *testing.T) {
		cust, err := customerOfJSON([]byte(`{"id":"cus_a","email":"a@example.com",`), "user_id")
		require.ErrorContains(t, err, "unreadable answer")
		require.False(t, reconcile.IsPermanent(err), "an answer cut short is no data Stripe holds: read it again")
		require.Equal(t, customerJSON{}, cust, "nothing read before the fault is kept")
		require.Equal(t, object{}, objectOf([]byte(`{"id":"sub_1","status":"active"} trailing`)))
	})
	t.Run("Page", func(t *testing.T) {
		customers, more, err := listPageOf[customerObject]([]byte(`{"object":"list","data":[{"id":"cus_1"},"x",{"id":"cus_2","deleted":"yes"}],"has_more":true}`))
		require.NoError(t, err)
		require.True(t, more)
		require.Len(t, customers, 3)
		require.Equal(t, "cus_1", customers[0].ID.s)
		require.False(t, customers[1].ID.ok)
		require.False(t, customers[2].Deleted.ok)
		for _, bad := range []string{`{"data":"x"}`, `{"data":{}}`, `[]`, `{"data":[],"has_more":1}`, `{"data":[`, `<html>`} {
			_, _, err := listPageOf[customerObject]([]byte(bad))
			require.Error(t, err, bad)
		}
		customers, more, err = listPageOf[customerObject]([]byte(`{"data":null}`))
		require.NoError(t, err)
		require.False(t, more)
		require.Empty(t, customers)
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

	status, ok := statusOf(objectOf(raw))
	require.True(t, ok)
	require.Equal(t, fixture.Status, status)

	start, end, ok := periodOf(objectOf(raw), itemsOf(objectOf(raw))[0])
	require.True(t, ok, "the item-level period must be found")
	require.Equal(t, item.CurrentPeriodStart, start.Unix())
	require.Equal(t, item.CurrentPeriodEnd, end.Unix())

	require.Contains(t, priceRefsOf(itemsOf(objectOf(raw))[0]), item.Price.ID)

	// stripe-mock's fixture is generated data: its item period ends before it
	// starts (end 976287773, start 1896570518 in v0.203.0). That must be a
	// permanent error saying so, never a subscription with a nonsense period.
	sub, err := subscriptionOf(raw)
	if end.After(start) {
		require.NoError(t, err)
		require.Equal(t, "sub_123", sub.ID)
		return
	}
	require.True(t, reconcile.IsPermanent(err))
	require.ErrorContains(t, err, "before it starts")
}

// FuzzReadSubscription feeds arbitrary bytes to the readers (a
// subscription, a customer, a page of the customer list): they must
// never panic, every failure must be permanent with a reason (but a
// customer answer that is not JSON at all: transient), and what they
// return holds no made-up data: an id and status, periods that are both
// set and ordered or both zero, quantities never negative.
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
	f.Add([]byte(`{"object":"list","data":[{"id":"cus_1","subscriptions":{"data":[{"id":"sub_1","status":"active"}],"has_more":false}},7],"has_more":true}`))
	f.Add([]byte(`{"id":"sub_x","status":"active","current_period_start":9223372036854775807,"current_period_end":-1,"plan":{"id":1}}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		check := func(sub reconcile.Subscription) {
			require.NotEmpty(t, sub.ID)
			require.NotEmpty(t, sub.Status)
			for _, it := range sub.Items {
				require.GreaterOrEqual(t, it.Quantity, int64(0))
				require.Equal(t, it.PeriodStart.IsZero(), it.PeriodEnd.IsZero())
				if !it.PeriodStart.IsZero() {
					require.True(t, it.PeriodEnd.After(it.PeriodStart))
				}
			}
		}
		sub, err := subscriptionOf(raw)
		if err != nil {
			var perm *reconcile.PermanentError
			require.ErrorAs(t, err, &perm)
			require.NotEmpty(t, perm.Reason)
		} else {
			check(sub)
		}
		if customers, _, err := listPageOf[customerObject](raw); err == nil {
			for _, o := range customers {
				if c, err := o.read("user_id"); err != nil {
					require.True(t, reconcile.IsPermanent(err))
				} else {
					require.NotEmpty(t, c.id)
				}
			}
		}
		cust, err := customerOfJSON(raw, "user_id")
		switch {
		case err != nil && !jsontext.Value(raw).IsValid(decoding):
			// Not JSON at all: an answer cut short, read again later.
			require.False(t, reconcile.IsPermanent(err))
			require.ErrorContains(t, err, "unreadable answer")
			return
		case err != nil:
			require.True(t, reconcile.IsPermanent(err))
			return
		}
		require.NotEmpty(t, cust.id)
		subs, err := subscriptionsOf(cust.subs)
		if err != nil {
			require.True(t, reconcile.IsPermanent(err))
			return
		}
		for _, sub := range subs {
			check(sub)
		}
	})
}

// BenchmarkReadCustomer is what the sweep pays per customer of a page: the
// customer object with its subscriptions expanded, read into subscriptions.
func BenchmarkReadCustomer(b *testing.B) {
	raw, err := os.ReadFile(filepath.Join("testdata", "customer_expanded_basil.json"))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		cust, err := customerOfJSON(raw, "user_id")
		if err != nil {
			b.Fatal(err)
		}
		if _, err := subscriptionsOf(cust.subs); err != nil {
			b.Fatal(err)
		}
	}
}

// itemsOf returns a subscription's embedded items (items.data[]).
func itemsOf(o object) []object { return o.Items.Data }

// TestCustomerKeyOf is the reader of whom a subscription or an invoice
// bills: its customer, else (Accounts v2) the Account billed as a
// customer; neither is absent.
func TestCustomerKeyOf(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, raw, want string
		ok              bool
	}{
		{"Customer", `{"customer":"cus_1"}`, "cus_1", true},
		{"CustomerExpanded", `{"customer":{"id":"cus_1","object":"customer"}}`, "cus_1", true},
		{"CustomerAccount_CustomerNull", `{"customer":null,"customer_account":"acct_1"}`, "acct_1", true},
		{"CustomerAccount_CustomerAbsent", `{"customer_account":"acct_1"}`, "acct_1", true},
		{"BothNamed_CustomerWins", `{"customer":"cus_1","customer_account":"acct_1"}`, "cus_1", true},
		{"CustomerEmpty_AccountRead", `{"customer":"","customer_account":"acct_1"}`, "acct_1", true},
		{"CustomerOfWrongType_AccountRead", `{"customer":7,"customer_account":"acct_1"}`, "acct_1", true},
		{"CustomerAccountNotAnAcctID", `{"customer":null,"customer_account":"cus_1"}`, "", false},
		{"CustomerAccountWithSlash", `{"customer_account":"acct_1/cus_2"}`, "", false},
		{"CustomerAccountOfWrongType", `{"customer_account":{"id":"acct_1"}}`, "", false},
		{"Neither", `{"customer":null,"customer_account":null}`, "", false},
		{"NotAnObject", `[]`, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := customerKeyOf(objectOf([]byte(tt.raw)))
			require.Equal(t, tt.ok, ok)
			require.Equal(t, tt.want, got)
		})
	}
	t.Run("RecordedShapeA", func(t *testing.T) {
		raw := readTestdata(t, "subscription_customer_account.json")
		got, ok := customerKeyOf(objectOf(raw))
		require.True(t, ok)
		require.Equal(t, "acct_1RbilledAsCustomer1", got)
		sub, err := subscriptionOf(raw)
		require.NoError(t, err, "the rest of the subscription reads as any other's")
		require.Equal(t, "sub_1RacctPro0001", sub.ID)
		require.Equal(t, []string{"pro_monthly", "price_1RbasilPro0001"}, sub.Items[0].PriceRefs)
	})
}
