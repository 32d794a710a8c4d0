package e2e_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	stripeapi "github.com/stripe/stripe-go/v82"

	stripemock "github.com/billsync/billsync/mocks/stripe"
	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/providers/stripe"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store/storetest"
)

// The tests in this file walk each case of issue 8 end to end: the fake
// Stripe changes a customer the way Stripe does (on its own clock, which
// moves only when a test says so), its webhooks reach billsync's intake,
// and the real worker fetches through billsync's Stripe client and applies
// into PostgreSQL.

// caseStart is the fake clock's start in these tests: mid-month, so a
// subscription's period never starts where the calendar month does (the
// default plan's period), whatever the real date.
var caseStart = time.Date(2026, 11, 12, 10, 0, 0, 0, time.UTC)

const day = 24 * time.Hour

// newCaseHarness is a harness whose fake Stripe runs on a stopped clock.
func newCaseHarness(t *testing.T, opts stripemock.Options) (*harness, *stripemock.Clock) {
	t.Helper()
	clock := stripemock.NewStoppedClock(caseStart)
	opts.Clock = clock
	return newHarness(t, testenv.Stripe, testenv.Options{Stripe: testenv.StripeOptions{Fake: opts}}), clock
}

// settle delivers every webhook the fake owes and drains the queue.
func (h *harness) settle(w *reconcile.Worker) {
	h.t.Helper()
	h.Delivered()
	h.DrainAll(w, 0)
}

// account returns the customer's account row.
func (h *harness) account(customerID string) reconcile.Account {
	h.t.Helper()
	a, err := h.Store.Account(context.Background(), "stripe", customerID)
	require.NoError(h.t, err)
	return a
}

// grant is one grant row of the ledger.
type grant struct {
	Plan        string
	PeriodStart time.Time
	Delta       int64
}

// grants returns the customer's grant rows, oldest first.
func (h *harness) grants(customerID string) []grant {
	h.t.Helper()
	var out []grant
	for _, g := range storetest.Grants(h.t, h.Store, h.Provider, customerID) {
		out = append(out, grant{Plan: g.Plan, PeriodStart: g.PeriodStart, Delta: g.Delta})
	}
	return out
}

// resync queues the customer as an operator would and drains: a reconcile
// that no webhook asked for must not change what is already right.
func (h *harness) resync(w *reconcile.Worker, customerID string) {
	h.t.Helper()
	require.NoError(h.t, h.Store.Enqueue(context.Background(), "stripe", customerID, reconcile.TriggerResync))
	h.DrainAll(w, 0)
}

// itemStart returns the current period start of sub's item on price, as
// the fake says now.
func (h *harness) itemStart(subID, price string) time.Time {
	h.t.Helper()
	sub, err := h.Stripe.API.V1Subscriptions.Retrieve(context.Background(), subID, nil)
	require.NoError(h.t, err)
	for _, it := range sub.Items.Data {
		if it.Price.ID == price {
			return time.Unix(it.CurrentPeriodStart, 0).UTC()
		}
	}
	h.t.Errorf("subscription %s has no item on %s", subID, price)
	h.t.FailNow()
	return time.Time{}
}

// calendarMonth is the default plan's period: the database's month now.
func (h *harness) calendarMonth() time.Time {
	h.t.Helper()
	now, err := h.Store.Now(context.Background())
	require.NoError(h.t, err)
	y, m, _ := now.UTC().Date()
	return time.Date(y, m, 1, 0, 0, 0, 0, time.UTC)
}

