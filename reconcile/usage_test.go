package reconcile_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/reconcile"
)

// TestDecideDebit is the debit's decision table: replay, key reused with
// another amount, short balance, debit. No database: the store only reads
// the state and writes the result.
func TestDecideDebit(t *testing.T) {
	period := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	account := reconcile.Account{ID: 7, Provider: "stripe", CustomerID: "cus_1", Plan: "pro", PeriodStart: period, PeriodEnd: period.AddDate(0, 1, 0)}
	req := reconcile.Debit{UserRef: "u1", Key: "k1", Amount: 4}
	first := &reconcile.LedgerEntry{Key: "usage:7:k1", Kind: "usage", Plan: "pro", Delta: -4, PeriodStart: period,
		CreatedAt: period.Add(time.Hour)}
	want := func(balance int64, entry reconcile.LedgerEntry, replayed bool) reconcile.DebitResult {
		return reconcile.DebitResult{AccountID: 7, UserRef: "u1", Key: "k1", Amount: 4, Balance: balance, Entry: entry, Replayed: replayed}
	}
	debit := reconcile.LedgerEntry{Key: "usage:7:k1", Kind: "usage", Plan: "pro", Delta: -4, PeriodStart: period}
	tests := map[string]struct {
		cur     reconcile.DebitState
		want    reconcile.DebitResult
		wantErr error
		short   *reconcile.InsufficientError
	}{
		"Debit":        {cur: reconcile.DebitState{Account: account, Balance: 10}, want: want(6, debit, false)},
		"DebitToZero":  {cur: reconcile.DebitState{Account: account, Balance: 4}, want: want(0, debit, false)},
		"ErrShort":     {cur: reconcile.DebitState{Account: account, Balance: 3}, short: &reconcile.InsufficientError{AccountID: 7, Balance: 3, Amount: 4}},
		"ErrNoPeriod":  {cur: reconcile.DebitState{Account: reconcile.Account{ID: 7}}, short: &reconcile.InsufficientError{AccountID: 7, Balance: 0, Amount: 4}},
		"ErrOverdrawn": {cur: reconcile.DebitState{Account: account, Balance: -2}, short: &reconcile.InsufficientError{AccountID: 7, Balance: -2, Amount: 4}},
		// A repeat answers the first result, whatever the balance is now.
		"Replay":          {cur: reconcile.DebitState{Account: account, Prior: first, PriorBalance: 6, Balance: 1}, want: want(6, *first, true)},
		"ReplayOldEntry":  {cur: reconcile.DebitState{Account: account, Prior: first, Balance: 9}, want: want(0, *first, true)},
		"ErrKeyReused":    {cur: reconcile.DebitState{Account: account, Prior: &reconcile.LedgerEntry{Key: "usage:7:k1", Kind: "usage", Delta: -5}, PriorBalance: 5, Balance: 100}, wantErr: reconcile.ErrKeyReused},
		"ErrKeyReusedBig": {cur: reconcile.DebitState{Account: account, Prior: &reconcile.LedgerEntry{Key: "usage:7:k1", Kind: "usage", Delta: -3}, Balance: 0}, wantErr: reconcile.ErrKeyReused},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := reconcile.DecideDebit(req, tt.cur)
			switch {
			case tt.short != nil:
				var short *reconcile.InsufficientError
				require.ErrorAs(t, err, &short)
				require.ErrorIs(t, err, reconcile.ErrInsufficient)
				require.Equal(t, *tt.short, *short)
				require.Zero(t, got)
			case tt.wantErr != nil:
				require.ErrorIs(t, err, tt.wantErr)
				require.Zero(t, got)
			default:
				require.NoError(t, err)
				// What the app is told is TestDecideDebitChange's.
				require.Equal(t, !tt.want.Replayed, got.Change != nil, "a debit that writes tells the app")
				got.Change = nil
				require.Equal(t, tt.want, got)
			}
		})
	}
}
