package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/billsync/billsync/reconcile"
)

// usersAccounts selects the accounts with an app reference ($1), of one
// provider when $2 is not empty.
const usersAccounts = `SELECT ` + accountColumns + ` FROM accounts
	WHERE user_ref = $1 AND ($2 = '' OR provider = $2) ORDER BY id`

// oneUser returns the one account rows hold: none is ErrNotFound, several
// an *AmbiguousError.
func oneUser(rows pgx.Rows, userRef string) (reconcile.Account, error) {
	accounts, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (reconcile.Account, error) { return scanAccount(r) })
	switch {
	case err != nil:
		return reconcile.Account{}, err
	case len(accounts) == 0:
		return reconcile.Account{}, fmt.Errorf("no account has user reference %q: %w", userRef, reconcile.ErrNotFound)
	case len(accounts) > 1:
		return reconcile.Account{}, &reconcile.AmbiguousError{UserRef: userRef, Accounts: accounts}
	}
	return accounts[0], nil
}

// periodBalance is the sum of the account's ledger rows for its current
// period ($1: account id).
const periodBalance = `SELECT coalesce(sum(l.delta), 0) FROM accounts a
	JOIN ledger l ON l.account_id = a.id AND l.period_start = a.period_start WHERE a.id = $1`

// UserAccount returns the account whose app reference is userRef (of
// provider, when not empty) with its balance, read in one snapshot. None
// is reconcile.ErrNotFound; several (one per provider) is a
// *reconcile.AmbiguousError.
func (s *Store) UserAccount(ctx context.Context, userRef, provider string) (reconcile.UserAccount, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var u reconcile.UserAccount
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		rows, _ := tx.Query(ctx, usersAccounts, userRef, provider)
		var err error
		if u.Account, err = oneUser(rows, userRef); err != nil {
			return err
		}
		return tx.QueryRow(ctx, periodBalance, u.Account.ID).Scan(&u.Balance)
	})
	if err != nil {
		return reconcile.UserAccount{}, fmt.Errorf("user %q: %w", userRef, classify(err))
	}
	return u, nil
}

// Debit spends d.Amount of the allowance of d's account once per d.Key:
// under the account's row lock (which reconciles take too), it answers a
// key already used with that debit's result, refuses a short balance with
// a *reconcile.InsufficientError, and otherwise writes a usage row for the
// account's current period. Refusals write nothing.
func (s *Store) Debit(ctx context.Context, d reconcile.Debit) (reconcile.DebitResult, error) {
	if err := d.Validate(); err != nil {
		return reconcile.DebitResult{}, err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var res reconcile.DebitResult
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rows, _ := tx.Query(ctx, usersAccounts+` FOR UPDATE`, d.UserRef, d.Provider)
		a, err := oneUser(rows, d.UserRef)
		if err != nil {
			return err
		}
		key := d.LedgerKey(a.ID)
		res = reconcile.DebitResult{AccountID: a.ID, UserRef: d.UserRef, Key: d.Key, Amount: d.Amount}
		// A repeat: the row lock makes the first request's commit visible.
		var balanceAfter *int64
		err = tx.QueryRow(ctx, `SELECT kind, coalesce(plan, ''), delta, period_start, coalesce(note, ''), created_at, balance_after
			FROM ledger WHERE entry_key = $1`, key).Scan(&res.Entry.Kind, &res.Entry.Plan, &res.Entry.Delta,
			&res.Entry.PeriodStart, &res.Entry.Note, &res.Entry.CreatedAt, &balanceAfter)
		switch {
		case err == nil:
			if -res.Entry.Delta != d.Amount {
				return fmt.Errorf("%w: key %q debited %d, this request asks for %d", reconcile.ErrKeyReused, d.Key, -res.Entry.Delta, d.Amount)
			}
			res.Entry.Key, res.Replayed = key, true
			if balanceAfter != nil {
				res.Balance = *balanceAfter
			}
			return nil
		case !errors.Is(err, pgx.ErrNoRows):
			return fmt.Errorf("read debit %s: %w", key, err)
		}
		var balance int64
		if err := tx.QueryRow(ctx, periodBalance, a.ID).Scan(&balance); err != nil {
			return fmt.Errorf("read balance: %w", err)
		}
		// An account never granted a period (period_start NULL) has a
		// balance of 0, which no amount (above 0) fits in.
		if balance < d.Amount {
			return &reconcile.InsufficientError{AccountID: a.ID, Balance: balance, Amount: d.Amount}
		}
		res.Balance = balance - d.Amount
		res.Entry = reconcile.LedgerEntry{Key: key, Kind: "usage", Plan: a.Plan, Delta: -d.Amount}
		err = tx.QueryRow(ctx, `
			INSERT INTO ledger (account_id, entry_key, kind, period_start, period_end, plan, delta, balance_after)
			VALUES ($1, $2, 'usage', $3, $4, NULLIF($5, ''), $6, $7)
			RETURNING period_start, created_at`,
			a.ID, key, a.PeriodStart, nullTime(a.PeriodEnd), a.Plan, -d.Amount, res.Balance).
			Scan(&res.Entry.PeriodStart, &res.Entry.CreatedAt)
		if err != nil {
			return fmt.Errorf("write debit %s: %w", key, err)
		}
		return nil
	})
	if err != nil {
		var insufficient *reconcile.InsufficientError
		if errors.As(err, &insufficient) || errors.Is(err, reconcile.ErrAmbiguous) || errors.Is(err, reconcile.ErrKeyReused) {
			return reconcile.DebitResult{}, err
		}
		return reconcile.DebitResult{}, fmt.Errorf("debit user %q key %q: %w", d.UserRef, d.Key, classify(err))
	}
	return res, nil
}
