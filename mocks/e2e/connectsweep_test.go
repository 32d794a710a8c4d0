package e2e_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	stripeapi "github.com/stripe/stripe-go/v82"

	"github.com/billsync/billsync/app"
	stripemock "github.com/billsync/billsync/mocks/stripe"
	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/providers/stripe"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store/storetest"
	"github.com/billsync/billsync/store/storetest/tb"
)

// connectWorld is two connected accounts each holding a customer with the
// same id on Free, and a platform customer, all reconciled.
type connectWorld struct {
	*harness
	accounts []string
	keys     []string // billsync's key of each account's customer
	subs     []*stripeapi.Subscription
	platform string // the platform's own customer
}

func newConnectWorld(t *testing.T, accounts ...string) connectWorld {
	h := newHarness(t, testenv.Stripe, testenv.Options{Stripe: testenv.StripeOptions{
		Connect: reconcile.ConnectPolicy{Mode: reconcile.ConnectAll}}})
	w := connectWorld{harness: h, accounts: accounts}
	for _, a := range accounts {
		h.ConnectedAccount(a)
		w.keys = append(w.keys, h.ConnectedCustomer(a, "cus_same", "u_same_"+a))
		w.subs = append(w.subs, h.ConnectedSubscribe(a, "cus_same", "price_free"))
	}
	w.platform = h.Customer("u_platform")
	h.Subscribe(w.platform, "price_free")
	h.Delivered()
	h.Drain(h.Worker(reconcile.WorkerConfig{Name: "w", Concurrency: 4, Backoff: []time.Duration{time.Millisecond}}))
	for _, key := range append([]string{w.platform}, w.keys...) {
		require.Equal(t, "free", h.state(key).Plan, key)
	}
	return w
}

// drift moves every account's customer to Pro at the fake with every
// webhook lost: only a sweep can tell.
func (w connectWorld) drift(t *testing.T) {
	for i, a := range w.accounts {
		require.NoError(t, w.Stripe.Fake.Account(a).SetFaults(stripemock.Faults{DropRate: 1}))
		w.ConnectedChangePrice(a, w.subs[i], "price_pro")
	}
	w.Delivered()
	for _, key := range w.keys {
		require.Equal(t, "free", w.state(key).Plan, "%s: the change reached billsync without a sweep", key)
	}
}

// platformSweeper is the Stripe sweeper serve builds.
func (w connectWorld) platformSweeper(t *testing.T) *reconcile.Sweeper {
	sw, err := reconcile.NewSweeper(reconcile.SweeperConfig{Store: w.Store, Provider: stripe.Provider,
		Lister: w.Stripe.Client, Plans: w.Plans})
	require.NoError(t, err)
	return sw
}

// accountSweeper is serve's builder of a connected account's sweeper
// (app.AccountSweeper), every account served.
func accountSweeper(platform *reconcile.Sweeper, client *stripe.Client) func(string) (*reconcile.Sweeper, error) {
	return app.AccountSweeper(app.Config{StripeConnect: reconcile.ConnectPolicy{Mode: reconcile.ConnectAll}},
		app.Providers{Stripe: client}, []*reconcile.Sweeper{platform})
}

// TestConnectSweepOfOneAccount: a sweep of one connected account heals its
// drift and never reads another's. Two accounts hold a customer with the
// same id, both drifted (webhooks lost); the sweep of the first lists it on
// its behalf, heals its customer alone, and reads nothing of the second
// account or of the platform's, nor queues their customers as unswept.
// Its runs are its own: its first run is its import, the platform's
// import is still to come, and the next run of the account is a sweep.
func TestConnectSweepOfOneAccount(t *testing.T) {
	ctx := context.Background()
	w := newConnectWorld(t, "acct_sweep_a", "acct_sweep_b")
	a, b := w.accounts[0], w.accounts[1]
	sw, err := accountSweeper(w.platformSweeper(t), w.Stripe.Client)(a)
	require.NoError(t, err)

	rep, err := sw.Run(ctx)
	require.NoError(t, err)
	require.Equal(t, reconcile.RunImport, rep.Run.Kind, "an account's first run is its import")
	require.Equal(t, a, rep.Run.Account)
	imported, err := w.Store.Imported(ctx, stripe.Provider, "")
	require.NoError(t, err)
	require.False(t, imported, "an account's import is not the platform's")

	w.drift(t)
	w.Stripe.Fake.ResetUsage()
	rep, err = sw.Run(ctx)
	require.NoError(t, err)
	require.Equal(t, reconcile.RunSweep, rep.Run.Kind)
	require.Equal(t, 1, rep.Run.Seen, "the account's one customer listed")
	require.Equal(t, 1, rep.Run.Healed)
	require.Zero(t, rep.Enqueued, "no other account's customer queued as unswept")
	require.Len(t, rep.Healed, 1)
	require.Equal(t, w.keys[0], rep.Healed[0].CustomerID)

	require.Equal(t, "pro", w.state(w.keys[0]).Plan, "the swept account healed")
	require.Equal(t, "free", w.state(w.keys[1]).Plan, "the other account left to its own sweep")
	require.Equal(t, "free", w.state(w.platform).Plan)
	require.Positive(t, w.Stripe.Fake.Account(a).Usage().Reads)
	require.Zero(t, w.Stripe.Fake.Account(b).Usage().Requests, "the other account was read")
	require.Zero(t, w.Stripe.Fake.Account("").Usage().Requests, "the platform's own objects were read")
	for _, q := range storetest.Queue(t, w.Store) {
		require.True(t, strings.HasPrefix(q.CustomerID, a+"/"), "%s queued by another account's sweep", q.CustomerID)
	}
}

