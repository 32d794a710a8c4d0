package reconcile_test

import (
	"context"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/mocks/mock"
	"github.com/billsync/billsync/reconcile"
)

func TestSampleClassOf(t *testing.T) {
	t.Parallel()
	jan := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	feb := jan.AddDate(0, 1, 0)
	base := reconcile.Account{ID: 1, Plan: "pro", Status: "active", PeriodStart: jan, PeriodEnd: feb,
		Email: "a@example.com", ObservedAt: jan, Features: []reconcile.Feature{{Key: "export", Source: "plan:pro"}}}
	with := func(f func(a *reconcile.Account)) reconcile.Account {
		a := base
		f(&a)
		return a
	}
	applied := func(after reconcile.Account, granted int64) reconcile.Outcome {
		return reconcile.Outcome{Result: reconcile.ResultApplied, Before: base, After: after, Granted: granted}
	}
	for name, tc := range map[string]struct {
		out     reconcile.Outcome
		unknown bool
		drifted bool
		class   string
	}{
		"Unchanged_Equal": {reconcile.Outcome{Result: reconcile.ResultUnchanged, Before: base, After: base}, false, false, ""},
		"Stale_Equal":     {reconcile.Outcome{Result: reconcile.ResultStale, Before: base, After: base}, false, false, ""},
		"Ignored_Equal":   {reconcile.Outcome{Result: reconcile.ResultIgnored, Before: base, After: base}, false, false, ""},
		"Plan":            {applied(with(func(a *reconcile.Account) { a.Plan = "team" }), 0), false, true, "plan"},
		// Every field differs: the first in the order wins.
		"PlanFirstOfAll": {applied(with(func(a *reconcile.Account) {
			a.Plan, a.Status, a.PeriodEnd, a.Features, a.Email = "team", "past_due", feb.AddDate(0, 1, 0), nil, "b@example.com"
		}), 100), false, true, "plan"},
		"StatusBeforePeriod": {applied(with(func(a *reconcile.Account) { a.Status, a.PeriodStart = "past_due", feb }), 10), false, true, "status"},
		"PeriodBeforeBalance": {applied(with(func(a *reconcile.Account) { a.PeriodStart, a.PeriodEnd = feb, feb.AddDate(0, 1, 0) }), 500),
			false, true, "period"},
		"BalanceBeforeFeatures": {applied(with(func(a *reconcile.Account) { a.Features = nil }), 490), false, true, "balance"},
		"Features":              {applied(with(func(a *reconcile.Account) { a.Features = nil }), 0), false, true, "features"},
		"Entitlements_Features": {applied(with(func(a *reconcile.Account) {
			a.Entitlements = []reconcile.Entitlement{{Key: "export"}}
		}), 0), false, true, "features"},
		"OnlyLedgerMoved_Balance": {applied(base, 0), false, true, "balance"},
		"Email_Other":             {applied(with(func(a *reconcile.Account) { a.Email = "b@example.com" }), 0), false, true, "other"},
		"Unknown_Missing":         {reconcile.Outcome{Result: reconcile.ResultIgnored}, true, true, "missing"},
	} {
		t.Run(name, func(t *testing.T) {
			drifted, class := reconcile.SampleClassOf(tc.out, tc.unknown)
			require.Equal(t, tc.drifted, drifted)
			require.Equal(t, tc.class, class)
		})
	}
}

func TestSampleSize(t *testing.T) {
	t.Parallel()
	minutes := reconcile.ReadWindow.Minutes() // 43,200
	for name, tc := range map[string]struct {
		share float64
		b     reconcile.SampleBudget
		want  float64
	}{
		"Off":         {0, reconcile.SampleBudget{Rate: 100}, 0},
		"RateOnly":    {0.05, reconcile.SampleBudget{Rate: 100}, 300},                     // 0.05 × 100/s × 60 s
		"RateOnly_2R": {0.05, reconcile.SampleBudget{Rate: 25, ReadsPerAccount: 2}, 37.5}, // entitlements: two reads an account
		// serve's default: 10,000 reads a month, nothing read yet.
		"MinAllocation": {0.05, reconcile.SampleBudget{Rate: 100, Allocation: 10_000}, 0.05 * 10_000 / minutes},
		// What the allocation leaves: 50M − 20M projected.
		"Left": {0.05, reconcile.SampleBudget{Rate: 100, Allocation: 50e6, Projected: 20e6}, 0.05 * 30e6 / minutes},
		// A large allocation: the rate binds.
		"RateBinds": {0.05, reconcile.SampleBudget{Rate: 25, Allocation: 1e9}, 75},
		"Spent":     {0.05, reconcile.SampleBudget{Rate: 100, Allocation: 10_000, Projected: 12_000}, 0},
		"Unknown":   {0.05, reconcile.SampleBudget{}, 1},
	} {
		t.Run(name, func(t *testing.T) {
			require.InDelta(t, tc.want, reconcile.SampleSize(tc.share, tc.b), 1e-9)
		})
	}
}

// sampleFixture is a Sampler on fakes: every account previews unchanged,
// or drifted when named in drift; picks and records are kept.
type sampleFixture struct {
	budget   reconcile.SampleBudget
	accounts int
	picks    []int // n of each PickSample
	recorded []reconcile.Sample
	previews int
}

