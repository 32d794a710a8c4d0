package reconcile_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/mocks/mock"
	"github.com/billsync/billsync/reconcile"
)

func TestRelatedKey(t *testing.T) {
	obj := reconcile.Related{Type: "subscription", ID: "sub_1"}
	require.Equal(t, "related:subscription:sub_1", obj.Key())
	got, ok := reconcile.RelatedOf(obj.Key())
	require.True(t, ok)
	require.Equal(t, obj, got)
	for _, customer := range []string{"cus_1", "", "related:", "related:subscription:", "related::sub_1"} {
		_, ok := reconcile.RelatedOf(customer)
		require.False(t, ok, customer)
	}
}

// TestWorkerResolvesARelatedObject: a job keyed by a thin event's object
// is read from the provider by the worker (the intake never asks), handed
// to the customer in the store, and the customer reconciled in the same
// job; an object naming no customer ends ignored; a customer queued
// already answers the events itself, with no fetch here.
func TestWorkerResolvesARelatedObject(t *testing.T) {
	obj := reconcile.Related{Type: "subscription", ID: "sub_1"}
	objectJob := reconcile.Job{ID: 7, Provider: "stripe", CustomerID: obj.Key(), Trigger: reconcile.TriggerWebhook}
	setup := func(t *testing.T, customer string, queued bool) (*reconcile.Worker, *[]string) {
		var calls []string
		st := &mock.Store{
			ClaimFn: func(context.Context, string, int, time.Duration) ([]reconcile.Job, error) {
				if len(calls) > 0 {
					return nil, nil
				}
				return []reconcile.Job{objectJob}, nil
			},
			ExtendFn: func(_ context.Context, _ string, jobs []reconcile.Job, _ time.Duration) (int, error) {
				return len(jobs), nil
			},
			NowFn: func(context.Context) (time.Time, error) { return time.Now(), nil },
			ResolveFn: func(_ context.Context, job reconcile.Job, customerID string) (reconcile.Job, bool, error) {
				require.Equal(t, objectJob, job)
				calls = append(calls, "resolve "+customerID)
				job.CustomerID = customerID
				return job, !queued, nil
			},
			ApplyFn: func(_ context.Context, job reconcile.Job, _ time.Time, _ reconcile.Decider) (reconcile.Outcome, error) {
				calls = append(calls, "apply "+job.CustomerID)
				return reconcile.Outcome{Result: reconcile.ResultApplied}, nil
			},
			IgnoreFn: func(_ context.Context, job reconcile.Job, _ time.Time, out reconcile.Outcome) (reconcile.Outcome, error) {
				calls = append(calls, "ignore "+job.CustomerID+": "+out.Text)
				return out, nil
			},
		}
		p := &mock.Provider{ProviderName: "stripe",
			CustomerOfFn: func(_ context.Context, got reconcile.Related) (string, error) {
				require.Equal(t, obj, got)
				calls = append(calls, "customer of "+got.String())
				return customer, nil
			},
			FetchFn: func(ctx context.Context, customerID string) (reconcile.Snapshot, error) {
				calls = append(calls, "fetch "+customerID)
				return liveSnapshot(ctx, customerID)
			},
		}
		return newUnitWorker(t, reconcile.WorkerConfig{Store: st, Providers: []reconcile.Provider{p}}), &calls
	}

	t.Run("Resolved", func(t *testing.T) {
		w, calls := setup(t, "cus_1", false)
		_, err := w.Drain(context.Background())
		require.NoError(t, err)
		require.Equal(t, []string{"customer of subscription sub_1", "resolve cus_1", "fetch cus_1", "apply cus_1"}, *calls)
	})
	t.Run("NamesNoCustomer", func(t *testing.T) {
		w, calls := setup(t, "", false)
		_, err := w.Drain(context.Background())
		require.NoError(t, err)
		require.Equal(t, []string{"customer of subscription sub_1",
			"ignore related:subscription:sub_1: ignored: subscription sub_1 names no customer"}, *calls)
	})
	t.Run("CustomerQueuedAlready", func(t *testing.T) {
		w, calls := setup(t, "cus_1", true)
		_, err := w.Drain(context.Background())
		require.NoError(t, err)
		require.Equal(t, []string{"customer of subscription sub_1", "resolve cus_1"}, *calls, "the customer's own row reconciles it")
	})
}