// TestConnectSweepsEachAccountOnceAcrossReplicas: two replicas schedule the
// connected accounts' sweeps at once. Every authorised account is swept
// (its first run is its import), once, whichever replica leads; a
// deauthorised account is never swept, and once it authorises the
// platform again it is swept at its turn, its drift written right.
func TestConnectSweepsEachAccountOnceAcrossReplicas(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := newConnectWorld(t, "acct_rep_a", "acct_rep_b", "acct_rep_c")
	a, c := w.accounts[0], w.accounts[2]
	now, err := w.Store.Now(ctx)
	require.NoError(t, err)
	var words []reconcile.Authorization
	for _, acct := range w.accounts {
		words = append(words, reconcile.Authorization{Account: acct, Authorized: acct != c, At: now})
	}
	require.NoError(t, w.Store.SaveAuthorizations(ctx, stripe.Provider, words))
	// The sweeps' import of a and b finds them right; the drift comes
	// after, for their next run.
	var replicas sync.WaitGroup
	views := make([]*reconcile.ConnectSweeps, 2)
	for i := range views {
		views[i], err = reconcile.NewConnectSweeps(reconcile.ConnectSweepsConfig{Provider: stripe.Provider,
			SweeperOf: accountSweeper(w.platformSweeper(t), w.Stripe.Client), Store: w.Store,
			Policy: reconcile.ConnectPolicy{Mode: reconcile.ConnectAll}, Every: time.Hour, Look: 50 * time.Millisecond})
		require.NoError(t, err)
		replicas.Go(func() { views[i].Run(ctx) })
	}
	defer replicas.Wait()
	runs := func(account string) []string {
		var statuses []string
		all, err := w.Store.SweepRuns(context.Background(), 100)
		require.NoError(t, err)
		for _, r := range all {
			if r.Account == account {
				statuses = append(statuses, r.Kind+" "+r.Status)
			}
		}
		return statuses
	}
	storetest.WaitFor(t, "the authorised accounts imported", func() bool {
		return slices.Contains(runs(a), "import succeeded") && slices.Contains(runs(w.accounts[1]), "import succeeded")
	})
	require.Empty(t, runs(c), "a deauthorised account is not swept")

	// c authorises the platform again, with drift: its first run imports
	// it, healing nothing, writing its customer right.
	w.drift(t)
	later, err := w.Store.Now(ctx)
	require.NoError(t, err)
	require.NoError(t, w.Store.SaveAuthorizations(ctx, stripe.Provider,
		[]reconcile.Authorization{{Account: c, Authorized: true, At: later}}))
	storetest.WaitFor(t, "the re-authorised account swept", func() bool {
		return slices.Contains(runs(c), "import succeeded")
	})
	require.Equal(t, "pro", w.state(w.keys[2]).Plan, "the re-authorised account's customer right")
	cancel()
	replicas.Wait()
	for _, acct := range w.accounts {
		require.Equal(t, []string{"import succeeded"}, runs(acct), "%s swept once an Every, whichever replica leads", acct)
	}
	var succeeded int64
	for _, v := range views {
		succeeded += v.View().Succeeded
	}
	require.EqualValues(t, 3, succeeded, "each account's run counted once, by the replica that ran it")
}

// BenchmarkConnectSweepRound measures one round of the connected
// accounts' sweeps with serve's defaults (ConnectSweeps' pool, the Stripe
// client at Stripe's live rate and 25/s per operation) at a fake Stripe
// answering each request after latency: accounts accounts of one
// customer each, every one swept (its first run, an import) once. The
// baseline, measured in the same run, is the platform's sweep of as many
// customers in one account: the ratio is what sweeping them account by
// account costs. 10,000 accounts is the 1,000 figure's rate times ten (a
// round is one run per account, in turn).
//
//	go test -run '^$' -bench ConnectSweepRound -benchtime 1x ./mocks/e2e/
func BenchmarkConnectSweepRound(b *testing.B) {
	const accounts = 1000
	for _, latency := range []time.Duration{50 * time.Millisecond, 300 * time.Millisecond} {
		b.Run("accounts=1000/latency="+latency.String(), func(b *testing.B) {
			for range b.N {
				perAccount := connectSweepRound(b, accounts, latency, true)
				oneAccount := connectSweepRound(b, accounts, latency, false)
				b.ReportMetric(perAccount.Seconds(), "s/round")
				b.ReportMetric(float64(accounts)/perAccount.Seconds(), "accounts/s")
				b.ReportMetric(oneAccount.Seconds(), "s/platform-sweep")
				b.ReportMetric(perAccount.Seconds()/oneAccount.Seconds(), "x-platform")
				b.ReportMetric(10*perAccount.Seconds(), "s/round-10000")
			}
		})
	}
}

