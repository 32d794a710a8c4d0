package stripe

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/billsync/billsync/reconcile"
)

var _ reconcile.ConnectSource = (*Client)(nil)

// ListAccounts reads a page of GET /v1/accounts (100 a page): the ids of
// the accounts connected to the platform, from page cursor after (an
// account id; "" the first page), and the next page's cursor ("" when
// none). An entry without a usable id is left out.
func (c *Client) ListAccounts(ctx context.Context, after string) (accounts []string, next string, err error) {
	q := url.Values{}
	q.Set("limit", strconv.Itoa(listPageSize))
	if after != "" {
		q.Set("starting_after", after)
	}
	const op = "list connected accounts"
	body, err := c.get(ctx, "/v1/accounts", q)
	if err != nil {
		return nil, "", fail(op, err)
	}
	entries, more, err := listPageOf[object](body)
	if err != nil {
		return nil, "", fmt.Errorf("stripe %s: unreadable page: %w", op, err)
	}
	last := ""
	for _, e := range entries {
		if last = e.ID.s; e.ID.ok && reconcile.IsConnectedAccount(last) {
			accounts = append(accounts, last)
		}
	}
	if more && len(entries) > 0 {
		if !reconcile.IsConnectedAccount(last) {
			return nil, "", fmt.Errorf("stripe %s: the last entry has no usable id to page after", op)
		}
		next = last
	}
	return accounts, next, nil
}

// ListConnectedEvents is ListEvents on behalf of the connected account
// (its Stripe-Account): its events, each keyed under it
// (reconcile.Connected) by the intake's reader, as its Connect webhook
// would be. Stripe names the account in each event it lists on behalf
// of one; an entry that does not is read as naming the account asked
// for, so it is never taken for the platform's own. An account billsync
// does not serve is a *reconcile.PermanentError: nothing is read.
func (c *Client) ListConnectedEvents(ctx context.Context, account string, since time.Time, after string) (reconcile.EventsFeedPage, error) {
	if !reconcile.IsConnectedAccount(account) {
		return reconcile.EventsFeedPage{}, reconcile.Permanent("stripe: %q is not a connected account's id", account)
	}
	ctx, err := c.onBehalfOf(ctx, account)
	if err != nil {
		return reconcile.EventsFeedPage{}, err
	}
	return c.listEvents(ctx, since, after, account)
}

// inAccount returns an event entry of a listing on behalf of account with
// its "account" set to it when the entry names none.
func inAccount(entry []byte, account string) []byte {
	if account == "" {
		return entry
	}
	var e struct {
		Account *string `json:"account"`
	}
	trimmed := bytes.TrimLeft(entry, " \t\r\n")
	if json.Unmarshal(entry, &e) != nil || (e.Account != nil && *e.Account != "") || len(trimmed) < 2 || trimmed[0] != '{' {
		return entry
	}
	named, _ := json.Marshal(account) // a string: cannot fail
	out := make([]byte, 0, len(trimmed)+len(named)+12)
	out = append(out, `{"account":`...)
	out = append(out, named...)
	if rest := bytes.TrimLeft(trimmed[1:], " \t\r\n"); len(rest) > 0 && rest[0] != '}' {
		out = append(out, ',')
	}
	return append(out, trimmed[1:]...)
}
