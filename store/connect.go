package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/billsync/billsync/reconcile"
)

// saveAuthorizationsSQL records words about connected accounts (for the
// provider in placeholder provider; the arrays accounts, authorized and
// at: the accounts, whether each authorises the platform, and each word's
// time; one word per account) unless the word kept is as new or newer. A
// statement of its own, or a CTE of the intake's.
func saveAuthorizationsSQL(provider, accounts, authorized, at string) string {
	return `
	INSERT INTO connected_accounts AS c (provider, account, authorized, changed_at)
	SELECT ` + provider + `, account, authorized, at
	FROM unnest(` + accounts + `::text[], ` + authorized + `::boolean[], ` + at + `::timestamptz[]) AS w (account, authorized, at)
	ON CONFLICT (provider, account) DO UPDATE
		SET authorized = excluded.authorized, changed_at = excluded.changed_at, updated_at = now()
		WHERE excluded.changed_at > c.changed_at`
}

// SaveAuthorizations records each word newer than the one kept for its
// account (of several words about one account, the newest).
func (s *Store) SaveAuthorizations(ctx context.Context, provider string, words []reconcile.Authorization) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	newest := map[string]reconcile.Authorization{}
	for _, w := range words {
		if old, ok := newest[w.Account]; !ok || w.At.After(old.At) {
			newest[w.Account] = w
		}
	}
	var accounts []string
	var authorized []bool
	var at []time.Time
	for _, w := range newest {
		accounts, authorized, at = append(accounts, w.Account), append(authorized, w.Authorized), append(at, w.At)
	}
	if _, err := s.pool.Exec(ctx, saveAuthorizationsSQL("$1", "$2", "$3", "$4"), provider, accounts, authorized, at); err != nil {
		return fmt.Errorf("save %d %s connected accounts: %w", len(newest), provider, classify(err))
	}
	return nil
}

// ConnectedAccounts lists the provider's connected accounts, by id.
func (s *Store) ConnectedAccounts(ctx context.Context, provider string) ([]reconcile.ConnectedAccount, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, _ := s.pool.Query(ctx, `
		SELECT provider, account, authorized, changed_at, first_seen
		FROM connected_accounts WHERE provider = $1 ORDER BY account`, provider)
	accounts, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (a reconcile.ConnectedAccount, err error) {
		err = row.Scan(&a.Provider, &a.Account, &a.Authorized, &a.ChangedAt, &a.FirstSeen)
		return a, err
	})
	if err != nil {
		return nil, fmt.Errorf("list %s connected accounts: %w", provider, classify(err))
	}
	return accounts, nil
}

// ConnectedAccountViews lists the connected accounts of every provider
// (at most limit, by provider and id) with how many customers billsync
// keeps of each: the console's page. The count reads the accounts index
// by its key's range ("acct_X/" up to "acct_X0", '0' following '/').
func (s *Store) ConnectedAccountViews(ctx context.Context, limit int) ([]reconcile.ConnectedAccountView, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, _ := s.pool.Query(ctx, `
		SELECT c.provider, c.account, c.authorized, c.changed_at, c.first_seen,
			(SELECT count(*) FROM accounts a WHERE a.provider = c.provider
				AND a.customer_id >= c.account || '/' AND a.customer_id < c.account || '0')
		FROM connected_accounts c ORDER BY c.provider, c.account LIMIT $1`, limit)
	views, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (v reconcile.ConnectedAccountView, err error) {
		err = row.Scan(&v.Provider, &v.Account, &v.Authorized, &v.ChangedAt, &v.FirstSeen, &v.Customers)
		return v, err
	})
	if err != nil {
		return nil, fmt.Errorf("list connected accounts: %w", classify(err))
	}
	return views, nil
}
