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
	Balance int64
}

// Debit asks to spend Amount of the allowance of the account whose app
// reference is UserRef, once per Key.
type Debit struct {
	UserRef string
	// Provider, when set, picks among several accounts with UserRef.
	Provider string
	Key      string
	Amount   int64
}

// Validate reports why d cannot be a debit (wrapping ErrInvalid), or nil.
func (d Debit) Validate() error {
	if err := CheckUserRef(d.UserRef, d.Provider); err != nil {
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

// LedgerKey is the debit's ledger key for the account: one row per key.
func (d Debit) LedgerKey(accountID int64) string {
	return fmt.Sprintf("usage:%d:%s", accountID, d.Key)
}

// DebitResult is what a debit did. A repeat of a key gets the first
// request's result back (Replayed set), whatever the balance is now.
type DebitResult struct {
	AccountID int64       `json:"account_id"`
	UserRef   string      `json:"user_ref"`
	Key       string      `json:"idempotency_key"`
	Amount    int64       `json:"amount"`
	Balance   int64       `json:"balance"` // right after this debit
	Entry     LedgerEntry `json:"entry"`
	Replayed  bool        `json:"-"`
}

// InsufficientError is a debit refused for want of allowance.
type InsufficientError struct {
	AccountID int64
	Balance   int64
	Amount    int64
}

func (e *InsufficientError) Error() string {
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
	return fmt.Sprintf("%s %q (%s): add ?provider= to choose one", ErrAmbiguous, e.UserRef, strings.Join(names, ", "))
}

func (e *AmbiguousError) Is(target error) bool { return target == ErrAmbiguous }
