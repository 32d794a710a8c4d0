package main

import (
	"bytes"
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	stripeapi "github.com/stripe/stripe-go/v82"

	stripemock "github.com/billsync/billsync/mocks/stripe"
	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/providers/stripe"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store"
	"github.com/billsync/billsync/store/storetest"
)

// supportEnv is billsync end to end for the support commands: the fake
// Stripe sends webhooks to the intake into a fresh database; `billsync
// resync/replay` run in-process with serve's environment pointed at both.
type supportEnv struct {
	t   *testing.T
	st  *store.Store
	sh  *testenv.Test
	ctx context.Context
}

func newSupportEnv(t *testing.T) *supportEnv {
	t.Helper()
	ctx := context.Background()
	url := storetest.URL(t)
	e := &supportEnv{t: t, ctx: ctx, st: storetest.OpenStore(t, url, store.Options{})}
	e.sh = testenv.ForTest(t, testenv.Stripe, testenv.Options{Store: e.st})
	t.Setenv("DATABASE_URL", url)
	t.Setenv("STRIPE_API_KEY", stripemock.DefaultAPIKey)
	t.Setenv("STRIPE_API_URL", e.sh.URL)
	t.Setenv("BILLSYNC_PLANS", "")
	return e
}

// billsync runs the command line in-process and returns its stdout.
func (e *supportEnv) billsync(args ...string) (string, error) {
	var out bytes.Buffer
	err := run(e.ctx, args, &out, io.Discard)
	return out.String(), err
}

// customer creates a customer with a user reference and an email,
// subscribed to price, and waits for its webhooks to be stored.
func (e *supportEnv) customer(userRef, email, price string) string {
	e.t.Helper()
	c, err := e.sh.Stripe.API.V1Customers.Create(e.ctx, &stripeapi.CustomerCreateParams{
		Email: stripeapi.String(email), Metadata: map[string]string{"user_id": userRef}})
	require.NoError(e.t, err)
	_, err = e.sh.Stripe.Subscribe(e.ctx, c.ID, price)
	require.NoError(e.t, err)
	require.NoError(e.t, e.sh.WaitDelivered(e.ctx))
	return c.ID
}

// drain runs a worker on provider until no job is due.
func (e *supportEnv) drain(provider reconcile.Provider, backoff ...time.Duration) {
	e.t.Helper()
	plans, err := loadPlans("")
	require.NoError(e.t, err)
	w, err := reconcile.NewWorker(reconcile.WorkerConfig{Store: e.st, Providers: []reconcile.Provider{provider},
		Plans: plans, Backoff: backoff})
	require.NoError(e.t, err)
	_, err = w.Drain(e.ctx)
	require.NoError(e.t, err)
}

// account is the customer's account as stored.
func (e *supportEnv) account(customer string) reconcile.Account {
	e.t.Helper()
	a, err := e.st.Account(e.ctx, "stripe", customer)
	require.NoError(e.t, err)
	return a
}

// state is what matters about a customer: plan, balance, grants, events.
func (e *supportEnv) state(customer string) string {
	e.t.Helper()
	a := e.account(customer)
	b, err := e.st.Balance(e.ctx, a.ID)
	require.NoError(e.t, err)
	var grants []string
	for _, g := range storetest.Grants(e.t, e.st, "stripe", customer) {
		grants = append(grants, fmt.Sprintf("{%s %d}", g.Plan, g.Delta))
	}
	return fmt.Sprintf("plan=%s status=%s balance=%d grants=[%s] events=%s", a.Plan, a.Status, b,
		strings.Join(grants, " "), strings.Join(e.eventStatuses(customer), ","))
}

// eventStatuses are the statuses of the customer's stored events, oldest
// first.
func (e *supportEnv) eventStatuses(customer string) []string {
	e.t.Helper()
	var out []string
	for _, ev := range storetest.CustomerEvents(e.t, e.st, "stripe", customer) {
		out = append(out, string(ev.Status))
	}
	return out
}

