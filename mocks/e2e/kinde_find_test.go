package e2e_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	kindemock "github.com/billsync/billsync/mocks/kinde"
	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/providers/kinde"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store/storetest"
)

// TestKindeImportFindsCustomersOnlyKindeKnows: on an empty database, a
// Kinde import finds a user's customer and an organisation's, which no
// webhook ever named, and the workers reconcile each with its plan, its
// user reference (the user's id, the org code) and trigger import. A
// sweep finds them the same way (customers whose every webhook was lost),
// with trigger sweep.
func TestKindeImportFindsCustomersOnlyKindeKnows(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{reconcile.RunImport, reconcile.RunSweep} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			kindeFinds(t, kind)
		})
	}
}

func kindeFinds(t *testing.T, kind string) {
	ctx := context.Background()
	h := newHarness(t, testenv.Kinde, testenv.Options{NoIntake: true})
	h.Kinde.SetPlan("customer_user", testenv.ProPlan)
	h.Kinde.Fake.AddUser(kindemock.User{ID: "kp_ada", Email: "ada@example.com", CustomerID: "customer_user"})
	h.Kinde.SetPlan("customer_org", testenv.TeamPlan)
	h.Kinde.Fake.AddOrganization(kindemock.Organization{Code: "org_acme", CustomerID: "customer_org"})
	sw, err := reconcile.NewSweeper(reconcile.SweeperConfig{Store: h.Store, Provider: kinde.Provider,
		Finder: h.Kinde.Client, Pace: time.Nanosecond, Plans: h.Plans})
	require.NoError(t, err)
	rep, err := sw.RunKind(ctx, kind)
	require.NoError(t, err)
	require.Equal(t, 2, rep.Run.Seen)
	h.DrainAll(h.Worker(reconcile.WorkerConfig{}), 0)
	for customer, want := range map[string][2]string{"customer_user": {"pro", "kp_ada"}, "customer_org": {"team", "org_acme"}} {
		a, err := h.Store.Account(ctx, kinde.Provider, customer)
		require.NoError(t, err, customer)
		require.Equal(t, want[0], a.Plan, customer)
		require.Equal(t, want[1], a.UserRef, customer)
	}
	for _, l := range storetest.ReconcileLog(t, h.Store) {
		require.Equal(t, rep.Run.Trigger(), l.Trigger)
	}
}
