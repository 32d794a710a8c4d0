package main

import (
	"flag"
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/reconcile"
)

// TestSampleShareSetting: -sample-share and BILLSYNC_SAMPLE_SHARE default
// to reconcile.DefaultSampleShare, 0 turns the sample off, the flag wins,
// and a share that is not a number from 0 to 1 stops serve.
func TestSampleShareSetting(t *testing.T) {
	parse := func(env string, args ...string) config {
		var c config
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		c.bindServe(fs, func(k string) string {
			if k == "BILLSYNC_SAMPLE_SHARE" {
				return env
			}
			return ""
		})
		require.NoError(t, fs.Parse(args))
		return c
	}
	require.Equal(t, reconcile.DefaultSampleShare, parse("").SampleShare)
	require.Zero(t, parse("0").SampleShare)
	require.Equal(t, 0.2, parse("0", "-sample-share", "0.2").SampleShare, "the flag wins")
	for _, bad := range []string{"lots", "1.5", "-0.1"} {
		c := parse(bad)
		require.ErrorContains(t, c.validateServe(), "SAMPLE_SHARE", bad)
	}
	c := parse("", "-sample-share", "2")
	require.ErrorContains(t, c.validateServe(), "-sample-share 2")
	require.Equal(t, 0.1, parse("lots", "-sample-share", "0.1").SampleShare, "a good flag replaces a bad variable")
	c = parse("lots", "-sample-share", "0.1")
	require.NotContains(t, c.validateServe().Error(), "SAMPLE_SHARE")
	c = parse("")
	require.NotContains(t, c.validateServe().Error(), "sample", "the default is valid")
}
