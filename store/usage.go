package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/billsync/billsync/reconcile"
)

// usersAccounts selects the accounts with an app reference ($1), of one
// provider when $2 is not empty.
var usersAccounts = `SELECT ` + accountColumns + ` FROM accounts
	WHERE user_ref = $1 AND ($2 = '' OR provider = $2) AND ` + ofAccount("customer_id", "$3") + ` ORDER BY id`

// ofAccount is the condition that the customer key in column is of the
// account in placeholder param: any for ”, the platform's own for
// reconcile.PlatformAccount, else a connected account's (reconcile.Connected).
func ofAccount(column, param string) string {
	return `(` + param + ` = '' OR (` + param + ` = '` + reconcile.PlatformAccount + `' AND ` + column + ` !~ '^acct_[^/]+/')
		OR starts_with(` + column + `, ` + param + ` || '/'))`
}

// ofAccountParam is ofAccount's parameter for the customers of one
// account: the platform's own for "", else the connected account's.
func ofAccountParam(account string) string {
	if account == "" {
		return reconcile.PlatformAccount
	}
	return account
}

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

// periodBalance is the sum of the account's ledger rows of one meter
// ($2; ” the default one) for its current period ($1: account id).
const periodBalance = `SELECT coalesce(sum(l.delta), 0) FROM accounts a
	JOIN ledger l ON l.account_id = a.id AND l.period_start = a.period_start AND l.meter = $2 WHERE a.id = $1`

// meterBalances reads the named meters' figures for the account's current
// period.
func meterBalances(ctx context.Context, q pgx.Tx, accountID int64) ([]reconcile.MeterBalance, error) {
	rows, _ := q.Query(ctx, `SELECT l.meter,
			coalesce(sum(l.delta) FILTER (WHERE l.kind = 'grant'), 0),
			coalesce(-sum(l.delta) FILTER (WHERE l.kind = 'usage'), 0),
			sum(l.delta)
		FROM accounts a JOIN ledger l ON l.account_id = a.id AND l.period_start = a.period_start AND l.meter <> ''
		WHERE a.id = $1 GROUP BY l.meter ORDER BY l.meter`, accountID)
	meters, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (reconcile.MeterBalance, error) {
		var m reconcile.MeterBalance
		return m, r.Scan(&m.Meter, &m.Granted, &m.Used, &m.Balance)
	})
	if err != nil {
		return nil, fmt.Errorf("read meters: %w", err)
	}
	return meters, nil
}

// connectedAccountOf reads the connected account holding a's customer;
// ok is false for the platform's own customer, and for an account of
// which no word was recorded.
func connectedAccountOf(ctx context.Context, q pgx.Tx, a reconcile.Account) (c reconcile.ConnectedAccount, ok bool, err error) {
	account, _ := reconcile.SplitConnected(a.CustomerID)
	if account == "" {
		return c, false, nil
	}
	c = reconcile.ConnectedAccount{Provider: a.Provider, Account: account}
	err = q.QueryRow(ctx, `SELECT authorized, changed_at, first_seen FROM connected_accounts
		WHERE provider = $1 AND account = $2`, a.Provider, account).Scan(&c.Authorized, &c.ChangedAt, &c.FirstSeen)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return c, false, nil
	case err != nil:
		return c, false, fmt.Errorf("read connected account %s: %w", account, err)
	}
	return c, true, nil
}

// UserAccount returns the account whose app reference is userRef (of
// provider and of account, when not empty: see ofAccount) with its
// balance and its connected account (connectedAccountOf), read in one snapshot. None
// is reconcile.ErrNotFound; several (one per provider) is a
// *reconcile.AmbiguousError.
func (s *Store) UserAccount(ctx context.Context, userRef, provider, account string) (reconcile.UserAccount, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var u reconcile.UserAccount
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		rows, _ := tx.Query(ctx, usersAccounts, userRef, provider, account)
		var err error
		if u.Account, err = oneUser(rows, userRef); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, periodBalance, u.Account.ID, "").Scan(&u.Balance); err != nil {
			return err
		}
		if u.Meters, err = meterBalances(ctx, tx, u.Account.ID); err != nil {
			return err
		}
		c, ok, err := connectedAccountOf(ctx, tx, u.Account)
		if ok {
			u.Connected = &c
		}
		return err
	})
	if err != nil {
		return reconcile.UserAccount{}, fmt.Errorf("user %q: %w", userRef, classify(err))
	}
	return u, nil
}

