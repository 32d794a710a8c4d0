package stripe

import (
	"context"

	"github.com/billsync/billsync/reconcile"
)

// A read on behalf of a connected account (Stripe Connect) carries the
// platform's key and the account's Stripe-Account header: without it
// Stripe answers the platform's "No such customer". The account travels in
// the request's context, so every read a fetch makes (the customer, its
// subscriptions' lists, items, entitlements, a related object) carries it
// whichever helper sends it.

type accountKey struct{}

// OnBehalfOf returns ctx for requests on behalf of the connected account
// ("" for the platform's own account).
func OnBehalfOf(ctx context.Context, account string) context.Context {
	if account == "" {
		return ctx
	}
	return context.WithValue(ctx, accountKey{}, account)
}

// accountOf is the connected account ctx reads on behalf of, "" for the
// platform's own.
func accountOf(ctx context.Context) string {
	a, _ := ctx.Value(accountKey{}).(string)
	return a
}

// onBehalfOfKey splits a connected key ("acct_X/cus_Y") into ctx on behalf
// of its account and the id Stripe knows. An account billsync does not
// serve (Config.Connect) is a *reconcile.PermanentError: nothing of it is
// read.
func (c *Client) onBehalfOfKey(ctx context.Context, key string) (context.Context, string, error) {
	account, id := reconcile.SplitConnected(key)
	ctx, err := c.onBehalfOf(ctx, account)
	return ctx, id, err
}

// onBehalfOf is OnBehalfOf for an account billsync serves.
func (c *Client) onBehalfOf(ctx context.Context, account string) (context.Context, error) {
	if ok, why := c.connect.Serves(account); !ok {
		return ctx, reconcile.Permanent("stripe: connected account %s: %s", account, why)
	}
	return OnBehalfOf(ctx, account), nil
}

// connectedKey is an id Stripe gave in ctx's account, as billsync keys it.
func connectedKey(ctx context.Context, id string) string {
	if id == "" {
		return ""
	}
	return reconcile.Connected(accountOf(ctx), id)
}

// AccountLister is the sweep's listing (ListPage, and Split and Progress
// as the client's) on behalf of the connected account: every request it
// makes carries the account's Stripe-Account, and its snapshots are keyed
// under the account. An account billsync does not serve is never read.
func (c *Client) AccountLister(account string) reconcile.Lister {
	return accountLister{c: c, account: account}
}

type accountLister struct {
	c       *Client
	account string
}

func (l accountLister) ListPage(ctx context.Context, cursor string) ([]reconcile.Snapshot, string, bool, error) {
	ctx, err := l.c.onBehalfOf(ctx, l.account)
	if err != nil {
		return nil, "", false, err
	}
	return l.c.ListPage(ctx, cursor)
}

func (l accountLister) Split(ctx context.Context, next string) (kept, given string, err error) {
	ctx, err = l.c.onBehalfOf(ctx, l.account)
	if err != nil {
		return "", "", err
	}
	return l.c.Split(ctx, next)
}

func (l accountLister) ListBudget() reconcile.Budget { return l.c.ListBudget() }

func (l accountLister) Progress(cursors []string) float64 { return l.c.Progress(cursors) }

var (
	_ reconcile.Splitter   = accountLister{}
	_ reconcile.Progresser = accountLister{}
)
