package store_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store/storetest"
)

// TestImports: each provider asked of, in order: imported once a run of
// it succeeded (a failed one does not count), with its running run and
// that run's progress.
func TestImports(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.NewStore(t)

	states, err := st.Imports(ctx, []string{"stripe", "kinde"})
	require.NoError(t, err)
	require.Equal(t, []reconcile.ImportState{{Provider: "stripe"}, {Provider: "kinde"}}, states, "nothing ever ran")

	failed, err := st.StartSweep(ctx, "kinde", "", reconcile.RunImport)
	require.NoError(t, err)
	require.NoError(t, st.FinishSweep(ctx, failed, errors.New("boom")))
	run, err := st.StartSweep(ctx, "stripe", "", reconcile.RunImport)
	require.NoError(t, err)
	run.Progress, run.Cursor, run.Healed = 0.4, "p2", 2
	_, err = st.SweepPage(ctx, run, []string{"cus_a", "cus_b", "cus_c"})
	require.NoError(t, err)

	states, err = st.Imports(ctx, []string{"kinde", "stripe"})
	require.NoError(t, err)
	require.Len(t, states, 2)
	require.Equal(t, reconcile.ImportState{Provider: "kinde"}, states[0], "a failed import is no import")
	require.Equal(t, "stripe", states[1].Provider)
	require.False(t, states[1].Imported)
	r := states[1].Running
	require.NotNil(t, r)
	require.Equal(t, run.ID, r.ID)
	require.Equal(t, reconcile.RunImport, r.Kind)
	require.Equal(t, "running", r.Status)
	require.Equal(t, 3, r.Seen)
	require.Equal(t, 2, r.Healed)
	require.NotNil(t, r.Progress)
	require.InDelta(t, 0.4, *r.Progress, 1e-6)
	require.True(t, states[1].Pending())

	require.NoError(t, st.FinishSweep(ctx, run, nil))
	states, err = st.Imports(ctx, []string{"stripe"})
	require.NoError(t, err)
	require.Equal(t, []reconcile.ImportState{{Provider: "stripe", Imported: true}}, states)
	require.False(t, states[0].Pending())
}