func TestStripeDeletedCustomer(t *testing.T) {
	t.Parallel()
	h, _ := newCaseHarness(t, stripemock.Options{})
	w := h.Worker(reconcile.WorkerConfig{})
	cus := h.Customer("u_del")
	sub := h.Subscribe(cus, "price_pro")
	h.settle(w)
	require.Equal(t, storetest.CustomerState{Plan: "pro", Status: "active", Balance: 500, Grants: 1, Events: map[string]int{"applied": 3}}, h.state(cus))
	proStart := h.account(cus).PeriodStart

	_, err := h.Stripe.API.V1Customers.Delete(context.Background(), cus, nil)
	require.NoError(t, err)
	h.settle(w)

	// The default plan on the calendar month, granted its allowance there;
	// the Pro period's grant stays in the ledger, nothing is clawed back.
	s := h.state(cus)
	require.Equal(t, storetest.CustomerState{Plan: "free", Status: reconcile.StatusDeleted, Balance: 10, Grants: 2,
		Events: map[string]int{"applied": 5}}, s, "customer.deleted and customer.subscription.deleted applied too")
	a := h.account(cus)
	require.Empty(t, a.SubscriptionID, "no subscription is current")
	require.Equal(t, h.calendarMonth(), a.PeriodStart.UTC())
	require.Equal(t, []grant{{"pro", proStart.UTC(), 500}, {"free", h.calendarMonth(), 10}}, h.grants(cus))
	texts := h.outcomeTexts(cus)
	require.Regexp(t, `^applied: customer deleted at stripe: plan set to free, status active → deleted`, texts[len(texts)-1])
	sub, err = h.Stripe.API.V1Subscriptions.Retrieve(context.Background(), sub.ID, nil)
	require.NoError(t, err)
	require.Equal(t, stripeapi.SubscriptionStatusCanceled, sub.Status, "the fake canceled it, as Stripe does")

	// Seen again (a copy, a sweep): nothing more.
	h.resync(w, cus)
	require.Equal(t, 2, h.state(cus).Grants)
	texts = h.outcomeTexts(cus)
	require.Equal(t, "unchanged: no change: stripe says plan free (deleted) now, as already applied", texts[len(texts)-1])

	t.Run("NeverExisted", func(t *testing.T) {
		require.NoError(t, h.Store.Enqueue(context.Background(), "stripe", "cus_never_was", reconcile.TriggerResync))
		h.DrainAll(w, 0)
		_, err := h.Store.Account(context.Background(), "stripe", "cus_never_was")
		require.ErrorIs(t, err, reconcile.ErrNotFound, "no account is made for a customer Stripe never had")
		require.Equal(t, []string{"ignored: ignored: customer cus_never_was is unknown to stripe"}, h.outcomeTexts("cus_never_was"))
	})
}

// renewalFails subscribes a customer to Pro, reconciles, makes the card
// decline and moves the fake clock an hour past the period end: Stripe
// opens the new period, its invoice fails and the subscription goes
// past_due.
func renewalFails(t *testing.T, h *harness, clock *stripemock.Clock, w *reconcile.Worker) (cus string, sub *stripeapi.Subscription, paid time.Time) {
	t.Helper()
	cus = h.Customer("u_renew")
	sub = h.Subscribe(cus, "price_pro")
	h.settle(w)
	paid = h.account(cus).PeriodStart.UTC()
	require.Equal(t, []grant{{"pro", paid, 500}}, h.grants(cus))

	require.NoError(t, h.Stripe.Fake.SetCardFails(cus, true))
	end := time.Unix(sub.Items.Data[0].CurrentPeriodEnd, 0)
	clock.Advance(end.Sub(clock.Now()) + time.Hour)
	h.settle(w)
	return cus, sub, paid
}

