package reconcile

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Usage failures. The HTTP layer maps them to status codes.
var (
	// ErrInvalid: the request itself is malformed (400). Nothing is stored.
	ErrInvalid = errors.New("invalid request")
	// ErrInsufficient: the allowance is short of a debit (409). Nothing is
	// stored; see InsufficientError for the balance.
	ErrInsufficient = errors.New("insufficient allowance")
	// ErrKeyReused: an idempotency key already debited a different amount
	// (422). Nothing is stored.
	ErrKeyReused = errors.New("idempotency key reused with a different amount")
	// ErrAmbiguous: several accounts (of different providers) carry the
	// app's user reference and the request did not say which (409); see
	// AmbiguousError for them.
	ErrAmbiguous = errors.New("several accounts have this user reference")
)

// MaxIdempotencyKey is the longest idempotency key accepted, in bytes.
const MaxIdempotencyKey = 255

// UserAccount is an account with its balance, as the app reads it.
type UserAccount struct {
	Account Account
	Balance int64 // the default meter's, in the current period
	// Meters are the named meters' figures in the current period, by
	// meter key (only meters with ledger rows in it).
	Meters []MeterBalance
	// Connected is the Stripe Connect account holding the account's
	// customer as billsync knows it (whether it still authorises the
	// platform, since when), read with the account; nil for the
	// platform's own customer, and for a connected account of which
	// billsync has recorded no word yet.
	Connected *ConnectedAccount
}

// MeterBalance is one named meter's figures for the account's current
// period.
type MeterBalance struct {
	Meter   string `json:"meter"`
	Granted int64  `json:"granted"`
	Used    int64  `json:"used"`
	Balance int64  `json:"balance"`
}

// MeterOf returns the meter's figures, zero when it has no rows.
func MeterOf(meters []MeterBalance, key string) MeterBalance {
	for _, m := range meters {
		if m.Meter == key {
			return m
		}
	}
	return MeterBalance{Meter: key}
}

// Debit asks to spend Amount of the allowance of the account whose app
// reference is UserRef, once per Key.
type Debit struct {
	UserRef string
	// Provider, when set, picks among several accounts with UserRef;
	// Account too (a connected account's acct_ id, or PlatformAccount).
	Provider string
	Account  string
	// Feature names the metered feature to debit; "" is the default
	// meter (the plan's allowance).
	Feature string
	Key     string
	Amount  int64
}

// Validate reports why d cannot be a debit (wrapping ErrInvalid), or nil.
func (d Debit) Validate() error {
	if err := CheckUserRef(d.UserRef, d.Provider); err != nil {
		return err
	}
	if err := CheckAccountParam(d.Account); err != nil {
		return err
	}
	switch {
	case d.Key == "":
		return fmt.Errorf("%w: idempotency_key is empty", ErrInvalid)
	case len(d.Key) > MaxIdempotencyKey:
		return fmt.Errorf("%w: idempotency_key is %d bytes: at most %d", ErrInvalid, len(d.Key), MaxIdempotencyKey)
	case strings.ContainsRune(d.Key, 0) || !utf8.ValidString(d.Key):
		return fmt.Errorf("%w: idempotency_key must be UTF-8 text without NUL", ErrInvalid)
	case d.Amount <= 0:
		return fmt.Errorf("%w: amount must be a whole number above 0, got %d", ErrInvalid, d.Amount)
	case d.Feature != "" && !featureKey.MatchString(d.Feature):
		return fmt.Errorf("%w: feature %q is no feature key (a-z, 0-9, _ and -, starting with a letter)", ErrInvalid, d.Feature)
	}
	return nil
}

// CheckUserRef reports why a user reference and provider (empty: any)
// cannot name an account (wrapping ErrInvalid), or nil: the database holds
// neither NUL nor invalid UTF-8, so such a lookup must not reach it.
func CheckUserRef(userRef, provider string) error {
	switch {
	case userRef == "":
		return fmt.Errorf("%w: user reference is empty", ErrInvalid)
	case strings.ContainsRune(userRef, 0) || !utf8.ValidString(userRef):
		return fmt.Errorf("%w: user reference must be UTF-8 text without NUL", ErrInvalid)
	case strings.ContainsRune(provider, 0) || !utf8.ValidString(provider):
		return fmt.Errorf("%w: provider must be UTF-8 text without NUL", ErrInvalid)
	}
	return nil
}

// LedgerKey is the debit's ledger key for the account: one row per key
// and meter. The default meter's is unchanged from before features
// (usage:{account}:{key}); a named meter's is usage.{meter}:{account}:{key}.
func (d Debit) LedgerKey(accountID int64) string {
	if d.Feature != "" {
		return fmt.Sprintf("usage.%s:%d:%s", d.Feature, accountID, d.Key)
	}
	return fmt.Sprintf("usage:%d:%s", accountID, d.Key)
}