// connectSweepRound times the sweeps of n customers: one in each of n
// connected accounts (connected), or all n the platform's.
func connectSweepRound(b *testing.B, n int, latency time.Duration, connected bool) time.Duration {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := storetest.NewStore(b)
	fake := stripemock.New(stripemock.Options{})
	defer fake.Close()
	srv := httptest.NewServer(fake)
	defer srv.Close()
	all := reconcile.ConnectPolicy{Mode: reconcile.ConnectAll}
	now, err := st.Now(ctx)
	require.NoError(b, err)
	var words []reconcile.Authorization
	for i := range n {
		a := fake.Account("")
		if connected {
			a, err = fake.AddAccount(stripemock.AccountOptions{ID: fmt.Sprintf("acct_bench%05d", i)})
			require.NoError(b, err)
			words = append(words, reconcile.Authorization{Account: a.ID(), Authorized: true, At: now})
		}
		require.NoError(b, a.AddCustomer(fmt.Sprintf("cus_bench%05d", i), "", nil))
	}
	require.NoError(b, st.SaveAuthorizations(ctx, stripe.Provider, words))
	fake.SetFaults(stripemock.Faults{Latency: latency})
	client, err := stripe.NewClient(stripe.Config{APIKey: stripemock.DefaultAPIKey, BaseURL: srv.URL,
		RateLimit: stripe.LiveRate, Connect: all})
	require.NoError(b, err)
	plans, err := reconcile.ParsePlans(reconcile.ExamplePlans)
	require.NoError(b, err)
	platform, err := reconcile.NewSweeper(reconcile.SweeperConfig{Store: st, Provider: stripe.Provider, Lister: client, Plans: plans})
	require.NoError(b, err)
	start := time.Now()
	if !connected {
		rep, err := platform.Run(ctx)
		require.NoError(b, err)
		require.Equal(b, n, rep.Run.Seen)
		return time.Since(start)
	}
	sweeps, err := reconcile.NewConnectSweeps(reconcile.ConnectSweepsConfig{Provider: stripe.Provider,
		SweeperOf: accountSweeper(platform, client), Store: st, Policy: all})
	require.NoError(b, err)
	done := make(chan struct{})
	go func() { defer close(done); sweeps.Run(ctx) }()
	tb.WaitUpTo(b, 30*time.Minute, "every account swept", func() bool { return sweeps.View().Succeeded >= int64(n) })
	took := time.Since(start)
	cancel()
	<-done
	require.Len(b, storetest.Accounts(b, st), n)
	return took
}

// TestAdminSweepsOneConnectedAccount: POST /admin/api/sweeps?stripe_account=
// on serve's assembly starts the sweep of that connected account alone,
// on its behalf: its customer written right, the other account's and the
// platform's untouched. An account not served, or not an acct_ id, is 400
// and nothing runs.
func TestAdminSweepsOneConnectedAccount(t *testing.T) {
	ctx := context.Background()
	w := newConnectWorld(t, "acct_admin_a", "acct_admin_b")
	w.drift(t)
	const token = "admin-token-for-the-test"
	cfg := app.Config{StripeAPIKey: stripemock.DefaultAPIKey, StripeAPIURL: w.URL, Workers: 1, AdminToken: token,
		StripeConnect: reconcile.ConnectPolicy{Mode: reconcile.ConnectListed, Listed: w.accounts[:1]}}
	a, err := app.New(ctx, cfg, app.Parts{Store: w.Store, Plans: w.Plans})
	require.NoError(t, err)
	srv := httptest.NewServer(a.Handler())
	defer srv.Close()
	runCtx, cancel := context.WithCancel(ctx)
	stop := a.Start(runCtx)
	defer func() { cancel(); require.NoError(t, stop(context.Background())) }()

	post := func(account string) (int, string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/admin/api/sweeps?stripe_account="+account, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(body)
	}
	for _, bad := range []string{w.accounts[1], "cus_1"} {
		code, body := post(bad)
		require.Equal(t, http.StatusBadRequest, code, body)
	}
	code, body := post(w.accounts[0])
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `"account":"acct_admin_a"`)
	storetest.WaitFor(t, "the account's sweep succeeded", func() bool {
		runs, err := w.Store.SweepRuns(ctx, 10)
		require.NoError(t, err)
		return len(runs) > 0 && runs[0].Account == w.accounts[0] && runs[0].Status == "succeeded"
	})
	runs, err := w.Store.SweepRuns(ctx, 10)
	require.NoError(t, err)
	require.Len(t, runs, 1, "only the account asked for was swept: %+v", runs)
	require.Equal(t, "pro", w.state(w.keys[0]).Plan, "its drift written right")
	require.Equal(t, "free", w.state(w.keys[1]).Plan, "the other account untouched")
}
