package main

import (
	"flag"
	"io"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestEntitlementsSettings: the provider entitlements are off unless the
// environment or a flag turns them on; the flag wins.
func TestEntitlementsSettings(t *testing.T) {
	parse := func(env map[string]string, args ...string) config {
		t.Helper()
		var c config
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		c.bindServe(fs, func(k string) string { return env[k] })
		require.NoError(t, fs.Parse(args))
		return c
	}
	c := parse(nil)
	require.False(t, c.StripeEntitlements)
	require.False(t, c.KindeEntitlements)
	c = parse(map[string]string{"BILLSYNC_STRIPE_ENTITLEMENTS": "true", "BILLSYNC_KINDE_ENTITLEMENTS": "YES"})
	require.True(t, c.StripeEntitlements)
	require.True(t, c.KindeEntitlements)
	c = parse(map[string]string{"BILLSYNC_STRIPE_ENTITLEMENTS": "off"}, "-kinde-entitlements")
	require.False(t, c.StripeEntitlements)
	require.True(t, c.KindeEntitlements)
	c = parse(map[string]string{"BILLSYNC_STRIPE_ENTITLEMENTS": "1"}, "-stripe-entitlements=false")
	require.False(t, c.StripeEntitlements)
}
