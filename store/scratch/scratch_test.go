package scratch_test

import (
	"context"
	"crypto/rand"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store"
	"github.com/billsync/billsync/store/scratch"
	"github.com/billsync/billsync/store/storetest"
)

func TestMain(m *testing.M) { os.Exit(storetest.Main(m)) }

// TestCreateDatabaseAndDrop: the database is new, empty and next to the
// given one; drop removes it.
func TestCreateDatabaseAndDrop(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	probe := storetest.NewStore(t)
	// A name of this run's own, dropped even when the test fails half way.
	name := "billsync_scratch_" + strings.ToLower(rand.Text()[:12])
	st, drop, err := scratch.CreateDatabase(ctx, storetest.URL(t), name, store.Options{MaxConns: 3})
	require.NoError(t, err)
	t.Cleanup(func() { _ = drop(context.Background()) })
	require.Equal(t, []string{name}, storetest.Databases(t, probe, name))
	require.Equal(t, 3, scratch.MaxConns(st))
	pending, err := st.Pending(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, pending, "a new database holds no schema")
	_, err = st.Migrate(ctx)
	require.NoError(t, err)

	// URL names the same database: a store opened on it sees its rows.
	_, err = st.StoreReceipt(ctx, delivery("evt_1", "cus_1"))
	require.NoError(t, err)
	again := storetest.OpenStore(t, scratch.URL(st), store.Options{})
	stats, err := scratch.ReadStats(ctx, again)
	require.NoError(t, err)
	require.Equal(t, scratch.Stats{Events: 1, Receipts: 1, Pending: 1, Queued: 1, SeenCountSum: 1}, stats)
	again.Close()

	require.NoError(t, drop(ctx))
	require.Empty(t, storetest.Databases(t, probe, name))
}

func delivery(key, customer string) reconcile.Receipt {
	return reconcile.Receipt{Event: reconcile.Event{Provider: "stripe", DedupeKey: key, EventID: key,
		Type: "customer.subscription.updated", CustomerID: customer, Payload: []byte(`{}`)}}
}

var errKilled = errors.New("killed")

// TestCrashAfterAccountWrite: the installed fault aborts Apply after its
// account write (nothing written), and may be set and removed while
// reconciles run (the race detector watches).
func TestCrashAfterAccountWrite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.NewStore(t)
	plans, err := reconcile.ParsePlans(reconcile.ExamplePlans)
	require.NoError(t, err)
	apply := func(customer string) error {
		if _, err := st.StoreReceipt(ctx, delivery("evt_"+customer, customer)); err != nil {
			return err
		}
		job, err := st.Hold(ctx, "stripe", customer, reconcile.TriggerResync, "test-"+customer, time.Minute)
		if err != nil {
			return err
		}
		now, err := st.Now(ctx)
		if err != nil {
			return err
		}
		start := now.Truncate(time.Hour)
		snap := reconcile.Snapshot{Provider: "stripe", CustomerID: customer, Subscriptions: []reconcile.Subscription{{
			ID: "sub_" + customer, Status: "active", Items: []reconcile.Item{{PriceRefs: []string{"price_pro"}, Quantity: 1,
				PeriodStart: start, PeriodEnd: start.AddDate(0, 1, 0)}}}}}
		_, err = st.Apply(ctx, job, now, reconcile.NewDecider(job, snap, plans, now))
		return err
	}

	scratch.CrashAfterAccountWrite(st, func() error { return errKilled })
	require.ErrorIs(t, apply("cus_crash"), errKilled)
	_, err = st.Account(ctx, "stripe", "cus_crash")
	require.ErrorIs(t, err, reconcile.ErrNotFound, "the account write rolled back")
	scratch.CrashAfterAccountWrite(st, nil)
	require.NoError(t, apply("cus_crash"))

	// Set and removed while other reconciles run.
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
				scratch.CrashAfterAccountWrite(st, func() error { return errKilled })
				scratch.CrashAfterAccountWrite(st, nil)
			}
		}
	})
	for _, c := range []string{"cus_a", "cus_b", "cus_c", "cus_d"} {
		err := apply(c)
		_, read := st.Account(ctx, "stripe", c)
		if err != nil {
			require.ErrorIs(t, err, errKilled)
			require.ErrorIs(t, read, reconcile.ErrNotFound, "a killed apply wrote nothing")
		} else {
			require.NoError(t, read, "an apply that went through wrote the account")
		}
	}
	close(stop)
	wg.Wait()
}
