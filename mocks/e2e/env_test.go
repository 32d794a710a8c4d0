package e2e_test

import (
	"context"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/store"
	"github.com/billsync/billsync/store/storetest"
)

func TestMain(m *testing.M) {
	if os.Getenv(workerProcEnv) != "" {
		os.Exit(runWorkerProcess())
	}
	os.Exit(storetest.Main(m))
}

// harness is billsync end to end in one test (testenv): the fake provider
// sends signed webhooks to billsync's real intake, which stores them in a
// fresh database; workers fetch through billsync's real client on the
// fake. It adds what these tests assert with.
type harness struct {
	*testenv.Test
	t     testingT
	dbURL string // the store's database, for a second process or replica
}

// newHarness is a harness on provider with its intake, closed at t's
// cleanup.
func newHarness(t *testing.T, provider string, opts testenv.Options) *harness {
	t.Helper()
	return newHarnessWith(t, t.Cleanup, provider, opts)
}

// newHarnessWith registers its teardown with cleanup (for property checks,
// which must not hold every check's connections until the test ends). The
// store is a fresh database's; opts.Store is set to it.
func newHarnessWith(t *testing.T, cleanup func(func()), provider string, opts testenv.Options) *harness {
	t.Helper()
	h := &harness{t: t, dbURL: storetest.URL(t)}
	st, err := store.Open(context.Background(), h.dbURL, store.Options{})
	require.NoError(t, err)
	cleanup(st.Close)
	opts.Store = st
	env, err := testenv.New(provider, testenv.Fast(opts))
	require.NoError(t, err)
	cleanup(env.Close)
	h.Test = env.For(t)
	return h
}

// in returns the harness failing t instead (a property check's *rapid.T).
func (h *harness) in(t testingT) *harness {
	return &harness{Test: h.With(t), t: t, dbURL: h.dbURL}
}

// state reads what matters about one customer after reconciling.
func (h *harness) state(customer string) storetest.CustomerState {
	h.t.Helper()
	return storetest.Customer(h.t, h.Store, h.Provider, customer)
}

// largestGrant returns the largest allowance among the plans granted in
// the customer's current period. Grants top up, so the period's balance
// must equal it: a double grant would show as a larger balance.
func (h *harness) largestGrant(customer string) int64 {
	h.t.Helper()
	var largest int64
	for _, g := range storetest.Grants(h.t, h.Store, h.Provider, customer) {
		if !g.Current {
			continue
		}
		p, ok := h.Plans.Named(g.Plan)
		require.True(h.t, ok, g.Plan)
		largest = max(largest, p.Allowance)
	}
	return largest
}

// outcomeTexts returns the reconcile log's results and outcomes for
// customer, oldest first.
func (h *harness) outcomeTexts(customer string) []string {
	h.t.Helper()
	var out []string
	for _, l := range storetest.ReconcileLog(h.t, h.Store) {
		if l.CustomerID == customer {
			out = append(out, string(l.Result)+": "+l.Outcome)
		}
	}
	return out
}

// testingT is what the harness asserts with: the test's *testing.T, or a
// property check's *rapid.T, so that a failure inside a property is
// shrunk and replayable instead of failing the outer test.
type testingT interface {
	require.TestingT
	Helper()
	Fatalf(format string, args ...any)
}
