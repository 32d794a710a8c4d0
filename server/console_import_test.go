package server_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/server"
)

// TestConsoleShowsAnImport: a running import shows on the overview with
// its progress, pace and time left, apart from the last sweep (which a
// newer import of the same provider does not hide), and on the sweeps
// page in a table of its own.
func TestConsoleShowsAnImport(t *testing.T) {
	e := newAdminEnv(t, adminToken)
	ctx := context.Background()
	for _, provider := range []string{"kinde", "stripe"} {
		sweep, err := e.st.StartSweep(ctx, provider, "", reconcile.RunSweep)
		require.NoError(t, err)
		require.NoError(t, e.st.FinishSweep(ctx, sweep, nil))
	}
	run, err := e.st.StartSweep(ctx, "stripe", "", reconcile.RunImport)
	require.NoError(t, err)
	run.Progress, run.Cursor = 0.5, "page1"
	_, err = e.st.SweepPage(ctx, run, []string{"cus_a", "cus_b"})
	require.NoError(t, err)

	srv := httptest.NewServer(server.New(server.Config{Inbox: e.st, Admin: server.Admin{Token: adminToken, Store: e.st}}))
	t.Cleanup(srv.Close)
	e.url = srv.URL
	b := e.browser()
	b.signIn(adminToken)
	section := func(body, id string) string {
		t.Helper()
		i := strings.Index(body, `id="`+id+`"`)
		require.GreaterOrEqual(t, i, 0, "no #%s in %s", id, body)
		return body[i:min(len(body), i+1200)]
	}

	code, body := b.get("/admin/")
	require.Equal(t, 200, code, body)
	imp := section(body, "import")
	require.Contains(t, imp, `stripe: <span class="status running">importing</span> started just now, 2 customers, 50% done`)
	require.Regexp(t, `\d+ customers/s, about a minute left`, imp)
	require.Contains(t, imp, `<progress max="100" value="50">`)
	last := section(body, "last-sweep")
	last = last[:strings.Index(last, "</div>")]
	require.Contains(t, last, `kinde: <span class="status succeeded">succeeded</span>`)
	require.Contains(t, last, `stripe: <span class="status succeeded">succeeded</span>`, "the last sweep, though an import is newer")
	require.NotContains(t, last, "running", "the import is not a sweep")

	code, body = b.get("/admin/sweeps")
	require.Equal(t, 200, code, body)
	imports := section(body, "imports")
	imports = imports[:strings.Index(imports, "</table>")]
	require.Regexp(t, `<td data-label="Provider">stripe</td>`, imports)
	require.Contains(t, imports, `<td data-label="Done" class="num">50%</td>`)
	require.NotContains(t, imports, "kinde")
	sweeps := section(body, "sweeps")
	sweeps = sweeps[:strings.Index(sweeps, "</table>")]
	require.Contains(t, sweeps, `<td data-label="Provider">kinde</td>`)
	require.Contains(t, sweeps, `<td data-label="Provider">stripe</td>`)
	require.NotContains(t, sweeps, "running", "the running import is not a sweep")
}
