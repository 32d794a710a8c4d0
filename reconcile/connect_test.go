package reconcile_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/billsync/billsync/reconcile"
)

func TestConnectedKeys(t *testing.T) {
	for _, tc := range []struct {
		key, account, id string
	}{
		{"cus_1", "", "cus_1"},
		{"acct_9/cus_1", "acct_9", "cus_1"},
		{"acct_9/related:subscription:sub_1", "acct_9", "related:subscription:sub_1"},
		{"related:subscription:sub_1", "", "related:subscription:sub_1"},
		{"acct_/cus_1", "", "acct_/cus_1"},   // no account id: not a connected key
		{"other/cus_1", "", "other/cus_1"},   // not an account: kept whole
		{"customer_abc", "", "customer_abc"}, // Kinde's
	} {
		account, id := reconcile.SplitConnected(tc.key)
		assert.Equal(t, tc.account, account, tc.key)
		assert.Equal(t, tc.id, id, tc.key)
		if tc.account != "" {
			assert.Equal(t, tc.key, reconcile.Connected(account, id))
		}
	}
	assert.Equal(t, "cus_1", reconcile.Connected("", "cus_1"))
}

func FuzzSplitConnected(f *testing.F) {
	for _, s := range []string{"cus_1", "acct_1/cus_2", "acct_/x", "acct_1/", "/", "acct_1/acct_2/cus_3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		account, id := reconcile.SplitConnected(key)
		if reconcile.Connected(account, id) != key {
			t.Fatalf("%q splits into %q, %q, which do not join back", key, account, id)
		}
	})
}