func TestStripeFailedRenewal(t *testing.T) {
	t.Parallel()
	t.Run("PaidLater", func(t *testing.T) {
		t.Parallel()
		h, clock := newCaseHarness(t, stripemock.Options{})
		w := h.Worker(reconcile.WorkerConfig{})
		cus, sub, paid := renewalFails(t, h, clock, w)

		// past_due: the plan is kept with what it was granted, and the
		// unpaid period grants nothing.
		s := h.state(cus)
		require.Equal(t, "pro", s.Plan)
		require.Equal(t, "past_due", s.Status)
		require.EqualValues(t, 500, s.Balance)
		require.Equal(t, []grant{{"pro", paid, 500}}, h.grants(cus), "no grant before the renewal is paid")
		require.Equal(t, paid, h.account(cus).PeriodStart.UTC(), "the account stays on the period last granted")
		require.Equal(t, map[string]int{"applied": s.Events["applied"]}, s.Events, "every event answered as applied")
		texts := h.outcomeTexts(cus)
		require.Contains(t, texts[len(texts)-1], "is past_due: the period from")

		// The card is fixed and the open invoice paid: the new period is
		// granted, once, however often the customer is reconciled.
		require.NoError(t, h.Stripe.Fake.SetCardFails(cus, false))
		got, err := h.Stripe.API.V1Subscriptions.Retrieve(context.Background(), sub.ID, nil)
		require.NoError(t, err)
		inv, err := h.Stripe.API.V1Invoices.Pay(context.Background(), got.LatestInvoice.ID, nil)
		require.NoError(t, err)
		require.Equal(t, stripeapi.InvoiceStatusPaid, inv.Status)
		h.settle(w)
		renewed := h.itemStart(sub.ID, "price_pro")
		require.True(t, renewed.After(paid))
		s = h.state(cus)
		require.Equal(t, "pro", s.Plan)
		require.Equal(t, "active", s.Status)
		require.EqualValues(t, 500, s.Balance)
		require.Equal(t, renewed, h.account(cus).PeriodStart.UTC())
		h.resync(w, cus)
		require.Equal(t, []grant{{"pro", paid, 500}, {"pro", renewed, 500}}, h.grants(cus))
		require.Zero(t, h.state(cus).Events["pending"])
	})

	t.Run("UnpaidThenPaid", func(t *testing.T) {
		t.Parallel()
		h, clock := newCaseHarness(t, stripemock.Options{Dunning: stripemock.Dunning{Retries: []time.Duration{}, Final: "unpaid"}})
		w := h.Worker(reconcile.WorkerConfig{})
		cus, sub, paid := renewalFails(t, h, clock, w)

		// No retries: unpaid at once, which does not keep the plan.
		s := h.state(cus)
		require.Equal(t, "free", s.Plan)
		require.Equal(t, "unpaid", s.Status)
		require.EqualValues(t, 10, s.Balance)
		require.Equal(t, []grant{{"pro", paid, 500}, {"free", h.calendarMonth(), 10}}, h.grants(cus))

		require.NoError(t, h.Stripe.Fake.SetCardFails(cus, false))
		got, err := h.Stripe.API.V1Subscriptions.Retrieve(context.Background(), sub.ID, nil)
		require.NoError(t, err)
		_, err = h.Stripe.API.V1Invoices.Pay(context.Background(), got.LatestInvoice.ID, nil)
		require.NoError(t, err)
		h.settle(w)
		h.resync(w, cus)
		renewed := h.itemStart(sub.ID, "price_pro")
		s = h.state(cus)
		require.Equal(t, "pro", s.Plan)
		require.Equal(t, "active", s.Status)
		require.EqualValues(t, 500, s.Balance)
		require.Equal(t, []grant{{"pro", paid, 500}, {"free", h.calendarMonth(), 10}, {"pro", renewed, 500}}, h.grants(cus),
			"the paid renewal is granted once")
		require.Equal(t, map[string]int{"applied": s.Events["applied"]}, s.Events)
	})

	t.Run("CanceledAfterTheRetries", func(t *testing.T) {
		t.Parallel()
		h, clock := newCaseHarness(t, stripemock.Options{Dunning: stripemock.Dunning{Retries: []time.Duration{3 * day, 5 * day}, Final: "canceled"}})
		w := h.Worker(reconcile.WorkerConfig{})
		cus, sub, paid := renewalFails(t, h, clock, w)
		require.Equal(t, "past_due", h.state(cus).Status)

		clock.Advance(3 * day)
		h.settle(w)
		s := h.state(cus)
		require.Equal(t, "pro", s.Plan, "past_due after the first retry")
		require.Equal(t, "past_due", s.Status)
		require.Equal(t, []grant{{"pro", paid, 500}}, h.grants(cus))

		clock.Advance(5 * day)
		h.settle(w)
		got, err := h.Stripe.API.V1Subscriptions.Retrieve(context.Background(), sub.ID, nil)
		require.NoError(t, err)
		require.Equal(t, stripeapi.SubscriptionStatusCanceled, got.Status)
		s = h.state(cus)
		require.Equal(t, "free", s.Plan, "canceled after the last retry: the default plan")
		require.Empty(t, s.Status, "a canceled subscription is not current: the account has none")
		texts := h.outcomeTexts(cus)
		require.Regexp(t, `^applied: plan set to free, status past_due → no current subscription, period now starts`, texts[len(texts)-1])
		require.EqualValues(t, 10, s.Balance, "the default plan's allowance on the calendar month")
		require.Equal(t, []grant{{"pro", paid, 500}, {"free", h.calendarMonth(), 10}}, h.grants(cus),
			"the unpaid Pro period was never granted")
		require.Equal(t, map[string]int{"applied": s.Events["applied"]}, s.Events)
	})
}