// lastLog is the newest reconcile_log row of customer: trigger actor result
// ("(null)" for no actor).
func (e *supportEnv) lastLog(customer string) string {
	e.t.Helper()
	var last *storetest.LogRow
	for _, l := range storetest.ReconcileLog(e.t, e.st) {
		if l.CustomerID == customer {
			last = &l
		}
	}
	require.NotNil(e.t, last, "no reconcile_log row of %s", customer)
	return last.Trigger + " " + cmp.Or(last.Actor, "(null)") + " " + string(last.Result)
}

// queued is the number of queue rows.
func (e *supportEnv) queued() int {
	e.t.Helper()
	return len(storetest.Queue(e.t, e.st))
}

// tables returns every table's row count and a digest of its rows.
func (e *supportEnv) tables() map[string]string { return storetest.Tables(e.t, e.st) }

// TestResyncHealsDrift: an account set wrong behind billsync's back is
// healed by a resync naming it each way a person can, through the real
// Stripe client at the fake, and the log says who asked.
func TestResyncHealsDrift(t *testing.T) {
	for _, by := range []string{"customer", "account", "user", "email"} {
		t.Run(by, func(t *testing.T) {
			e := newSupportEnv(t)
			cus := e.customer("u_ann", "Ann@Example.com", "price_pro")
			e.drain(e.sh.Stripe.Client)
			healthy := e.state(cus)
			require.Contains(t, healthy, "plan=pro status=active balance=500")
			a := e.account(cus)
			require.Equal(t, "ann@example.com", strings.ToLower(a.Email))

			storetest.DriftAccount(t, e.st, a.ID, "free", "") // drift
			arg := map[string]string{"customer": cus, "account": strconv.FormatInt(a.ID, 10), "user": "u_ann", "email": "ann@EXAMPLE.com"}[by]
			out, err := e.billsync("resync", "--"+by, arg)
			require.NoError(t, err, out)
			require.Contains(t, out, "plan     free → pro")
			require.Contains(t, out, "outcome: applied: plan set to pro")
			require.Equal(t, healthy, e.state(cus))
			require.Regexp(t, `^resync cli:\S+ applied$`, e.lastLog(cus))
			require.Zero(t, e.queued())
		})
	}
}

// TestResyncWithoutWebhook: a customer whose webhook never arrived has no
// account; a resync by customer id creates it, granted.
func TestResyncWithoutWebhook(t *testing.T) {
	e := newSupportEnv(t)
	cus := e.customer("u_bo", "bo@example.com", "price_team")
	storetest.LoseWebhooks(t, e.st, "stripe", cus)
	require.Equal(t, 0, storetest.Counts(t, e.st)["inbox_events"], "every webhook was lost")
	out, err := e.billsync("resync", "--user", "u_bo")
	require.ErrorIs(t, err, reconcile.ErrNotFound)
	require.ErrorContains(t, err, "use --customer")
	require.Empty(t, out)

	out, err = e.billsync("resync", "--customer", cus)
	require.NoError(t, err, out)
	require.Contains(t, out, "outcome: applied: account created on plan team")
	require.Contains(t, e.state(cus), "plan=team status=active balance=2000 grants=[{team 2000}]")
}

// TestResyncDryRunWritesNothing compares every table before and after a dry
// run; the output still shows the change a real run makes.
func TestResyncDryRunWritesNothing(t *testing.T) {
	e := newSupportEnv(t)
	cus := e.customer("u_cy", "cy@example.com", "price_pro")
	e.drain(e.sh.Stripe.Client)
	storetest.DriftAccount(t, e.st, e.account(cus).ID, "free", "canceled")
	// A second, unreconciled customer: the dry run of a customer with no
	// account and a pending event must not create either.
	fresh := e.customer("u_dee", "dee@example.com", "price_team")

	before := e.tables()
	out, err := e.billsync("resync", "--dry-run", "--email", "cy@example.com")
	require.NoError(t, err, out)
	require.Contains(t, out, "dry run (nothing written)")
	require.Contains(t, out, "plan     free → pro")
	require.Contains(t, out, "status   canceled → active")
	require.Contains(t, out, "outcome: would be applied: plan set to pro")

	out, err = e.billsync("resync", "--dry-run", "--customer", fresh)
	require.NoError(t, err, out)
	require.Contains(t, out, "outcome: would be applied: account created on plan team")
	require.Contains(t, out, "a grant would add +2000")
	require.Contains(t, out, "events answered: ")
	// A dry run still reads Stripe, and the reads count toward Stripe's
	// allocation: provider_reads is the one table it adds to.
	after := e.tables()
	require.NotEqual(t, before["provider_reads"], after["provider_reads"], "the dry run's reads are counted")
	delete(before, "provider_reads")
	delete(after, "provider_reads")
	require.Equal(t, before, after)

	// The real run does what the dry run said.
	out, err = e.billsync("resync", "--email", "cy@example.com")
	require.NoError(t, err, out)
	require.Contains(t, e.state(cus), "plan=pro status=active balance=500")
	require.NotEqual(t, before, e.tables())
}

