package demo_test

import (
	"bytes"
	"context"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/cmd/billsync/internal/demo"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store"
	"github.com/billsync/billsync/store/storetest"
)

func TestMain(m *testing.M) { os.Exit(storetest.Main(m)) }

// TestDemoSeedScenario is the seed's scenario as a test: nine deliveries of
// three events, a crash during the first plan change, a late older
// cancellation. billsync must end on Pro with 500, one Pro top-up, three
// events from nine deliveries; the late cancellation must say why nothing
// changed; and the naive foil must show the damage it exists to show.
func TestDemoSeedScenario(t *testing.T) {
	for provider, late := range map[string]string{"stripe": "customer.subscription.deleted", "kinde": "customer.agreement_cancelled"} {
		t.Run(provider, func(t *testing.T) { testDemoSeedScenario(t, provider, late, false) })
	}
	// demo --connect: the scenario on a Stripe Connect account.
	t.Run("stripe-connect", func(t *testing.T) { testDemoSeedScenario(t, "stripe", "customer.subscription.deleted", true) })
}

func testDemoSeedScenario(t *testing.T, provider, lateType string, connect bool) {
	ctx := context.Background()
	server := storetest.URL(t) // the demo creates a database of its own next to this one
	probe := storetest.OpenStore(t, server, store.Options{})
	d, err := demo.Start(ctx, server, demo.Config{Addr: "127.0.0.1:0", Provider: provider, Connect: connect})
	require.NoError(t, err)
	closed := false
	defer func() {
		if !closed {
			d.Close()
		}
	}()
	res, err := d.Play(ctx)
	require.NoError(t, err)
	dbURL, err := url.Parse(d.Where().DatabaseURL)
	require.NoError(t, err)
	d.Close()
	closed = true
	name := strings.TrimPrefix(dbURL.Path, "/")
	require.True(t, strings.HasPrefix(name, "billsync_demo_"), name)
	require.Empty(t, storetest.Databases(t, probe, name), "Close drops the demo's database")

	if connect {
		account, _ := reconcile.SplitConnected(res.Customer)
		require.NotEmpty(t, account, "the customer is a connected account's: %s", res.Customer)
	}
	b := res.Billsync
	require.Equal(t, "pro", b.Plan)
	require.EqualValues(t, 500, b.Balance)
	require.Equal(t, 3, b.EventsStored)
	require.Equal(t, 9, b.Deliveries)
	require.True(t, b.Right)
	require.Len(t, b.AppTold, 1, "billsync tells the app once for nine deliveries and a crash: %+v", b.AppTold)
	require.Equal(t, demo.State{Plan: "free", Balance: 10}, b.AppTold[0].Before)
	require.Equal(t, demo.State{Plan: "pro", Balance: 500}, b.AppTold[0].After)
	require.Contains(t, b.AppTold[0].Changed, "plan")
	require.Greater(t, len(res.NaiveTold), 3, "the foil tells the app of every copy")
	require.Equal(t, "free", res.NaiveTold[len(res.NaiveTold)-1].After.Plan, "and of the late cancellation")
	var pro []int64
	for _, g := range b.Grants {
		if g.Plan == "pro" {
			pro = append(pro, g.Delta)
		}
	}
	require.Len(t, pro, 1, "one Pro top-up")
	require.Equal(t, demo.State{Plan: "free", Balance: 10}, res.Start.Billsync)

	require.Len(t, res.Deliveries, 9)
	require.Contains(t, res.Deliveries[0].Billsync.Outcome, "killed mid-apply")
	require.Contains(t, res.Deliveries[0].Billsync.Outcome, "plan set to pro")
	late := res.Deliveries[6]
	require.Equal(t, lateType, late.Type)
	require.Equal(t, "200 stored", late.Billsync.Answer)
	require.True(t, strings.Contains(late.Billsync.Outcome, "no change") && strings.Contains(late.Billsync.Outcome, "plan pro"),
		"the late cancellation must say why nothing changed: %q", late.Billsync.Outcome)
	for _, row := range res.Deliveries {
		require.Equal(t, "pro", row.Billsync.Plan, "delivery %d", row.N)
		require.EqualValues(t, 500, row.Billsync.Balance, "delivery %d: billsync is never half-applied", row.N)
	}
	// The foil goes wrong exactly as the seed describes.
	require.Equal(t, "pro", res.Deliveries[0].Naive.Plan)
	require.EqualValues(t, 10, res.Deliveries[0].Naive.Balance, "killed between its two writes")
	require.Equal(t, "free", res.Naive.Plan, "the late cancellation wins")
	require.Greater(t, res.Naive.Balance, int64(500), "copies grant again")

	var out bytes.Buffer
	require.NoError(t, res.Print(&out))
	require.Equal(t, provider, res.Provider)
	require.Contains(t, out.String(), "billsync is right: "+map[string]string{"stripe": "Stripe", "kinde": "Kinde"}[provider]+" says Pro")
	require.Contains(t, out.String(), "older cancellation")
}
