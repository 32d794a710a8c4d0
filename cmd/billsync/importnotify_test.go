package main

import (
	"flag"
	"io"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestImportNotifySetting: an import's changes go to the app's webhooks
// unless BILLSYNC_IMPORT_NOTIFY or -import-notify is false (the flag over
// the variable); a value that is no boolean stops serve naming it.
func TestImportNotifySetting(t *testing.T) {
	parse := func(env string, args ...string) (config, error) {
		var c config
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		c.bindServe(fs, func(k string) string {
			if k == "BILLSYNC_IMPORT_NOTIFY" {
				return env
			}
			return ""
		})
		if err := fs.Parse(args); err != nil {
			return c, err
		}
		return c, c.importNotifyErr
	}
	c, err := parse("")
	require.NoError(t, err)
	require.False(t, c.QuietImports, "imports notify by default")
	c, err = parse("false")
	require.NoError(t, err)
	require.True(t, c.QuietImports)
	c, err = parse("", "-import-notify=false")
	require.NoError(t, err)
	require.True(t, c.QuietImports)
	c, err = parse("false", "-import-notify")
	require.NoError(t, err)
	require.False(t, c.QuietImports, "the flag wins")
	_, err = parse("later")
	require.ErrorContains(t, err, `BILLSYNC_IMPORT_NOTIFY "later"`)
	_, err = parse("", "-import-notify=later")
	require.ErrorContains(t, err, `-import-notify "later"`)
}
