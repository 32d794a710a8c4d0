package reconcile_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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

func TestConnectPolicy(t *testing.T) {
	for _, tc := range []struct {
		mode, listed string
		err          bool
		serves       map[string]bool
	}{
		{mode: "", serves: map[string]bool{"": true, "acct_1": false}},
		{mode: "off", serves: map[string]bool{"": true, "acct_1": false}},
		{mode: "all", serves: map[string]bool{"": true, "acct_1": true}},
		{mode: "listed", listed: "acct_1, acct_2", serves: map[string]bool{"": true, "acct_1": true, "acct_2": true, "acct_3": false}},
		{mode: "listed", err: true},
		{mode: "all", listed: "acct_1", err: true},
		{mode: "listed", listed: "cus_1", err: true},
		{mode: "some", err: true},
	} {
		p, err := reconcile.ParseConnectPolicy(tc.mode, tc.listed)
		if tc.err {
			assert.Error(t, err, "%q %q", tc.mode, tc.listed)
			continue
		}
		require.NoError(t, err)
		for account, want := range tc.serves {
			ok, why := p.Serves(account)
			assert.Equal(t, want, ok, "%s serves %q", tc.mode, account)
			assert.Equal(t, ok, why == "", "a refusal says why")
		}
	}
}
