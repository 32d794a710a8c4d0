package reconcile_test

import (
	"context"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	stripeapi "github.com/stripe/stripe-go/v82"

	stripemock "github.com/billsync/billsync/mocks/stripe"
	"github.com/billsync/billsync/mocks/stripe/stripetest"
	"github.com/billsync/billsync/providers/stripe"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store"
	"github.com/billsync/billsync/store/storetest"
)

func TestMain(m *testing.M) {
	if os.Getenv(workerProcEnv) != "" {
		os.Exit(runWorkerProcess())
	}
	os.Exit(storetest.Main(m))
}

// harness is billsync end to end in one test: the fake Stripe sends signed
// webhooks to billsync's real intake, which stores them in a fresh database;
// workers fetch through the real Stripe client pointed at the fake.
type harness struct {
	t        testingT
	sh       *stripetest.Harness
	fake     *stripemock.Server
	fakeURL  string
	sc       *stripeapi.Client // drives the fake, as the app or the Stripe dashboard would
	st       *store.Store
	dbURL    string
	client   *stripe.Client
	plans    *reconcile.Plans
	outcomes chan reconcile.Outcome
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	return newHarnessWith(t, t.Cleanup, stripemock.Options{})
}

// newHarnessWith registers its teardown with cleanup (for property checks,
// which must not hold every check's connections until the test ends).
func newHarnessWith(t *testing.T, cleanup func(func()), fakeOpts stripemock.Options) *harness {
	t.Helper()
	h := &harness{t: t, plans: examplePlans(t), outcomes: make(chan reconcile.Outcome, 100000)}
	h.dbURL = storetest.URL(t)
	st, err := store.Open(context.Background(), h.dbURL, store.Options{})
	require.NoError(t, err)
	cleanup(st.Close)
	h.st = st

	h.sh, err = stripetest.New(stripetest.Options{Store: st, Fake: fakeOpts, Client: stripetest.Fast(stripe.Config{})})
	require.NoError(t, err)
	cleanup(h.sh.Close)
	h.fake, h.fakeURL, h.sc, h.client = h.sh.Fake, h.sh.URL, h.sh.API, h.sh.Client
	return h
}

// newClient returns billsync's Stripe client on the fake, with fast retries.
func (h *harness) newClient(cfg stripe.Config) *stripe.Client {
	h.t.Helper()
	c, err := h.sh.NewClient(stripetest.Fast(cfg))
	require.NoError(h.t, err)
	return c
}

func (h *harness) worker(cfg reconcile.WorkerConfig) *reconcile.Worker {
	cfg.Store = h.st
	cfg.Plans = h.plans
	if cfg.Providers == nil {
		cfg.Providers = []reconcile.Provider{h.client}
	}
	cfg.OnOutcome = func(_ reconcile.Job, o reconcile.Outcome) { h.outcomes <- o }
	w, err := reconcile.NewWorker(cfg)
	require.NoError(h.t, err)
	return w
}

func (h *harness) customer(userRef string) string {
	h.t.Helper()
	id, err := h.sh.Customer(context.Background(), userRef)
	require.NoError(h.t, err)
	return id
}

func (h *harness) subscribe(customerID, price string) *stripeapi.Subscription {
	h.t.Helper()
	sub, err := h.sh.Subscribe(context.Background(), customerID, price)
	require.NoError(h.t, err)
	return sub
}

func (h *harness) changePrice(sub *stripeapi.Subscription, price string) {
	h.t.Helper()
	require.NoError(h.t, h.sh.ChangePrice(context.Background(), sub, price))
}

func (h *harness) cancel(sub *stripeapi.Subscription) {
	h.t.Helper()
	_, err := h.sc.V1Subscriptions.Cancel(context.Background(), sub.ID, nil)
	require.NoError(h.t, err)
}

// delivered waits until the fake has sent every webhook.
func (h *harness) delivered() {
	h.t.Helper()
	require.NoError(h.t, h.sh.WaitDelivered(context.Background()))
}

// customerState is what matters about one customer after reconciling.
type customerState struct {
	Plan    string
	Status  string
	Balance int64
	Grants  int
	Events  map[string]int // event status → count
}

func (h *harness) state(customerID string) customerState {
	h.t.Helper()
	return stateOf(h.t, h.st, "stripe", customerID)
}

// stateOf reads what matters about one customer of provider after
// reconciling: plan, status, balance, grants and its events by status.
func stateOf(t testingT, st *store.Store, provider, customer string) customerState {
	t.Helper()
	ctx := context.Background()
	s := customerState{Events: map[string]int{}}
	a, err := st.Account(ctx, provider, customer)
	if err == nil {
		s.Plan, s.Status = a.Plan, a.Status
		s.Balance, err = st.Balance(ctx, a.ID)
		require.NoError(t, err)
		require.NoError(t, storetest.LegacyPool(st).QueryRow(ctx, `SELECT count(*) FROM ledger WHERE account_id = $1 AND kind = 'grant'`, a.ID).Scan(&s.Grants))
	}
	rows, err := storetest.LegacyPool(st).Query(ctx, `SELECT status, count(*) FROM inbox_events WHERE provider = $1 AND customer_id = $2 GROUP BY status`, provider, customer)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var status string
		var n int
		require.NoError(t, rows.Scan(&status, &n))
		s.Events[status] = n
	}
	require.NoError(t, rows.Err())
	return s
}

// largestGrant returns the largest allowance among the plans granted in
// the customer's current period. Grants top up, so the period's balance
// must equal it: a double grant would show as a larger balance.
func (h *harness) largestGrant(customerID string) int64 {
	h.t.Helper()
	return largestGrantOf(h.t, h.st, h.plans, "stripe", customerID)
}

// largestGrantOf is largestGrant for a customer of any provider.
func largestGrantOf(t testingT, st *store.Store, plans *reconcile.Plans, provider, customer string) int64 {
	t.Helper()
	rows, err := storetest.LegacyPool(st).Query(context.Background(), `
		SELECT DISTINCT l.plan FROM ledger l JOIN accounts a ON a.id = l.account_id AND l.period_start = a.period_start
		WHERE a.provider = $1 AND a.customer_id = $2 AND l.kind = 'grant'`, provider, customer)
	require.NoError(t, err)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	var largest int64
	for _, name := range names {
		p, ok := plans.Named(name)
		require.True(t, ok, name)
		largest = max(largest, p.Allowance)
	}
	return largest
}

// outcomeTexts returns the outcomes recorded in reconcile_log for customer.
func (h *harness) outcomeTexts(customerID string) []string {
	h.t.Helper()
	rows, err := storetest.LegacyPool(h.st).Query(context.Background(), `SELECT result || ': ' || outcome FROM reconcile_log WHERE customer_id = $1 ORDER BY id`, customerID)
	require.NoError(h.t, err)
	var out []string
	for rows.Next() {
		var s string
		require.NoError(h.t, rows.Scan(&s))
		out = append(out, s)
	}
	require.NoError(h.t, rows.Err())
	return out
}

// testingT is what the harness asserts with: the test's *testing.T, or a
// property check's *rapid.T, so that a failure inside a property is
// shrunk and replayable instead of failing the outer test.
type testingT interface {
	require.TestingT
	Helper()
}