func (f *sampleFixture) sampler(t *testing.T, share float64, drift map[string]bool) *reconcile.Sampler {
	t.Helper()
	st := &mock.OnDemandStore{
		Store: mock.Store{NowFn: func(context.Context) (time.Time, error) { return time.Now(), nil }},
		PreviewFn: func(_ context.Context, job reconcile.Job, _ time.Time, _ reconcile.Decider) (reconcile.Outcome, error) {
			f.previews++
			require.Equal(t, reconcile.TriggerSample, job.Trigger)
			before := reconcile.Account{Plan: "pro", ObservedAt: time.Unix(1, 0)}
			if drift[job.CustomerID] {
				return reconcile.Outcome{Result: reconcile.ResultApplied, Before: before, After: reconcile.Account{Plan: "team"}}, nil
			}
			return reconcile.Outcome{Result: reconcile.ResultUnchanged, Before: before, After: before}, nil
		},
	}
	w := newUnitWorker(t, reconcile.WorkerConfig{Store: st, Providers: []reconcile.Provider{stripeFake(liveSnapshot)}})
	ss := &mock.SampleStore{
		PickSampleFn: func(_ context.Context, _ string, n, recent int) ([]reconcile.SampleAccount, error) {
			require.LessOrEqual(t, recent, n)
			require.GreaterOrEqual(t, recent, n/2)
			f.picks = append(f.picks, n)
			var out []reconcile.SampleAccount
			for i := range min(n, f.accounts) {
				out = append(out, reconcile.SampleAccount{ID: int64(i + 1), CustomerID: "cus_" + strconv.Itoa(i+1)})
			}
			return out, nil
		},
		RecordSamplesFn: func(_ context.Context, samples []reconcile.Sample) error {
			f.recorded = append(f.recorded, samples...)
			return nil
		},
	}
	s, err := reconcile.NewSampler(reconcile.SamplerConfig{Provider: "stripe", Worker: w, Store: ss, Share: share,
		Budget: func() reconcile.SampleBudget { return f.budget }})
	require.NoError(t, err)
	return s
}

func TestSamplerSizeRespectsShare(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("RateBinds", func(t *testing.T) {
		// 10 requests/s × 60 s × 0.1 = 60 accounts a minute; the
		// allocation leaves far more.
		f := &sampleFixture{budget: reconcile.SampleBudget{Rate: 10, Allocation: 1e12}, accounts: 1000}
		s := f.sampler(t, 0.1, nil)
		compared := 0
		for range 3 {
			r, err := s.Round(ctx)
			require.NoError(t, err)
			compared += r.Compared
		}
		require.Equal(t, 181, compared)
		require.Equal(t, []int{61, 60, 60}, f.picks, "the new leader's credit of one, then the share")
		require.Equal(t, 181, f.previews)
	})
	t.Run("AllocationBinds_CarriesTheRest", func(t *testing.T) {
		// 10,000 reads a month × 0.05 ÷ 43,200 minutes ≈ 0.0116 a minute:
		// one account about every 86 minutes, never one a minute.
		f := &sampleFixture{budget: reconcile.SampleBudget{Rate: 100, Allocation: 10_000}, accounts: 1000}
		s := f.sampler(t, 0.05, nil)
		const rounds = 1000
		for range rounds {
			_, err := s.Round(ctx)
			require.NoError(t, err)
		}
		want := int(math.Floor(1 + rounds*0.05*10_000/reconcile.ReadWindow.Minutes()))
		require.Equal(t, want, f.previews, "1 + 1000 minutes × 0.0116")
		require.Len(t, f.picks, want, "rounds the credit does not pay for pick nothing")
	})
	t.Run("AdaptsToTheBudget", func(t *testing.T) {
		f := &sampleFixture{budget: reconcile.SampleBudget{Rate: 10, Allocation: 1e12}, accounts: 1000}
		s := f.sampler(t, 0.1, nil)
		_, err := s.Round(ctx)
		require.NoError(t, err)
		f.budget.Rate = 5 // another replica joined: half the rate
		_, err = s.Round(ctx)
		require.NoError(t, err)
		f.budget.Projected = f.budget.Allocation // the allocation spent
		_, err = s.Round(ctx)
		require.NoError(t, err)
		require.Equal(t, []int{61, 30}, f.picks)
	})
}

func TestSamplerRecordsDriftedOnce(t *testing.T) {
	t.Parallel()
	f := &sampleFixture{budget: reconcile.SampleBudget{Rate: 10, Allocation: 1e12}, accounts: 12}
	var seen []reconcile.Sample
	// A dozen accounts, 60 a minute: every one is read, cus_7 drifted.
	r, err := f.sampler(t, 0.1, map[string]bool{"cus_7": true}).Round(context.Background())
	require.NoError(t, err)
	require.Equal(t, 12, r.Compared)
	require.Equal(t, 1, r.Drifted)
	for _, sm := range f.recorded {
		if sm.Drifted {
			seen = append(seen, sm)
		}
	}
	require.Equal(t, []reconcile.Sample{{Provider: "stripe", CustomerID: "cus_7", AccountID: 7, Drifted: true, Class: "plan"}}, seen)
}
