package reconcile

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

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

// PlatformAccount names the platform's own account where a connected
// account may be named (the app API's ?account=): its customers are the
// ones with no connected account.
const PlatformAccount = "platform"

// CheckAccountParam reports why account cannot name an account to choose
// among (wrapping ErrInvalid): "" (any), PlatformAccount, or an acct_ id.
func CheckAccountParam(account string) error {
	if account == "" || account == PlatformAccount || IsConnectedAccount(account) {
		return nil
	}
	return fmt.Errorf("%w: account must be a connected account's acct_ id or %q", ErrInvalid, PlatformAccount)
}

// ConnectedAccount is a connected account as billsync knows it.
type ConnectedAccount struct {
	Provider string `json:"provider"`
	Account  string `json:"account"`
	// Authorized is what the newest word about the account said: it
	// authorises the platform (billsync may read its objects) or not.
	Authorized bool `json:"authorized"`
	// ChangedAt is that word's own time (its event's, or its listing's).
	ChangedAt time.Time `json:"changed_at"`
	FirstSeen time.Time `json:"first_seen"`
}

// ConnectedAccountView is a connected account as the console lists it:
// with how many of its customers billsync keeps.
type ConnectedAccountView struct {
	ConnectedAccount
	Customers int64 `json:"customers"`
}

// Authorization is one word about a connected account: an
// account.application.authorized or .deauthorized event, or the
// provider's list of accounts naming it (or, listed whole, not naming
// it). The store keeps the newest by At, so a copy or an older word
// arriving late changes nothing.
type Authorization struct {
	Account    string
	Authorized bool
	At         time.Time
}

// ConnectedAccountStore keeps the connected accounts.
type ConnectedAccountStore interface {
	// SaveAuthorizations records each word newer than the one kept for
	// its account (a new account is recorded whatever its time).
	SaveAuthorizations(ctx context.Context, provider string, words []Authorization) error
	// ConnectedAccounts lists the provider's connected accounts, by id.
	ConnectedAccounts(ctx context.Context, provider string) ([]ConnectedAccount, error)
}

// Connect modes (-stripe-connect): which connected accounts billsync serves.
const (
	ConnectOff    = "off"    // none: their events are stored as ignored
	ConnectAll    = "all"    // every account that authorises the platform
	ConnectListed = "listed" // only the accounts listed, while they authorise it
)

// ConnectPolicy says which connected accounts billsync serves.
type ConnectPolicy struct {
	Mode   string   // ConnectOff ("" too), ConnectAll or ConnectListed
	Listed []string // the accounts ConnectListed serves
}

// Reasons a connected account's event is stored as ignored.
const (
	ReasonConnectOff      = "connected accounts are not served (-stripe-connect off)"
	ReasonConnectUnlisted = "connected account not in the served list (-stripe-connect listed)"
)

// Serves reports whether billsync serves account's customers under the
// policy, and if not, why (the reason its events are stored with). It
// reads the policy alone: an account that deauthorised the platform is
// told by the store (ConnectedAccount.Authorized), not here.
func (p ConnectPolicy) Serves(account string) (ok bool, why string) {
	switch {
	case account == "":
		return true, ""
	case p.Mode == ConnectAll:
		return true, ""
	case p.Mode == ConnectListed && slices.Contains(p.Listed, account):
		return true, ""
	case p.Mode == ConnectListed:
		return false, ReasonConnectUnlisted
	}
	return false, ReasonConnectOff
}

// Enabled reports whether any connected account may be served.
func (p ConnectPolicy) Enabled() bool { return p.Mode == ConnectAll || p.Mode == ConnectListed }

// ParseConnectPolicy reads -stripe-connect's mode and the listed accounts
// (comma-separated acct_ ids, for ConnectListed).
func ParseConnectPolicy(mode, listed string) (ConnectPolicy, error) {
	p := ConnectPolicy{Mode: cmp.Or(mode, ConnectOff)}
	for a := range strings.SplitSeq(listed, ",") {
		if a = strings.TrimSpace(a); a == "" {
			continue
		}
		if !IsConnectedAccount(a) {
			return ConnectPolicy{}, fmt.Errorf("connected account %q: not an acct_ id", a)
		}
		p.Listed = append(p.Listed, a)
	}
	switch {
	case p.Mode != ConnectOff && p.Mode != ConnectAll && p.Mode != ConnectListed:
		return ConnectPolicy{}, fmt.Errorf("stripe connect %q: want off, all or listed", p.Mode)
	case p.Mode == ConnectListed && len(p.Listed) == 0:
		return ConnectPolicy{}, errors.New("stripe connect listed: no accounts listed (BILLSYNC_STRIPE_CONNECT_ACCOUNTS)")
	case p.Mode != ConnectListed && len(p.Listed) > 0:
		return ConnectPolicy{}, fmt.Errorf("stripe connect %s: accounts are listed only with listed", p.Mode)
	}
	return p, nil
}
