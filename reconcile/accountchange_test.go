package reconcile

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestAccountChangeOf(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 11, 3, 0, 0, 0, 0, time.UTC)
	free := AccountState{Account: Account{ID: 7, Provider: "stripe", CustomerID: "cus_1", UserRef: "u1", Plan: "free",
		Status: "active", PeriodStart: start, PeriodEnd: start.AddDate(0, 1, 0), ObservedAt: start}, Balance: 10}
	with := func(f func(*AccountState)) AccountState { s := free; f(&s); return s }
	metered := with(func(s *AccountState) { s.Meters = map[string]int64{"ai_credits": 1000} })
	exportOn := Feature{Key: "export", Type: FeatureBoolean, Source: "plan:pro"}
	exporting := with(func(s *AccountState) { s.Features = []Feature{exportOn} })
	paris, err := time.LoadLocation("Europe/Paris")
	require.NoError(t, err)

	for _, tc := range []struct {
		name    string
		before  *AccountState
		after   AccountState
		changed []string
		told    bool
	}{
		{"Nothing", &free, free, []string{}, false},
		{"OnlyObservedAtMoved", &free, with(func(s *AccountState) { s.ObservedAt = start.Add(time.Hour) }), []string{}, false},
		{"SameInstantOtherZone", &free, with(func(s *AccountState) { s.PeriodStart = start.In(paris) }), []string{}, false},
		{"Created", nil, free, []string{"provider", "customer_id", "user_ref", "plan", "status", "period_start", "period_end", "balance"}, true},
		{"Upgrade", &free, with(func(s *AccountState) { s.Plan, s.Balance = "pro", 500 }), []string{"plan", "balance"}, true},
		{"Renewed", &free, with(func(s *AccountState) {
			s.PeriodStart, s.PeriodEnd = s.PeriodEnd, s.PeriodEnd.AddDate(0, 1, 0)
		}), []string{"period_start", "period_end"}, true},
		{"Canceled", &free, with(func(s *AccountState) { s.Status, s.CancelAtPeriodEnd = "canceled", true }),
			[]string{"status", "cancel_at_period_end"}, true},
		{"Debit", &free, with(func(s *AccountState) { s.Balance = 6 }), []string{"balance"}, true},
		{"Email", &free, with(func(s *AccountState) { s.Email = "a@b.c" }), []string{"email"}, true},
		{"NoMetersEitherWay", &free, with(func(s *AccountState) { s.Meters = map[string]int64{} }), []string{}, false},
		{"MeterDebit", &metered, with(func(s *AccountState) { s.Meters = map[string]int64{"ai_credits": 950} }),
			[]string{"meters"}, true},
		{"MeterGranted", &free, metered, []string{"meters"}, true},
		{"FeatureGained", &free, with(func(s *AccountState) { s.Features = []Feature{exportOn} }), []string{"features"}, true},
		{"FeatureLost", &exporting, free, []string{"features"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ch, told := AccountChangeOf(tc.before, tc.after, nil, Why{Trigger: "webhook"})
			require.Equal(t, tc.told, told)
			require.Equal(t, tc.changed, ch.Changed)
			require.Equal(t, tc.before == nil, ch.Created)
			require.Equal(t, time.UTC, ch.After.PeriodStart.Location(), "times told in UTC")
			require.Equal(t, []string{}, ch.Why.EventIDs, "an empty list, not null")
			require.Equal(t, AccountChangeType, ch.Type)
			require.Equal(t, int64(7), ch.AccountID)
		})
	}
}

// TestChangeOfLedgerMoves: every move is listed with its meter; ledger
// is the default meter's alone, as version 1 had it, and absent when only
// a named meter moved.
func TestChangeOfLedgerMoves(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 11, 3, 1, 0, 0, 0, time.FixedZone("x", 3600))
	before := AccountState{Account: Account{ID: 7, Plan: "pro"}, Balance: 500, Meters: map[string]int64{"ai_credits": 1000}}
	def := LedgerMove{Kind: LedgerGrant, Key: "grant:7", Delta: 500, Plan: "pro", PeriodStart: start}
	named := LedgerMove{Meter: "ai_credits", Kind: LedgerUsage, Key: "usage.ai_credits:7:k", Delta: -50, PeriodStart: start}

	after := before
	after.Meters = map[string]int64{"ai_credits": 950}
	ch, told := AccountChangeOf(&before, after, []LedgerMove{named}, Why{})
	require.True(t, told)
	require.Nil(t, ch.Ledger, "ledger is the default meter's only")
	require.Equal(t, "ai_credits", ch.LedgerMoves[0].Meter)
	require.Equal(t, time.UTC, ch.LedgerMoves[0].PeriodStart.Location())
	require.Equal(t, start, named.PeriodStart, "the caller's moves are left as they were")

	ch, _ = AccountChangeOf(nil, after, []LedgerMove{def, named}, Why{})
	utc := func(m LedgerMove) LedgerMove { m.PeriodStart = m.PeriodStart.UTC(); return m }
	require.Equal(t, []LedgerMove{utc(def), utc(named)}, ch.LedgerMoves)
	require.Equal(t, def.Key, ch.Ledger.Key)
	require.Same(t, &ch.LedgerMoves[0], ch.Ledger)

	ch, _ = AccountChangeOf(nil, after, nil, Why{})
	require.Nil(t, ch.Ledger)
	require.Nil(t, ch.LedgerMoves, "absent when no row was written")
}

func TestParseChangeCursor(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]ChangeCursor{"": {}, "0-0": {}, "748-12": {748, 12}, "9223372036854775807-1": {1<<63 - 1, 1}} {
		got, err := ParseChangeCursor(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got)
		if in != "" {
			require.Equal(t, in, got.String())
		}
	}
	for _, bad := range []string{"12", "-", "a-1", "1-a", "1--2", "+1-2", "1-+2", "1-2-3", " 1-2", "9223372036854775808-1"} {
		_, err := ParseChangeCursor(bad)
		require.ErrorIs(t, err, ErrInvalid, bad)
	}
}

func FuzzParseChangeCursor(f *testing.F) {
	for _, s := range []string{"", "1-2", "748-12", "x", "-1--1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseChangeCursor(s)
		if err != nil {
			require.ErrorIs(t, err, ErrInvalid)
			return
		}
		if s != "" {
			back, err := ParseChangeCursor(c.String())
			require.NoError(t, err)
			require.Equal(t, c, back, "a parsed cursor survives a round trip")
		}
	})
}

// TestAccountChangeNamesTheConnectedAccount: the app is told which Stripe
// Connect account a change is of; the platform's own name none.
func TestAccountChangeNamesTheConnectedAccount(t *testing.T) {
	t.Parallel()
	for key, want := range map[string]string{"cus_1": "", Connected("acct_a", "cus_1"): "acct_a"} {
		ch, told := AccountChangeOf(nil, AccountState{Account: Account{ID: 1, Provider: "stripe", CustomerID: key, Plan: "free"}}, nil, Why{})
		require.True(t, told)
		require.Equal(t, want, ch.ConnectedAccount, key)
	}
}