// DebitResult is what a debit did. A repeat of a key gets the first
// request's result back (Replayed set), whatever the balance is now.
type DebitResult struct {
	AccountID int64       `json:"account_id"`
	UserRef   string      `json:"user_ref"`
	Feature   string      `json:"feature,omitempty"` // the meter debited; absent for the default one
	Key       string      `json:"idempotency_key"`
	Amount    int64       `json:"amount"`
	Balance   int64       `json:"balance"` // right after this debit
	Entry     LedgerEntry `json:"entry"`
	Replayed  bool        `json:"-"`
	// Change is what the app is told of a debit that writes (nil for a
	// replay): the store numbers it (ID, Seq, Time) and writes it, and
	// hands the result back without it.
	Change *AccountChange `json:"-"`
}

// DebitState is what a debit is decided on, as the store reads it under
// the account's row lock (which reconciles take too, so neither the
// balance nor the key's entry changes until the decision is written).
type DebitState struct {
	Account Account
	// Prior is the ledger entry the debit's key already wrote (its first
	// request's), or nil.
	Prior *LedgerEntry
	// PriorBalance is the balance right after Prior (0 for an entry older
	// than the balance_after column).
	PriorBalance int64
	// Balance is the balance of the debit's meter in the account's
	// current period now.
	Balance int64
	// Ledger is the account's current period's ledger, every meter: what
	// the app's change tells before and after the debit.
	Ledger Ledger
}

// DecideDebit decides d on cur: the first request's result again for a
// key already used with the same amount (Replayed: nothing to write),
// ErrKeyReused for a key used with another amount, an
// *InsufficientError when the balance is short of the amount, and
// otherwise the usage entry to write (Entry, without its CreatedAt), the
// balance after it and the app's change. A refusal writes nothing. It is pure: the store
// runs it under the account's row lock and writes what it returns.
func DecideDebit(d Debit, cur DebitState) (DebitResult, error) {
	res := DebitResult{AccountID: cur.Account.ID, UserRef: d.UserRef, Feature: d.Feature, Key: d.Key, Amount: d.Amount}
	if p := cur.Prior; p != nil {
		// A replay answers the first result, whatever the balance is now.
		if -p.Delta != d.Amount {
			return DebitResult{}, fmt.Errorf("%w: key %q debited %d, this request asks for %d", ErrKeyReused, d.Key, -p.Delta, d.Amount)
		}
		res.Entry, res.Balance, res.Replayed = *p, cur.PriorBalance, true
		return res, nil
	}
	// An account never granted a period (no period start) has a balance
	// of 0, which no amount (above 0) fits in.
	// A meter the account was never granted in this period has a balance
	// of 0 too. One it lost mid-period keeps what it was granted (never
	// clawed back), as the default meter does on a downgrade.
	if cur.Balance < d.Amount {
		return DebitResult{}, &InsufficientError{AccountID: cur.Account.ID, Feature: d.Feature, Balance: cur.Balance, Amount: d.Amount}
	}
	res.Balance = cur.Balance - d.Amount
	res.Entry = LedgerEntry{Key: d.LedgerKey(cur.Account.ID), Kind: LedgerUsage, Plan: cur.Account.Plan,
		Delta: -d.Amount, PeriodStart: cur.Account.PeriodStart, Meter: d.Feature}
	// Only the meter's balance moves.
	move := LedgerMove{Meter: d.Feature, Kind: LedgerUsage, Key: res.Entry.Key, Delta: res.Entry.Delta,
		Plan: res.Entry.Plan, PeriodStart: res.Entry.PeriodStart}
	before := cur.Ledger.State(cur.Account)
	if c, ok := AccountChangeOf(&before, cur.Ledger.With(move).State(cur.Account), []LedgerMove{move},
		Why{Trigger: TriggerUsage, Actor: "app"}); ok {
		res.Change = &c
	}
	return res, nil
}

// InsufficientError is a debit refused for want of allowance.
type InsufficientError struct {
	AccountID int64
	Feature   string // the meter; "" the default one
	Balance   int64
	Amount    int64
}

func (e *InsufficientError) Error() string {
	if e.Feature != "" {
		return fmt.Sprintf("%s: account %d has %d of %s left, the debit asks for %d", ErrInsufficient, e.AccountID, e.Balance, e.Feature, e.Amount)
	}
	return fmt.Sprintf("%s: account %d has %d left, the debit asks for %d", ErrInsufficient, e.AccountID, e.Balance, e.Amount)
}

func (e *InsufficientError) Is(target error) bool { return target == ErrInsufficient }

// AmbiguousError names the accounts that share a user reference.
type AmbiguousError struct {
	UserRef  string
	Accounts []Account
}

func (e *AmbiguousError) Error() string {
	names := make([]string, len(e.Accounts))
	for i, a := range e.Accounts {
		names[i] = a.Provider + "/" + a.CustomerID
	}
	return fmt.Sprintf("%s %q (%s): add ?provider= or ?account= to choose one", ErrAmbiguous, e.UserRef, strings.Join(names, ", "))
}

func (e *AmbiguousError) Is(target error) bool { return target == ErrAmbiguous }
