package main

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	stripemock "github.com/billsync/billsync/mocks/stripe"
	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/providers/stripe"
	"github.com/billsync/billsync/store"
	"github.com/billsync/billsync/store/storetest"
)

// TestReplicasShareOneStripeBudget: two serve processes running workers on
// one database, against one fake Stripe that enforces a global rate and a
// rate per operation as Stripe does. A burst of reconciles, deeper than
// either's share can read in time, is read by both together within the
// account's limits (the fake answers no 429), and every read either made is
// in the shared record in PostgreSQL (provider_reads), operation by
// operation.
func TestReplicasShareOneStripeBudget(t *testing.T) {
	ctx := context.Background()
	// Small limits keep the burst short: two read operations at 5/s each
	// fill the global 10/s exactly, so both limits bind. Only billsync's
	// key is limited; the test seeds on the driver's key.
	const global, perOperation = 10, 5
	h := testenv.ForTest(t, testenv.Stripe, testenv.Options{Stripe: testenv.StripeOptions{Fake: stripemock.Options{
		Limits: stripemock.Limits{Global: global, PerOperation: perOperation, TargetKey: stripemock.DefaultAPIKey},
	}}})
	dbURL := storetest.URL(t)
	st := storetest.OpenStore(t, dbURL, store.Options{})

	// The fake sends its webhooks to A alone; B learns of the work through
	// the shared queue (LISTEN/NOTIFY), as behind a load balancer that
	// happens to pick one. No events feed (startBillsync turns it off) and
	// no sweep: every read is a worker's.
	addrA, addrB := freeAddr(t), freeAddr(t)
	secret := h.Stripe.Fake.AddWebhookEndpoint("http://" + addrA + "/webhooks/stripe")
	start := func(addr string) *billsyncProc {
		return startBillsync(t, "", addr,
			fmt.Sprintf("BILLSYNC_TEST_ARGS=serve -workers 4 -stripe-rate %d -stripe-operation-rate %d -sweep-schedule off -addr %s",
				global, perOperation, addr),
			"DATABASE_URL="+dbURL, "STRIPE_WEBHOOK_SECRET="+secret,
			"STRIPE_API_KEY="+stripemock.DefaultAPIKey, "STRIPE_API_URL="+h.URL)
	}
	a, b := start(addrA), start(addrB)
	// A replica learns of the other at its next report (every 5 s): until
	// both have, the first one started still takes the whole rate.
	replicas := regexp.MustCompile(`(?m)^billsync_provider_replicas\{provider="stripe"\} 2$`)
	storetest.WaitFor(t, "each replica sees two", func() bool {
		return replicas.MatchString(scrape(t, addrA)) && replicas.MatchString(scrape(t, addrB))
	})

	// The burst: each customer's creation and subscription reach A as
	// webhooks while the rest are still being made.
	const customers = 100
	begin := time.Now()
	ids := make([]string, customers)
	var wg sync.WaitGroup
	errs := make(chan error, customers)
	for i := range customers {
		wg.Go(func() {
			cus, err := h.Stripe.Customer(ctx, fmt.Sprint("u_", i))
			if err == nil {
				_, err = h.Stripe.Subscribe(ctx, cus, "price_pro")
			}
			ids[i] = cus
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	// Every account applied, then nothing left to read: every webhook
	// settled and the queue empty.
	applied := 0 // accounts are checked in order: a poll starts at the first not yet seen
	storetest.WaitFor(t, "every account on pro", func() bool {
		for ; applied < customers; applied++ {
			acc, err := st.Account(ctx, stripe.Provider, ids[applied])
			if err != nil || acc.Plan != "pro" {
				return false
			}
		}
		return true
	})
	_, err := h.Stripe.WaitSettled(ctx, time.Minute)
	require.NoError(t, err)
	storetest.WaitFor(t, "the queue empty", func() bool {
		q, err := st.QueueDepth(ctx)
		require.NoError(t, err)
		return q.Pending == 0
	})
	took := time.Since(begin)

	// Both did reconciles: the budget really was shared by two.
	appliedBy := func(addr string) float64 {
		return metric(t, scrape(t, addr), `billsync_reconciles_total{provider="stripe",result="applied"}`)
	}
	appliedA, appliedB := appliedBy(addrA), appliedBy(addrB)
	require.Positive(t, appliedA, "replica A applied none:\n%s", a.logs.String())
	require.Positive(t, appliedB, "replica B applied none:\n%s", b.logs.String())

	// A graceful stop reports each replica's last reads (Spending.Run).
	stopBillsync(t, a)
	stopBillsync(t, b)

	// billsync's key only: the driver's seeding is counted apart.
	usage := h.Stripe.Fake.KeyUsage(stripemock.DefaultAPIKey)
	rate := float64(usage.Reads) / took.Seconds() // took includes the seeding: a lower bound on the burst's pace
	t.Logf("%d customers: %d reads in %s (%.1f/s; applied by A %v, by B %v); Stripe answered %d 429s; by operation: %v",
		customers, usage.Reads, took.Round(time.Millisecond), rate, appliedA, appliedB, usage.RateLimited, usage.Operations)
	require.Zero(t, usage.RateLimited, "together the replicas exceeded Stripe's limits: %v", usage.Operations)
	// The pace is logged, not judged (no timing threshold in a test): a
	// replica that took the whole rate is caught by the 429s above, as
	// seen with SetReplicas ignoring n.

	// The shared record holds every read the fake served billsync, by
	// operation. (A report without reads, as no replica, adds nothing.)
	spend, err := st.ReportSpend(ctx, stripe.Provider, "test", nil, false)
	require.NoError(t, err)
	served := map[string]int64{}
	for op, u := range usage.Operations {
		if u.Reads > 0 {
			served[op] = u.Reads
		}
	}
	require.Equal(t, served, spend.Reads, "provider_reads against the reads Stripe served")
}

// metric returns the value of the sample named series (name and labels,
// as /metrics writes them) in metrics; the test fails when there is none.
func metric(t *testing.T, metrics, series string) float64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(metrics)
	require.NotNil(t, m, "no %s in:\n%s", series, metrics)
	v, err := strconv.ParseFloat(m[1], 64)
	require.NoError(t, err)
	return v
}