// Debit spends d.Amount of the allowance of d's account once per d.Key,
// as decide (reconcile.DecideDebit) says: under the account's row lock
// (which reconciles take too), it reads what decide needs (the entry the
// key already wrote, the balance) and writes the usage row decide returns,
// or nothing for a replay. decide's refusals (ErrKeyReused,
// *InsufficientError) are returned as they are, and write nothing.
func (s *Store) Debit(ctx context.Context, d reconcile.Debit, decide func(reconcile.Debit, reconcile.DebitState) (reconcile.DebitResult, error)) (reconcile.DebitResult, error) {
	if err := d.Validate(); err != nil {
		return reconcile.DebitResult{}, err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var res reconcile.DebitResult
	var refused error
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rows, _ := tx.Query(ctx, usersAccounts+` FOR UPDATE`, d.UserRef, d.Provider, d.Account)
		a, err := oneUser(rows, d.UserRef)
		if err != nil {
			return err
		}
		cur, err := debitState(ctx, tx, a, d.LedgerKey(a.ID), d.Feature)
		if err != nil {
			return err
		}
		if res, refused = decide(d, cur); refused != nil || res.Replayed {
			return refused
		}
		err = tx.QueryRow(ctx, `
			INSERT INTO ledger (account_id, entry_key, kind, period_start, period_end, plan, delta, balance_after, meter)
			VALUES ($1, $2, $3, $4, $5, NULLIF($6, ''), $7, $8, $9)
			RETURNING period_start, created_at`,
			a.ID, res.Entry.Key, res.Entry.Kind, res.Entry.PeriodStart, nullTime(a.PeriodEnd), res.Entry.Plan, res.Entry.Delta, res.Balance, res.Entry.Meter).
			Scan(&res.Entry.PeriodStart, &res.Entry.CreatedAt)
		if err != nil {
			return fmt.Errorf("write debit %s: %w", res.Entry.Key, err)
		}
		change := res.Change
		res.Change = nil // the store's to write: the caller gets the result
		return s.announce(ctx, tx, []announcement{{change: change}})
	})
	switch {
	case refused != nil:
		return reconcile.DebitResult{}, refused
	case errors.Is(err, reconcile.ErrAmbiguous):
		return reconcile.DebitResult{}, err
	case err != nil:
		return reconcile.DebitResult{}, fmt.Errorf("debit user %q key %q: %w", d.UserRef, d.Key, classify(err))
	}
	return res, nil
}

// debitState reads what a debit of account a's meter under key is decided
// on: the key's entry, and the current period's ledger of every meter
// (the meter's balance, and the app's change); the caller holds a's row
// lock, so a repeat sees the first request's commit.
func debitState(ctx context.Context, tx pgx.Tx, a reconcile.Account, key, meter string) (reconcile.DebitState, error) {
	cur := reconcile.DebitState{Account: a}
	var prior reconcile.LedgerEntry
	var balanceAfter *int64
	err := tx.QueryRow(ctx, `SELECT kind, coalesce(plan, ''), delta, period_start, coalesce(note, ''), created_at, balance_after, meter
		FROM ledger WHERE entry_key = $1`, key).Scan(&prior.Kind, &prior.Plan, &prior.Delta,
		&prior.PeriodStart, &prior.Note, &prior.CreatedAt, &balanceAfter, &prior.Meter)
	switch {
	case err == nil:
		prior.Key = key
		cur.Prior = &prior
		if balanceAfter != nil {
			cur.PriorBalance = *balanceAfter
		}
	case !errors.Is(err, pgx.ErrNoRows):
		return cur, fmt.Errorf("read debit %s: %w", key, err)
	}
	ledgers, err := readLedgers(ctx, tx, []reconcile.Account{a}, []time.Time{{}})
	if err != nil {
		return cur, err
	}
	cur.Ledger = ledgers[0]
	cur.Balance = cur.Ledger.Of(a.PeriodStart, meter).Balance
	return cur, nil
}
