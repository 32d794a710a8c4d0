package testenv

import (
	"context"
	"fmt"

	stripeapi "github.com/stripe/stripe-go/v82"

	stripemock "github.com/billsync/billsync/mocks/stripe"
	"github.com/billsync/billsync/reconcile"
)

// Stripe Connect on the fake: a connected account holds its own
// customers and subscriptions, reached with its Stripe-Account header.

// ConnectedAccount connects an account with the chosen id to the fake
// Stripe (account.application.authorized goes to its Connect endpoints),
// starting with copies of the Env's prices.
func (s *StripeSide) ConnectedAccount(id string) (stripemock.Account, error) {
	return s.Fake.AddAccount(stripemock.AccountOptions{ID: id, PlatformPrices: true})
}

// ConnectedCustomer creates a customer in a connected account with a
// chosen id, the app's user reference in metadata[user_id] (none when
// userRef is empty): two accounts may hold the same id.
func (s *StripeSide) ConnectedCustomer(account, id, userRef string) error {
	var metadata map[string]string
	if userRef != "" {
		metadata = map[string]string{"user_id": userRef}
	}
	return s.Fake.Account(account).AddCustomer(id, "", metadata)
}

// ConnectedSubscribe subscribes a connected account's customer to price
// through stripe-go, on the account's behalf.
func (s *StripeSide) ConnectedSubscribe(ctx context.Context, account, customer, price string) (*stripeapi.Subscription, error) {
	params := &stripeapi.SubscriptionCreateParams{Customer: stripeapi.String(customer),
		Items: []*stripeapi.SubscriptionCreateItemParams{{Price: stripeapi.String(price)}}}
	params.SetStripeAccount(account)
	sub, err := s.API.V1Subscriptions.Create(ctx, params)
	if err != nil {
		return nil, fmt.Errorf("subscribe %s/%s to %s: %w", account, customer, price, err)
	}
	return sub, nil
}

// ConnectedChangePrice moves a connected account's sub's first item to
// price through stripe-go, on the account's behalf.
func (s *StripeSide) ConnectedChangePrice(ctx context.Context, account string, sub *stripeapi.Subscription, price string) error {
	params := &stripeapi.SubscriptionUpdateParams{
		Items: []*stripeapi.SubscriptionUpdateItemParams{{ID: stripeapi.String(sub.Items.Data[0].ID), Price: stripeapi.String(price)}}}
	params.SetStripeAccount(account)
	if _, err := s.API.V1Subscriptions.Update(ctx, sub.ID, params); err != nil {
		return fmt.Errorf("change %s/%s to %s: %w", account, sub.ID, price, err)
	}
	return nil
}

// ConnectedCancel cancels a connected account's sub at once through
// stripe-go, on the account's behalf.
func (s *StripeSide) ConnectedCancel(ctx context.Context, account string, sub *stripeapi.Subscription) error {
	params := &stripeapi.SubscriptionCancelParams{}
	params.SetStripeAccount(account)
	if _, err := s.API.V1Subscriptions.Cancel(ctx, sub.ID, params); err != nil {
		return fmt.Errorf("cancel %s/%s: %w", account, sub.ID, err)
	}
	return nil
}

// ConnectedCancel cancels a connected account's sub at the fake Stripe.
func (h *Test) ConnectedCancel(account string, sub *stripeapi.Subscription) {
	h.t.Helper()
	h.check(h.stripe().ConnectedCancel(context.Background(), account, sub))
}

// ConnectedAccount connects an account to the fake Stripe (see
// StripeSide.ConnectedAccount).
func (h *Test) ConnectedAccount(id string) stripemock.Account {
	h.t.Helper()
	a, err := h.stripe().ConnectedAccount(id)
	h.check(err)
	return a
}

// ConnectedCustomer creates a customer with a chosen id in a connected
// account of the fake Stripe and returns billsync's key for it,
// <account>/<id> (see StripeSide.ConnectedCustomer).
func (h *Test) ConnectedCustomer(account, id, userRef string) string {
	h.t.Helper()
	h.check(h.stripe().ConnectedCustomer(account, id, userRef))
	return reconcile.Connected(account, id)
}

// ConnectedSubscribe subscribes a connected account's customer (its
// Stripe id) to price at the fake Stripe.
func (h *Test) ConnectedSubscribe(account, customer, price string) *stripeapi.Subscription {
	h.t.Helper()
	sub, err := h.stripe().ConnectedSubscribe(context.Background(), account, customer, price)
	h.check(err)
	return sub
}

// ConnectedChangePrice moves a connected account's sub's first item to
// price at the fake Stripe.
func (h *Test) ConnectedChangePrice(account string, sub *stripeapi.Subscription, price string) {
	h.t.Helper()
	h.check(h.stripe().ConnectedChangePrice(context.Background(), account, sub, price))
}
