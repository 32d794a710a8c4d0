package reconcile

import "strings"

// Stripe Connect: a platform's connected accounts each bill their own
// customers, and two accounts may hold the same customer id. So a
// connected account is part of the key wherever a provider's id is kept:
// its customers (accounts, the queue, inbox events, receipts, ledger keys,
// account changes) and its events (the dedupe key) are keyed
// "<account>/<id>", the account being Stripe's "acct_…" id. The platform's
// own customers and events keep the bare id they always had, so the rows
// written before Connect read as the platform's, unchanged, and nothing is
// migrated.
//
// No provider's id holds a slash (Stripe's and Kinde's are letters,
// digits and underscores), so the split is never ambiguous.

// connectedPrefix starts a connected account's id.
const connectedPrefix = "acct_"

// Connected returns the key of id (a customer, an event, a related
// object's key) held by the connected account; id itself for the
// platform's own (account "").
func Connected(account, id string) string {
	if account == "" {
		return id
	}
	return account + "/" + id
}

// SplitConnected reads a key Connected made: the connected account ("" for
// the platform's own) and the id within it.
func SplitConnected(key string) (account, id string) {
	account, id, ok := strings.Cut(key, "/")
	if !ok || !IsConnectedAccount(account) {
		return "", key
	}
	return account, id
}

// IsConnectedAccount reports whether s reads as a connected account's id.
func IsConnectedAccount(s string) bool {
	rest, ok := strings.CutPrefix(s, connectedPrefix)
	return ok && rest != "" && !strings.ContainsAny(rest, "/ \t\r\n")
}
