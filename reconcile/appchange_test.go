package reconcile

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestChangeOf(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 11, 3, 0, 0, 0, 0, time.UTC)
	free := AccountState{Account: Account{ID: 7, Provider: "stripe", CustomerID: "cus_1", UserRef: "u1", Plan: "free",
		Status: "active", PeriodStart: start, PeriodEnd: start.AddDate(0, 1, 0), ObservedAt: start}, Balance: 10}
	with := func(f func(*AccountState)) AccountState { s := free; f(&s); return s }
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
	} {
		t.Run(tc.name, func(t *testing.T) {
			ch, told := ChangeOf(tc.before, tc.after, nil, Why{Trigger: "webhook"})
			require.Equal(t, tc.told, told)
			require.Equal(t, tc.changed, ch.Changed)
			require.Equal(t, tc.before == nil, ch.Created)
			require.Equal(t, time.UTC, ch.After.PeriodStart.Location(), "times told in UTC")
			require.Equal(t, []string{}, ch.Why.EventIDs, "an empty list, not null")
			require.Equal(t, AppChangeType, ch.Type)
			require.Equal(t, int64(7), ch.AccountID)
		})
	}
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
