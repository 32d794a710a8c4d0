package server_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/server"
)

// newImportEnv is the app API with Stripe and Kinde configured, reading
// the import state afresh on every answer.
func newImportEnv(t *testing.T) *appEnv {
	return newAppEnvWith(t, appToken, func(a *server.App) {
		a.Imports, a.Providers = a.Store.(server.ImportStates), []string{"stripe", "kinde"}
		a.ImportStateTTL = time.Nanosecond
	})
}

// imports returns an answer's imports by provider.
func imports(t *testing.T, a appAnswer) map[string]map[string]any {
	t.Helper()
	list, ok := a.json(t)["imports"].([]any)
	require.True(t, ok, "no imports in %s", a.body)
	out := map[string]map[string]any{}
	for _, i := range list {
		m := i.(map[string]any)
		out[m["provider"].(string)] = m
	}
	return out
}

func TestAppUnknownUserDuringImport(t *testing.T) {
	e := newImportEnv(t)
	ctx := context.Background()
	e.account("stripe", "cus_known", "known", "price_pro")

	// Never imported, nothing running: not known yet, pending.
	a := e.do("GET", "/api/users/nobody", appToken, "")
	require.Equal(t, 404, a.code, a.body)
	require.Equal(t, server.ImportPending, a.header.Get(server.ImportHeader))
	byProvider := imports(t, a)
	require.Len(t, byProvider, 2)
	require.Equal(t, "pending", byProvider["stripe"]["status"])
	require.Equal(t, "pending", byProvider["kinde"]["status"])

	// A known user is answered as ever.
	require.Equal(t, 200, e.do("GET", "/api/users/known", appToken, "").code)

	// Stripe's import runs and has listed a quarter.
	run, err := e.st.StartSweep(ctx, "stripe", "", reconcile.RunImport)
	require.NoError(t, err)
	run.Progress, run.Cursor = 0.25, "page1"
	_, err = e.st.SweepPage(ctx, run, []string{"cus_a", "cus_b", "cus_c"})
	require.NoError(t, err)

	a = e.do("GET", "/api/users/nobody", appToken, "")
	require.Equal(t, 404, a.code, a.body)
	require.Equal(t, server.ImportRunning, a.header.Get(server.ImportHeader))
	stripe := imports(t, a)["stripe"]
	require.Equal(t, "running", stripe["status"])
	require.Equal(t, "import", stripe["kind"])
	require.InDelta(t, 3, stripe["seen"], 0)
	require.InDelta(t, 0.25, stripe["progress"], 1e-6)
	require.Contains(t, stripe, "eta_seconds")
	require.Contains(t, a.json(t)["error"], "stripe's import is running: 3 customers seen, 25% done")

	// Asked of Kinde only: Stripe's import is not its business.
	a = e.do("GET", "/api/users/nobody?provider=kinde", appToken, "")
	require.Equal(t, server.ImportPending, a.header.Get(server.ImportHeader))
	require.Equal(t, []string{"kinde"}, keys(imports(t, a)))

	// The other routes that 404 on an unknown user say it too.
	a = e.debit("nobody", "k1", 1)
	require.Equal(t, 404, a.code, a.body)
	require.Equal(t, server.ImportRunning, a.header.Get(server.ImportHeader))

	// Both imported (Kinde by a sweep): a plain 404, the user is no customer.
	require.NoError(t, e.st.FinishSweep(ctx, run, nil))
	kinde, err := e.st.StartSweep(ctx, "kinde", "", reconcile.RunSweep)
	require.NoError(t, err)
	require.NoError(t, e.st.FinishSweep(ctx, kinde, nil))
	a = e.do("GET", "/api/users/nobody", appToken, "")
	require.Equal(t, 404, a.code, a.body)
	require.Empty(t, a.header.Get(server.ImportHeader))
	require.NotContains(t, a.json(t), "imports")

	// A second import of Stripe running makes its users unknown again.
	again, err := e.st.StartSweep(ctx, "stripe", "", reconcile.RunImport)
	require.NoError(t, err)
	a = e.do("GET", "/api/users/nobody", appToken, "")
	require.Equal(t, server.ImportRunning, a.header.Get(server.ImportHeader))
	require.Equal(t, []string{"stripe"}, keys(imports(t, a)))
	require.NoError(t, e.st.FinishSweep(ctx, again, nil))
}

func keys(m map[string]map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// importStates is a server.ImportStates answering fn, counting the reads.
type importStates struct {
	reads atomic.Int64
	fn    func() ([]reconcile.ImportState, error)
}

func (s *importStates) Imports(context.Context, []string) ([]reconcile.ImportState, error) {
	s.reads.Add(1)
	return s.fn()
}

// TestAppImportStateRead: the import state is read once per TTL however
// many unknown users are asked of, and not at all for a known one; a
// failed read is the database's failure (503), never a plain 404.
func TestAppImportStateRead(t *testing.T) {
	states := &importStates{fn: func() ([]reconcile.ImportState, error) {
		return []reconcile.ImportState{{Provider: "stripe"}}, nil
	}}
	e := newAppEnvWith(t, appToken, func(a *server.App) {
		a.Imports, a.Providers, a.ImportStateTTL = states, []string{"stripe"}, time.Hour
	})
	e.account("stripe", "cus_known", "known", "price_pro")
	require.Equal(t, 200, e.do("GET", "/api/users/known", appToken, "").code)
	require.Zero(t, states.reads.Load(), "a known user needs no import state")
	for _, user := range []string{"a", "b", "c"} {
		a := e.do("GET", "/api/users/"+user, appToken, "")
		require.Equal(t, server.ImportPending, a.header.Get(server.ImportHeader), a.body)
	}
	require.Equal(t, int64(1), states.reads.Load())

	failing := &importStates{fn: func() ([]reconcile.ImportState, error) {
		return nil, fmt.Errorf("read: %w", reconcile.ErrStoreUnavailable)
	}}
	e = newAppEnvWith(t, appToken, func(a *server.App) { a.Imports, a.Providers = failing, []string{"stripe"} })
	a := e.do("GET", "/api/users/nobody", appToken, "")
	require.Equal(t, 503, a.code, a.body)
	require.Empty(t, a.header.Get(server.ImportHeader))
}
