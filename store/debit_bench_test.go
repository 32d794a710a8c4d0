package store_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store/storetest"
)

// BenchmarkDebit measures a debit's transaction (lock, read, write the
// usage row and, since named meters are announced, read the period's
// balances and write its change) on the default meter and on a named one,
// against a real database. Run with a fixed count: the team plan's
// allowance (2000 default, 5000 ai_credits) bounds it.
//
//	go test -bench Debit -benchtime 1000x -run '^$' ./store
func BenchmarkDebit(b *testing.B) {
	for name, feature := range map[string]string{"Default": "", "Named": "ai_credits"} {
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			st := storetest.NewStore(b)
			if _, err := st.StoreReceipt(ctx, reconcile.Receipt{Event: reconcile.Event{Provider: "stripe", DedupeKey: "evt_1",
				EventID: "evt_1", Type: "customer.subscription.updated", CustomerID: "cus_1", Payload: []byte(`{}`)}}); err != nil {
				b.Fatal(err)
			}
			jobs, err := st.Claim(ctx, "bench", 1, time.Hour)
			if err != nil || len(jobs) != 1 {
				b.Fatal(jobs, err)
			}
			snap := liveSnap("cus_1", "price_team")
			snap.UserRef = "u1"
			obs := time.Now()
			if _, err := st.Apply(ctx, jobs[0], obs, reconcile.NewDecider(jobs[0], snap, testenv.FeaturePlans(), obs)); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := range b.N {
				if _, err := st.Debit(ctx, reconcile.Debit{UserRef: "u1", Feature: feature, Key: strconv.Itoa(i), Amount: 1},
					reconcile.DecideDebit); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