// subscribeItems subscribes customer to one item per price (in order) at
// the fake, with the given quantity (0: Stripe's default of 1) and trial.
func (h *harness) subscribeItems(customerID string, quantity, trialDays int64, prices ...string) *stripeapi.Subscription {
	h.t.Helper()
	params := &stripeapi.SubscriptionCreateParams{Customer: stripeapi.String(customerID)}
	for _, p := range prices {
		it := &stripeapi.SubscriptionCreateItemParams{Price: stripeapi.String(p)}
		if quantity > 0 {
			it.Quantity = stripeapi.Int64(quantity)
		}
		params.Items = append(params.Items, it)
	}
	if trialDays > 0 {
		params.TrialPeriodDays = stripeapi.Int64(trialDays)
	}
	sub, err := h.Stripe.API.V1Subscriptions.Create(context.Background(), params)
	require.NoError(h.t, err)
	return sub
}

// addOnPrice is a monthly price no plan maps (storage, say), loaded into
// the fake.
func (h *harness) addOnPrice() string {
	h.Stripe.Fake.AddPrice("price_addon", "addon_storage", 300)
	return "price_addon"
}

// TestStripeSeveralSubscriptions: the plan is the best plan among every
// current subscription, whatever their order and whatever else the
// customer bought.
func TestStripeSeveralSubscriptions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		first     string // subscribed and reconciled first
		then      string // subscribed a second later
		plan      string
		balance   int64
		decidedBy int // 0: the first subscription decides, 1: the second
	}{
		{"AddOnAfterPro", "price_pro", "addon", "pro", 500, 0},
		{"NewerFreeDoesNotDemote", "price_pro", "price_free", "pro", 500, 0},
		{"OlderTeamBeatsNewerPro", "price_team", "price_pro", "team", 2000, 0},
		{"NewerTeamUpgrades", "price_pro", "price_team", "team", 2000, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h, clock := newCaseHarness(t, stripemock.Options{})
			w := h.Worker(reconcile.WorkerConfig{})
			then := tc.then
			if then == "addon" {
				then = h.addOnPrice()
			}
			cus := h.Customer("u_several")
			subs := []*stripeapi.Subscription{h.Subscribe(cus, tc.first)}
			h.settle(w)
			clock.Advance(time.Second)
			subs = append(subs, h.Subscribe(cus, then))
			h.settle(w)

			s := h.state(cus)
			require.Equal(t, tc.plan, s.Plan)
			require.Equal(t, "active", s.Status)
			require.Equal(t, tc.balance, s.Balance)
			require.Equal(t, map[string]int{"applied": s.Events["applied"]}, s.Events, "nothing ignored, nothing pending")
			require.Equal(t, subs[tc.decidedBy].ID, h.account(cus).SubscriptionID)
			for _, text := range h.outcomeTexts(cus) {
				require.NotContains(t, text, "ignored")
			}
		})
	}
}

