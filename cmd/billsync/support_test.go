package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
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
	db  *pgx.Conn // for drifting state behind billsync's back, and for reading it
	ctx context.Context
}

func newSupportEnv(t *testing.T) *supportEnv {
	t.Helper()
	ctx := context.Background()
	url := storetest.URL(t)
	e := &supportEnv{t: t, ctx: ctx, st: storetest.OpenStore(t, url, store.Options{})}
	e.sh = testenv.ForTest(t, testenv.Stripe, testenv.Options{Store: e.st})
	db, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close(context.Background()) })
	e.db = db
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

func (e *supportEnv) query(sql string, args ...any) string {
	e.t.Helper()
	var s string
	require.NoError(e.t, e.db.QueryRow(e.ctx, sql, args...).Scan(&s), sql)
	return s
}

func (e *supportEnv) exec(sql string, args ...any) {
	e.t.Helper()
	_, err := e.db.Exec(e.ctx, sql, args...)
	require.NoError(e.t, err, sql)
}

// state is what matters about a customer: plan, balance, grants, events.
func (e *supportEnv) state(customer string) string {
	e.t.Helper()
	a, err := e.st.Account(e.ctx, "stripe", customer)
	require.NoError(e.t, err)
	b, err := e.st.Balance(e.ctx, a.ID)
	require.NoError(e.t, err)
	tally, err := e.st.Tally(e.ctx, "stripe", customer)
	require.NoError(e.t, err)
	return fmt.Sprintf("plan=%s status=%s balance=%d grants=%v events=%s", a.Plan, a.Status, b, tally.Grants,
		e.query(`SELECT coalesce(string_agg(status, ',' ORDER BY id), '') FROM inbox_events WHERE customer_id = $1`, customer))
}

// lastLog is the newest reconcile_log row of customer: trigger actor result.
func (e *supportEnv) lastLog(customer string) string {
	return e.query(`SELECT trigger || ' ' || coalesce(actor, '(null)') || ' ' || result FROM reconcile_log
		WHERE customer_id = $1 ORDER BY id DESC LIMIT 1`, customer)
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
			id := e.query(`SELECT id::text FROM accounts WHERE customer_id = $1`, cus)
			require.Equal(t, "ann@example.com", e.query(`SELECT lower(email) FROM accounts WHERE id = $1`, id))

			e.exec(`UPDATE accounts SET plan = 'free' WHERE id = $1`, id) // drift
			arg := map[string]string{"customer": cus, "account": id, "user": "u_ann", "email": "ann@EXAMPLE.com"}[by]
			out, err := e.billsync("resync", "--"+by, arg)
			require.NoError(t, err, out)
			require.Contains(t, out, "plan     free → pro")
			require.Contains(t, out, "outcome: applied: plan set to pro")
			require.Equal(t, healthy, e.state(cus))
			require.Regexp(t, `^resync cli:\S+ applied$`, e.lastLog(cus))
			require.Equal(t, "0", e.query(`SELECT count(*)::text FROM reconcile_queue`))
		})
	}
}

// TestResyncWithoutWebhook: a customer whose webhook never arrived has no
// account; a resync by customer id creates it, granted.
func TestResyncWithoutWebhook(t *testing.T) {
	e := newSupportEnv(t)
	cus := e.customer("u_bo", "bo@example.com", "price_team")
	e.exec(`DELETE FROM receipts`)
	e.exec(`DELETE FROM inbox_events`) // the webhook was lost
	e.exec(`DELETE FROM reconcile_queue`)
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
	e.exec(`UPDATE accounts SET plan = 'free', status = 'canceled' WHERE customer_id = $1`, cus)
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
	require.Equal(t, before, e.tables())

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
	id := e.query(`SELECT min(id)::text FROM inbox_events WHERE customer_id = $1`, cus)
	evt := e.query(`SELECT event_id FROM inbox_events WHERE id = $1`, id)

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
	e.exec(`INSERT INTO inbox_events (provider, dedupe_key, event_id, type, payload, status, outcome)
		VALUES ('stripe', 'evt_product', 'evt_product', 'product.created', '{}', 'ignored', 'ignored: names no customer')`)
	_, err = e.billsync("replay", "evt_product")
	require.ErrorContains(t, err, "names no customer, so there is nothing to replay")
	require.Equal(t, before, e.state(cus))
}

// TestResyncRefusesAHeldCustomer: while a worker holds the customer, a
// resync says so and leaves the request queued for that worker.
func TestResyncRefusesAHeldCustomer(t *testing.T) {
	e := newSupportEnv(t)
	cus := e.customer("u_gil", "gil@example.com", "price_pro")
	e.exec(`UPDATE reconcile_queue SET locked_by = 'host-1-worker-0', locked_until = now() + interval '1 hour' WHERE customer_id = $1`, cus)
	_, err := e.billsync("resync", "--customer", cus)
	require.ErrorIs(t, err, reconcile.ErrHeld)
	require.ErrorContains(t, err, "held by host-1-worker-0")
	require.Equal(t, "host-1-worker-0 resync", e.query(`SELECT locked_by || ' ' || trigger FROM reconcile_queue WHERE customer_id = $1`, cus))
	require.Equal(t, "0", e.query(`SELECT count(*)::text FROM accounts`))
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
	require.Equal(t, "dead", e.query(`SELECT status FROM reconcile_queue WHERE customer_id = $1`, cus))
	require.Equal(t, "dead", e.query(`SELECT string_agg(DISTINCT status, ',') FROM inbox_events WHERE customer_id = $1`, cus))

	// Still down: the resync fails, says why, and leaves the customer queued.
	out, err := e.billsync("resync", "--customer", cus)
	require.ErrorIs(t, err, reconcile.ErrNotReconciled)
	require.Contains(t, out, "outcome: retry: ")
	require.Equal(t, "pending", e.query(`SELECT status FROM reconcile_queue WHERE customer_id = $1`, cus))
	require.Regexp(t, `^resync cli:\S+ retry$`, e.lastLog(cus))

	e.sh.Stripe.Fake.SetFaults(stripemock.Faults{})
	out, err = e.billsync("resync", "--customer", cus)
	require.NoError(t, err, out)
	require.Contains(t, out, "outcome: applied: account created on plan pro")
	require.Contains(t, out, "events answered: ")
	require.Contains(t, e.state(cus), "plan=pro status=active balance=500 grants=[{pro 500}] events=applied")
	require.NotContains(t, e.state(cus), "dead")
	require.Equal(t, "0", e.query(`SELECT count(*)::text FROM reconcile_queue`))
	n, err := strconv.Atoi(e.query(`SELECT count(*)::text FROM inbox_events WHERE customer_id = $1 AND status = 'applied'`, cus))
	require.NoError(t, err)
	require.Positive(t, n)
	require.False(t, strings.Contains(e.lastLog(cus), "worker"))
}
