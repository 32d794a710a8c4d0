package e2e_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/providers/stripe"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store"
	"github.com/billsync/billsync/store/storetest"
)

// BenchmarkApply measures the reconcile's write transaction (lock or create
// the account, decide, write it, the grant, the log row, mark the events,
// finish the queue row) against a real database. The provider fetch is not
// in it: `billsync bench` measures the drain with provider latency.
//
//	go test -bench Apply -run '^$' ./mocks/e2e
func BenchmarkApply(b *testing.B) {
	ctx := context.Background()
	plans := testenv.Plans()

	// NewAccount: each iteration is a first reconcile of a customer with
	// one stored event: the account is created and the allowance granted
	// (and, since the outbox, its change written). NewAccountAppEndpoint:
	// the same with one app webhook endpoint, so each change also queues a
	// delivery.
	newAccount := func(b *testing.B, st *store.Store) {
		for i := range b.N {
			body := fmt.Appendf(nil, `{"id":"evt_apply_%d","object":"event","type":"customer.subscription.updated",`+
				`"created":%d,"data":{"object":{"object":"subscription","customer":"cus_apply_%d"}}}`, i, time.Now().Unix(), i)
			if _, err := st.StoreReceipt(ctx, reconcile.Receipt{Event: stripe.ParseEvent(body)}); err != nil {
				b.Fatal(err)
			}
		}
		jobs, err := st.Claim(ctx, "bench", b.N, time.Hour)
		if err != nil || len(jobs) != b.N {
			b.Fatalf("claimed %d of %d jobs: %v", len(jobs), b.N, err)
		}
		now, err := st.Now(ctx)
		if err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		for i, job := range jobs {
			obs := now.Add(time.Duration(i+1) * time.Microsecond)
			out, err := st.Apply(ctx, job, obs, reconcile.NewDecider(job, benchSnapshot(job.CustomerID, now), plans, obs))
			if err != nil {
				b.Fatal(err)
			}
			if out.Result != reconcile.ResultApplied || out.Events != 1 {
				b.Fatalf("outcome %s (%d events): %s", out.Result, out.Events, out.Text)
			}
		}
	}
	b.Run("NewAccount", func(b *testing.B) { newAccount(b, storetest.NewStore(b)) })
	b.Run("NewAccountAppEndpoint", func(b *testing.B) {
		newAccount(b, storetest.OpenStoreWithEndpoints(b, storetest.URL(b), store.Options{}, "http://app.test/hook"))
	})

	// Unchanged: the same customer again and again (a sweep or a resync
	// of an account that is already right).
	b.Run("Unchanged", func(b *testing.B) {
		st := storetest.NewStore(b)
		now, err := st.Now(ctx)
		if err != nil {
			b.Fatal(err)
		}
		job := reconcile.Job{Provider: "stripe", CustomerID: "cus_same", Trigger: reconcile.TriggerResync}
		snap := benchSnapshot(job.CustomerID, now)
		if _, err := st.Apply(ctx, job, now, reconcile.NewDecider(job, snap, plans, now)); err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		for i := range b.N {
			obs := now.Add(time.Duration(i+1) * time.Microsecond)
			out, err := st.Apply(ctx, job, obs, reconcile.NewDecider(job, snap, plans, obs))
			if err != nil {
				b.Fatal(err)
			}
			if out.Result != reconcile.ResultUnchanged {
				b.Fatalf("outcome %s: %s", out.Result, out.Text)
			}
		}
	})
}

func benchSnapshot(customerID string, now time.Time) reconcile.Snapshot {
	start := now.Add(-24 * time.Hour).Truncate(time.Second)
	s := oneSub(customerID, "active", start, start.AddDate(0, 1, 0), "pro", "price_pro")
	s.UserRef, s.Subscriptions[0].ID = "user_"+customerID, "sub_"+customerID
	return s
}