// TestStripeMixedIntervals: a yearly add-on listed before the monthly Pro
// item on one subscription; the account's period is Pro's, so Pro is
// granted every month.
func TestStripeMixedIntervals(t *testing.T) {
	t.Parallel()
	h, clock := newCaseHarness(t, stripemock.Options{})
	w := h.Worker(reconcile.WorkerConfig{})
	yearly, err := h.Stripe.API.V1Prices.Create(context.Background(), &stripeapi.PriceCreateParams{
		Currency: stripeapi.String("usd"), UnitAmount: stripeapi.Int64(12000), Product: stripeapi.String("prod_support"),
		Recurring: &stripeapi.PriceCreateRecurringParams{Interval: stripeapi.String("year")}})
	require.NoError(t, err)
	cus := h.Customer("u_mixed")
	sub := h.subscribeItems(cus, 0, 0, yearly.ID, "price_pro")
	require.Equal(t, caseStart.AddDate(1, 0, 0).Unix(), sub.Items.Data[0].CurrentPeriodEnd, "the add-on is yearly")
	h.settle(w)

	a := h.account(cus)
	require.Equal(t, "pro", a.Plan)
	require.Equal(t, caseStart, a.PeriodStart.UTC())
	require.Equal(t, caseStart.AddDate(0, 1, 0), a.PeriodEnd.UTC(), "Pro's monthly period, not the add-on's year")

	clock.Advance(32 * day)
	h.settle(w)
	next := caseStart.AddDate(0, 1, 0)
	require.Equal(t, next, h.itemStart(sub.ID, "price_pro"))
	s := h.state(cus)
	require.Equal(t, "pro", s.Plan)
	require.EqualValues(t, 500, s.Balance)
	require.Equal(t, next, h.account(cus).PeriodStart.UTC())
	require.Equal(t, []grant{{"pro", caseStart, 500}, {"pro", next, 500}}, h.grants(cus), "granted again a month later")
	require.Equal(t, map[string]int{"applied": s.Events["applied"]}, s.Events)
}

// syncBuffer is a log destination that several goroutines may write.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestStripeUnmappedPrice: the only current subscription is on a price no
// plan maps. Nothing is applied, and billsync says so loudly, naming the
// price: in the outcome and in an ALERT log line.
func TestStripeUnmappedPrice(t *testing.T) {
	t.Parallel()
	h, _ := newCaseHarness(t, stripemock.Options{})
	var logs syncBuffer
	w := h.Worker(reconcile.WorkerConfig{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	cus := h.Customer("u_unmapped")
	h.Subscribe(cus, "price_legacy")
	h.settle(w)

	s := h.state(cus)
	require.Empty(t, s.Plan, "no account is written from an unmapped price")
	require.Equal(t, map[string]int{"ignored": 3}, s.Events, "customer.created, the subscription and its invoice")
	outcomes := h.TakeOutcomes()
	require.Len(t, outcomes, 1)
	out := outcomes[0]
	require.Equal(t, reconcile.ResultIgnored, out.Result)
	require.Equal(t, []string{"legacy_gold"}, out.Unmapped)
	require.Equal(t, "ignored: price legacy_gold / price_legacy maps to no plan", out.Text)
	var alert string
	for _, line := range bytes.Split([]byte(logs.String()), []byte("\n")) {
		if bytes.Contains(line, []byte("ALERT")) {
			alert = string(line)
		}
	}
	require.Contains(t, alert, "level=ERROR")
	require.Contains(t, alert, "prices=[legacy_gold]")
	require.Contains(t, alert, "customer="+cus)
}

// TestStripeTrial: the trial grants the trial allowance for its period;
// when it ends the first paid period is granted again.
func TestStripeTrial(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		plans string // "" for the example plans
		trial int64
	}{
		{"DefaultFullAllowance", "", 500},
		{"TrialAllowance", `
default: free
plans:
  - {name: free, allowance: 10, stripe_prices: [price_free]}
  - {name: pro, allowance: 500, trial_allowance: 50, stripe_prices: [price_pro]}
`, 50},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h, clock := newCaseHarness(t, stripemock.Options{})
			if tc.plans != "" {
				h.Plans = parsePlans(t, tc.plans)
			}
			w := h.Worker(reconcile.WorkerConfig{})
			cus := h.Customer("u_trial")
			sub := h.subscribeItems(cus, 0, 14, "price_pro")
			require.Equal(t, stripeapi.SubscriptionStatusTrialing, sub.Status)
			h.settle(w)
			s := h.state(cus)
			require.Equal(t, "pro", s.Plan)
			require.Equal(t, "trialing", s.Status)
			require.Equal(t, tc.trial, s.Balance)
			h.resync(w, cus)
			require.Equal(t, []grant{{"pro", caseStart, tc.trial}}, h.grants(cus), "the trial is granted once")

			clock.Advance(15 * day)
			h.settle(w)
			paid := caseStart.Add(14 * day)
			s = h.state(cus)
			require.Equal(t, "pro", s.Plan)
			require.Equal(t, "active", s.Status)
			require.EqualValues(t, 500, s.Balance)
			require.Equal(t, paid, h.account(cus).PeriodStart.UTC())
			h.resync(w, cus)
			require.Equal(t, []grant{{"pro", caseStart, tc.trial}, {"pro", paid, 500}}, h.grants(cus),
				"the first paid period is granted, once")
			require.Equal(t, map[string]int{"applied": s.Events["applied"]}, s.Events)
		})
	}
}