// TestResyncAmbiguousAndUsage: a search that matches several accounts
// lists them; a command naming no customer, or two, is a usage error.
func TestResyncAmbiguousAndUsage(t *testing.T) {
	e := newSupportEnv(t)
	a := e.customer("u_same", "a@example.com", "price_pro")
	b := e.customer("u_same", "b@example.com", "price_free")
	e.drain(e.sh.Stripe.Client)
	_, err := e.billsync("resync", "--user", "u_same")
	require.ErrorIs(t, err, errAmbiguous)
	require.ErrorContains(t, err, a)
	require.ErrorContains(t, err, b)

	_, err = e.billsync("resync")
	require.ErrorIs(t, err, errUsage)
	_, err = e.billsync("resync", "--user", "u_same", "--email", "a@example.com")
	require.ErrorIs(t, err, errUsage)
}

// TestReplay: replaying an applied event changes nothing and says so; an
// unknown event is a clear error.
func TestReplay(t *testing.T) {
	e := newSupportEnv(t)
	cus := e.customer("u_eve", "eve@example.com", "price_pro")
	e.drain(e.sh.Stripe.Client)
	before := e.state(cus)
	require.Contains(t, before, "plan=pro status=active balance=500 grants=[{pro 500}]")
	events := storetest.CustomerEvents(t, e.st, "stripe", cus)
	require.NotEmpty(t, events)
	id, evt := strconv.FormatInt(events[0].ID, 10), events[0].EventID

	for _, ref := range []string{id, evt} {
		out, err := e.billsync("replay", ref)
		require.NoError(t, err, out)
		require.Contains(t, out, "replaying event "+id)
		require.Contains(t, out, "outcome: unchanged: no change: stripe says plan pro (active) now")
		require.Equal(t, before, e.state(cus))
		require.Regexp(t, `^replay cli:\S+ unchanged$`, e.lastLog(cus))
	}

	for _, ref := range []string{"999999", "evt_nope"} {
		_, err := e.billsync("replay", ref)
		require.ErrorIs(t, err, reconcile.ErrNotFound)
		require.ErrorContains(t, err, "no stored event")
	}
	_, err := e.billsync("replay")
	require.ErrorIs(t, err, errUsage)

	// An event that names no customer has nothing to replay.
	storetest.InsertEvent(t, e.st, storetest.EventRow{Provider: "stripe", DedupeKey: "evt_product", EventID: "evt_product",
		Type: "product.created", Payload: []byte(`{}`), Status: reconcile.EventIgnored, Outcome: "ignored: names no customer"})
	_, err = e.billsync("replay", "evt_product")
	require.ErrorContains(t, err, "names no customer, so there is nothing to replay")
	require.Equal(t, before, e.state(cus))
}

// TestResyncRefusesAHeldCustomer: while a worker holds the customer, a
// resync says so and leaves the request queued for that worker.
func TestResyncRefusesAHeldCustomer(t *testing.T) {
	e := newSupportEnv(t)
	cus := e.customer("u_gil", "gil@example.com", "price_pro")
	storetest.LeaseQueueRow(t, e.st, "stripe", cus, "host-1-worker-0", time.Hour)
	_, err := e.billsync("resync", "--customer", cus)
	require.ErrorIs(t, err, reconcile.ErrHeld)
	require.ErrorContains(t, err, "held by host-1-worker-0")
	q := storetest.QueueRowOf(t, e.st, "stripe", cus)
	require.Equal(t, "host-1-worker-0 resync", q.LockedBy+" "+q.Trigger)
	require.Zero(t, storetest.Counts(t, e.st)["accounts"])
}

