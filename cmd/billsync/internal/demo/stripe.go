package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"

	stripeapi "github.com/stripe/stripe-go/v82"

	stripemock "github.com/billsync/billsync/mocks/stripe"
	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/providers/stripe"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store"
)

// stripeWorld plays the scenario at the fake Stripe (testenv): on the
// platform's own account, or with account set on a connected account
// (Stripe Connect), whose events reach billsync through its Connect
// endpoint and whose customer billsync reads on the account's behalf.
type stripeWorld struct {
	h       *testenv.Env
	account string // the connected account playing; "" for the platform
	free    *stripeapi.Subscription
}

// demoAccount is the connected account `billsync demo --connect` plays on.
const demoAccount = "acct_demo_connected"

func newStripeWorld(st *store.Store, addr string, network http.Handler, logger *slog.Logger, connect bool) (world, error) {
	opts := testenv.StripeOptions{Fake: stripemock.Options{Logger: logger}}
	if connect {
		opts.Connect = reconcile.ConnectPolicy{Mode: reconcile.ConnectAll}
	}
	h, err := testenv.New(testenv.Stripe, testenv.Options{Store: st, IntakeAddr: addr, Network: network, Logger: logger, Stripe: opts})
	if err != nil {
		return nil, err
	}
	w := &stripeWorld{h: h}
	if connect {
		w.account = demoAccount // connected in onFree: its authorisation is a delivery the demo captures
	}
	return w, nil
}

func (w *stripeWorld) provider() string           { return stripe.Provider }
func (w *stripeWorld) client() reconcile.Provider { return w.h.Client }
func (w *stripeWorld) intakeURL() string          { return w.h.IntakeURL }
func (w *stripeWorld) close()                     { w.h.Close() }

func (w *stripeWorld) waitDelivered(ctx context.Context) error { return w.h.WaitDelivered(ctx) }

func (w *stripeWorld) identify(body []byte, _ http.Header) (id, typ string) {
	var ev struct{ ID, Type, Account string }
	_ = json.Unmarshal(body, &ev)
	return reconcile.Connected(ev.Account, ev.ID), ev.Type
}

func (w *stripeWorld) scenarioTypes() (change, payment, cancellation string) {
	return "customer.subscription.created", "invoice.paid", "customer.subscription.deleted"
}

// naive reads a Stripe event as the naive app does: a subscription
// created or updated is a plan change to its first item's price.
func (w *stripeWorld) naive(body []byte) (kind, planRef string) {
	var ev struct {
		Type string
		Data struct {
			Object struct {
				Items struct {
					Data []struct {
						Price struct {
							LookupKey string `json:"lookup_key"`
						}
					}
				}
			}
		}
	}
	_ = json.Unmarshal(body, &ev) // the foil trusts its input
	switch ev.Type {
	case "customer.subscription.created", "customer.subscription.updated":
		if items := ev.Data.Object.Items.Data; len(items) > 0 {
			return naiveChange, items[0].Price.LookupKey
		}
	case "invoice.paid":
		return naivePayment, ""
	case "customer.subscription.deleted":
		return naiveCancel, ""
	}
	return "", ""
}

// onFree creates the customer with a Free subscription: created and
// invoice.paid, two webhooks.
func (w *stripeWorld) onFree(ctx context.Context) (string, int, error) {
	if w.account != "" {
		const cus = "cus_demo_ada" // ids are the account's own: any other account may hold one too
		if _, err := w.h.Stripe.ConnectedAccount(w.account); err != nil {
			return "", 0, err
		}
		if err := w.h.Stripe.ConnectedCustomer(w.account, cus, "user_ada"); err != nil {
			return "", 0, err
		}
		free, err := w.h.Stripe.ConnectedSubscribe(ctx, w.account, cus, "price_free")
		if err != nil {
			return "", 0, err
		}
		w.free = free
		return reconcile.Connected(w.account, cus), 2, nil
	}
	cus, err := w.h.Stripe.API.V1Customers.Create(ctx, &stripeapi.CustomerCreateParams{
		Email: stripeapi.String("ada@example.com"), Metadata: map[string]string{"user_id": "user_ada"}})
	if err != nil {
		return "", 0, fmt.Errorf("create the customer at the fake Stripe: %w", err)
	}
	free, err := w.h.Stripe.Subscribe(ctx, cus.ID, "price_free")
	if err != nil {
		return "", 0, err
	}
	w.free = free
	return cus.ID, 2, nil
}

// toPro cancels the Free subscription, then subscribes to Pro (its first
// invoice is paid).
func (w *stripeWorld) toPro(ctx context.Context, customer string) error {
	if w.account != "" {
		_, id := reconcile.SplitConnected(customer)
		if err := w.h.Stripe.ConnectedCancel(ctx, w.account, w.free); err != nil {
			return err
		}
		_, err := w.h.Stripe.ConnectedSubscribe(ctx, w.account, id, "price_pro")
		return err
	}
	if _, err := w.h.Stripe.API.V1Subscriptions.Cancel(ctx, w.free.ID, nil); err != nil {
		return fmt.Errorf("cancel %s at the fake Stripe: %w", w.free.ID, err)
	}
	_, err := w.h.Stripe.Subscribe(ctx, customer, "price_pro")
	return err
}

func (w *stripeWorld) where() Where {
	return Where{FakeURL: w.h.URL, APIKey: stripemock.DefaultAPIKey}
}