// TestStripePausedCollection: by default a subscription whose collection
// is paused keeps its plan, but a period that starts while paused is not
// paid and grants nothing; once collection resumes the current period is
// granted, once.
func TestStripePausedCollection(t *testing.T) {
	t.Parallel()
	h, clock := newCaseHarness(t, stripemock.Options{})
	w := h.Worker(reconcile.WorkerConfig{})
	cus := h.Customer("u_pause")
	sub := h.Subscribe(cus, "price_pro")
	h.settle(w)
	_, err := h.Stripe.API.V1Subscriptions.Update(context.Background(), sub.ID, &stripeapi.SubscriptionUpdateParams{
		PauseCollection: &stripeapi.SubscriptionUpdatePauseCollectionParams{Behavior: stripeapi.String("void")}})
	require.NoError(t, err)
	h.settle(w)
	s := h.state(cus)
	require.Equal(t, storetest.CustomerState{Plan: "pro", Status: "active", Balance: 500, Grants: 1, Events: s.Events}, s)

	clock.Advance(32 * day) // the renewal's invoice is voided, the period moves on
	h.settle(w)
	next := caseStart.AddDate(0, 1, 0)
	require.Equal(t, next, h.itemStart(sub.ID, "price_pro"))
	s = h.state(cus)
	require.Equal(t, "pro", s.Plan, "paused collection keeps the plan")
	require.EqualValues(t, 500, s.Balance)
	require.Equal(t, caseStart, h.account(cus).PeriodStart.UTC(), "the account stays on the period last granted")
	require.Equal(t, []grant{{"pro", caseStart, 500}}, h.grants(cus), "nothing granted while paused")

	params := &stripeapi.SubscriptionUpdateParams{}
	params.AddExtra("pause_collection", "")
	_, err = h.Stripe.API.V1Subscriptions.Update(context.Background(), sub.ID, params)
	require.NoError(t, err)
	h.settle(w)
	h.resync(w, cus)
	s = h.state(cus)
	require.Equal(t, "pro", s.Plan)
	require.Equal(t, next, h.account(cus).PeriodStart.UTC())
	require.Equal(t, []grant{{"pro", caseStart, 500}, {"pro", next, 500}}, h.grants(cus))
	require.Equal(t, map[string]int{"applied": s.Events["applied"]}, s.Events)
}

// TestStripeSeats: a plan with a seat allowance grants it per seat on top
// of its allowance; more seats in the same period top up the difference.
func TestStripeSeats(t *testing.T) {
	t.Parallel()
	h, _ := newCaseHarness(t, stripemock.Options{})
	h.Plans = parsePlans(t, `
default: free
plans:
  - {name: free, allowance: 10, stripe_prices: [price_free]}
  - {name: team, allowance: 2000, seat_allowance: 20, stripe_prices: [team, price_team]}
`)
	w := h.Worker(reconcile.WorkerConfig{})
	cus := h.Customer("u_seats")
	sub := h.subscribeItems(cus, 50, 0, "price_team")
	h.settle(w)
	s := h.state(cus)
	require.Equal(t, "team", s.Plan)
	require.EqualValues(t, 2000+50*20, s.Balance)

	_, err := h.Stripe.API.V1Subscriptions.Update(context.Background(), sub.ID, &stripeapi.SubscriptionUpdateParams{
		Items: []*stripeapi.SubscriptionUpdateItemParams{{ID: stripeapi.String(sub.Items.Data[0].ID), Quantity: stripeapi.Int64(60)}}})
	require.NoError(t, err)
	h.settle(w)
	require.EqualValues(t, 2000+60*20, h.state(cus).Balance)
	require.Equal(t, []grant{{"team", caseStart, 3000}, {"team", caseStart, 200}}, h.grants(cus))
}