// TestSupportHelp: --help on each support command prints its usage and
// exits 0.
func TestSupportHelp(t *testing.T) {
	for _, cmd := range []string{"resync", "replay"} {
		err := run(context.Background(), []string{cmd, "--help"}, io.Discard, io.Discard)
		require.ErrorIs(t, err, flag.ErrHelp, cmd)
	}
}

// TestResyncRevivesDead: a customer whose reconciles died while Stripe was
// down is revived by a resync, which answers its dead events.
func TestResyncRevivesDead(t *testing.T) {
	e := newSupportEnv(t)
	cus := e.customer("u_fay", "fay@example.com", "price_pro")
	e.sh.Stripe.Fake.SetFaults(stripemock.Faults{Error5xxRate: 1})
	down, err := e.sh.Stripe.NewClient(testenv.FastStripe(stripe.Config{RetryMax: -1}))
	require.NoError(t, err)
	e.drain(down, 0) // one retry, then dead
	require.Equal(t, "dead", storetest.QueueRowOf(t, e.st, "stripe", cus).Status)
	require.Equal(t, []string{"dead"}, slices.Compact(slices.Sorted(slices.Values(e.eventStatuses(cus)))))

	// Still down: the resync fails, says why, and leaves the customer queued.
	out, err := e.billsync("resync", "--customer", cus)
	require.ErrorIs(t, err, reconcile.ErrNotReconciled)
	require.Contains(t, out, "outcome: retry: ")
	require.Equal(t, "pending", storetest.QueueRowOf(t, e.st, "stripe", cus).Status)
	require.Regexp(t, `^resync cli:\S+ retry$`, e.lastLog(cus))

	e.sh.Stripe.Fake.SetFaults(stripemock.Faults{})
	out, err = e.billsync("resync", "--customer", cus)
	require.NoError(t, err, out)
	require.Contains(t, out, "outcome: applied: account created on plan pro")
	require.Contains(t, out, "events answered: ")
	require.Contains(t, e.state(cus), "plan=pro status=active balance=500 grants=[{pro 500}] events=applied")
	require.NotContains(t, e.state(cus), "dead")
	require.Zero(t, e.queued())
	require.Contains(t, e.eventStatuses(cus), string(reconcile.EventApplied))
	require.False(t, strings.Contains(e.lastLog(cus), "worker"))
}

// TestResyncHelpListsItsFlags: resync's help lists what reconciling one
// customer uses, and none of the sweep's flags, which it once listed
// (bound with the provider's flags).
func TestResyncHelpListsItsFlags(t *testing.T) {
	flags := func(cmd string) []string {
		var names []string
		for line := range strings.Lines(runBillsync(t, cmd+" --help")) {
			if name, ok := strings.CutPrefix(line, "  -"); ok {
				name, _, _ = strings.Cut(strings.TrimSpace(name), " ")
				names = append(names, name)
			}
		}
		return names
	}
	resync := flags("resync")
	for _, f := range []string{"customer", "account", "user", "email", "provider", "dry-run", "data-dir", "db-timeout",
		"stripe-api-url", "stripe-rate", "user-ref-key", "kinde-domain", "kinde-rate", "stripe-entitlements", "plans"} {
		require.Contains(t, resync, f, "resync --help")
	}
	for _, f := range []string{"sweep-parallel", "kinde-sweep-pace", "sweep-schedule", "workers", "addr"} {
		require.NotContains(t, resync, f, "resync --help lists a flag resync does not use")
	}
	for _, cmd := range []string{"sweep", "serve"} {
		require.Subset(t, flags(cmd), []string{"sweep-parallel", "kinde-sweep-pace"}, cmd+" --help")
	}
}