// TestStripeThinEvents: billsync hears of changes only through thin events
// (an event destination, v2.core.event bodies naming the related object)
// and still applies what Stripe says, as with snapshot events.
func TestStripeThinEvents(t *testing.T) {
	t.Parallel()
	// No snapshot webhook endpoint: the intake, as serve wires it
	// (verifying with the destination's secret, storing each event under
	// its related object for the worker to resolve), is the fake's thin
	// event destination.
	h := newHarness(t, testenv.Stripe, testenv.Options{Stripe: testenv.StripeOptions{
		Fake:       stripemock.Options{Clock: stripemock.NewStoppedClock(caseStart)},
		ThinEvents: []string{"v1.customer.subscription.created", "v1.customer.subscription.updated", "v1.invoice.paid"},
	}})

	w := h.Worker(reconcile.WorkerConfig{})
	cus := h.Customer("u_thin")
	sub := h.Subscribe(cus, "price_free")
	h.ChangePrice(sub, "price_pro")
	h.settle(w)
	s := h.state(cus)
	require.Equal(t, storetest.CustomerState{Plan: "pro", Status: "active", Balance: 500, Grants: 1,
		Events: map[string]int{"applied": 3}}, s, "created, its invoice.paid and updated, each resolved to the customer")
	thin := 0
	for _, e := range storetest.CustomerEvents(t, h.Store, stripe.Provider, cus) {
		if strings.HasPrefix(e.Type, "v1.") {
			thin++
		}
	}
	require.Equal(t, 3, thin, "the events stored are the thin ones")

	h.ChangePrice(sub, "price_team")
	h.settle(w)
	s = h.state(cus)
	require.Equal(t, "team", s.Plan)
	require.EqualValues(t, 2000, s.Balance)
}

// TestStripeEventGenerationFailureResolved: Stripe fails to create the
// event of a plan change (no webhook, nothing in the events list), then
// sends v2.core.health.event_generation_failure.resolved. The intake
// stores it under the event, asking Stripe nothing; the worker reads the
// event's impact, the subscription's customer, and applies the change.
func TestStripeEventGenerationFailureResolved(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testenv.Stripe, testenv.Options{Stripe: testenv.StripeOptions{
		Fake: stripemock.Options{Clock: stripemock.NewStoppedClock(caseStart)},
		ThinEvents: []string{"v1.customer.subscription.created", "v1.customer.subscription.updated", "v1.invoice.paid",
			stripemock.HealthEventResolved},
	}})
	w := h.Worker(reconcile.WorkerConfig{})
	cus := h.Customer("u_lost_event")
	sub := h.Subscribe(cus, "price_free")
	h.settle(w)
	require.Equal(t, "free", h.state(cus).Plan)

	h.Stripe.Fake.FailEventGeneration(true)
	h.ChangePrice(sub, "price_pro")
	h.settle(w)
	require.Equal(t, "free", h.state(cus).Plan, "no event was created: billsync cannot know yet")

	ids := h.Stripe.Fake.ResolveEventGenerationFailure()
	require.NotEmpty(t, ids)
	h.settle(w)
	require.Equal(t, "pro", h.state(cus).Plan, "the health event's object read again")
	health := 0
	for _, e := range storetest.CustomerEvents(t, h.Store, stripe.Provider, cus) {
		if e.Type == stripe.HealthEventResolved {
			health++
			require.Equal(t, string(reconcile.EventApplied), string(e.Status), "answered by the customer's reconcile")
		}
	}
	require.Len(t, ids, health, "each health event handed to the customer")
}
