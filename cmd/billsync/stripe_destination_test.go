package main

import (
	"bytes"
	"context"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	stripemock "github.com/billsync/billsync/mocks/stripe"
	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/providers/stripe"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store"
	"github.com/billsync/billsync/store/storetest"
)

// stripeCommand runs `billsync stripe …` against the fake behind h.
func stripeCommand(t *testing.T, h *testenv.Test) func(args ...string) (string, error) {
	t.Setenv("STRIPE_API_KEY", stripemock.DefaultAPIKey)
	t.Setenv("STRIPE_API_KEY_FILE", "")
	t.Setenv("STRIPE_API_URL", h.URL)
	t.Setenv("STRIPE_WEBHOOK_ENDPOINT_ID", "")
	t.Setenv("DATABASE_URL", "")
	return func(args ...string) (string, error) {
		var out bytes.Buffer
		err := run(context.Background(), append([]string{"stripe"}, args...), &out, &out)
		return out.String(), err
	}
}

// TestStripeSetupEventDestination: setup creates one thin event
// destination at the URL for the health event and prints its secret once,
// beside the endpoint's, in the STRIPE_WEBHOOK_SECRET it needs; run again
// it reuses it. A destination already at a URL that lacks the type gets it
// added (its own types kept); a disabled one is enabled again. check
// names each problem: none at the URL, a missing type, disabled.
func TestStripeSetupEventDestination(t *testing.T) {
	ctx := context.Background()
	h := testenv.ForTest(t, testenv.Stripe, testenv.Options{})
	billsync := stripeCommand(t, h)
	const url = "https://billing.example.com/webhooks/stripe"

	out, err := billsync("check", "--url", url)
	require.ErrorIs(t, err, errStripeCheck)
	require.Contains(t, out, "FAIL no thin event destination at "+url)

	out, err = billsync("setup", "--url", url)
	require.NoError(t, err, out)
	ids := h.Stripe.Fake.EventDestinationIDs()
	require.Len(t, ids, 1)
	require.True(t, strings.HasPrefix(ids[0], "ed_"), ids[0])
	require.Contains(t, out, "created event destination "+ids[0]+" for "+url+" (thin events: "+stripe.HealthEventResolved+")")
	secrets := regexp.MustCompile(`set STRIPE_WEBHOOK_SECRET=(whsec_\w+),(whsec_\w+) `).FindStringSubmatch(out)
	require.NotNil(t, secrets, out)
	require.NotEqual(t, secrets[1], secrets[2], "the endpoint and the destination sign with secrets of their own")
	require.Contains(t, out, "its signing secret (shown once): "+secrets[2])

	// Seen through stripe-go, as the dashboard's API shows it.
	d, err := h.Stripe.API.V2CoreEventDestinations.Retrieve(ctx, ids[0], nil)
	require.NoError(t, err)
	require.Equal(t, "thin", string(d.EventPayload))
	require.Equal(t, "webhook_endpoint", string(d.Type))
	require.Equal(t, []string{stripe.HealthEventResolved}, d.EnabledEvents)
	require.Equal(t, "enabled", string(d.Status))
	require.Len(t, h.Stripe.Fake.WebhookEndpointIDs(), 1, "the v1 list shows the snapshot endpoint only")

	out, err = billsync("setup", "--url", url)
	require.NoError(t, err, out)
	require.Equal(t, ids, h.Stripe.Fake.EventDestinationIDs(), "the same destination, reused")
	require.Contains(t, out, "event destination "+ids[0]+" for "+url+" subscribes to "+stripe.HealthEventResolved+", enabled; its signing secret is unchanged")
	require.NotContains(t, out, "whsec_")
	require.NotContains(t, out, "STRIPE_WEBHOOK_SECRET=")

	out, err = billsync("check", "--url", url)
	require.Contains(t, out, "ok   event destination "+ids[0]+" ("+url+") is enabled", err)
	require.Contains(t, out, "ok   event destination "+ids[0]+" subscribes to "+stripe.HealthEventResolved)

	_, err = h.Stripe.API.V2CoreEventDestinations.Disable(ctx, ids[0], nil)
	require.NoError(t, err)
	out, _ = billsync("check")
	require.Contains(t, out, "FAIL event destination "+ids[0]+" ("+url+") is disabled")
	out, err = billsync("setup", "--url", url)
	require.NoError(t, err, out)
	d, err = h.Stripe.API.V2CoreEventDestinations.Retrieve(ctx, ids[0], nil)
	require.NoError(t, err)
	require.Equal(t, "enabled", string(d.Status), "setup enables it again")

	// A destination someone made at another URL, for other thin types.
	const other = "https://other.example.com/webhooks/stripe"
	h.Stripe.Fake.AddEventDestination(other, "v1.invoice.paid")
	out, _ = billsync("check", "--url", other)
	require.Contains(t, out, "subscribes to "+stripe.HealthEventResolved+" (missing: "+stripe.HealthEventResolved+")")
	out, err = billsync("setup", "--url", other)
	require.NoError(t, err, out)
	require.Len(t, h.Stripe.Fake.EventDestinationIDs(), 2, "reused, not a third")
	all, err := h.Stripe.Client.EventDestinations(ctx)
	require.NoError(t, err)
	var events []string
	for _, d := range all {
		if d.WebhookEndpoint.URL == other && d.Thin() {
			events = d.EnabledEvents
		}
	}
	require.Equal(t, []string{"v1.invoice.paid", stripe.HealthEventResolved}, events, "the type added, the owner's kept")
}

// TestStripeSetupDestinationEndToEnd: the event destination setup creates
// is how serve hears of a change whose events Stripe failed to create.
// The fake makes the change with no event (no webhook, nothing listed),
// then announces the failure resolved by the health event, which it sends
// only to thin event destinations subscribed to it: the one setup made,
// signed with the secret setup printed. serve, with the
// STRIPE_WEBHOOK_SECRET setup printed, stores it and reconciles the
// customer. The events feed and the sample are off: nothing else could
// have brought the change.
func TestStripeSetupDestinationEndToEnd(t *testing.T) {
	ctx := context.Background()
	h := testenv.ForTest(t, testenv.Stripe, testenv.Options{})
	billsync := stripeCommand(t, h)
	addr := freeAddr(t)
	url := "http://" + addr + "/webhooks/stripe"
	out, err := billsync("setup", "--url", url)
	require.NoError(t, err, out)
	secrets := regexp.MustCompile(`set STRIPE_WEBHOOK_SECRET=(whsec_\w+,whsec_\w+) `).FindStringSubmatch(out)
	require.NotNil(t, secrets, out)
	dest := h.Stripe.Fake.EventDestinationIDs()
	require.Len(t, dest, 1)

	dbURL := storetest.URL(t)
	dataDir := filepath.Join(reachableDir(t), "data")
	proc := startBillsync(t, dataDir, addr,
		"BILLSYNC_TEST_ARGS=serve -workers 2 -import-at-start=false -sample-share 0 -addr "+addr,
		"DATABASE_URL="+dbURL, "STRIPE_WEBHOOK_SECRET="+secrets[1],
		"STRIPE_API_KEY="+stripemock.DefaultAPIKey, "STRIPE_API_URL="+h.URL)
	st := storetest.OpenStore(t, dbURL, store.Options{})
	plan := func(customer string) string {
		a, err := st.Account(ctx, stripe.Provider, customer)
		if err != nil {
			return ""
		}
		return a.Plan
	}

	customer, err := h.Stripe.Customer(ctx, "user_lost_event")
	require.NoError(t, err)
	sub, err := h.Stripe.Subscribe(ctx, customer, "price_free")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return plan(customer) == "free" }, 30*time.Second, 20*time.Millisecond,
		"the endpoint's webhooks never reached serve:\n%s", proc.logs.String())
	// Every webhook of the subscription delivered and reconciled first: a
	// late one's reconcile would read the change below.
	_, err = h.Stripe.WaitSettled(ctx, 30*time.Second)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(storetest.Queue(t, st)) == 0 }, 30*time.Second, 20*time.Millisecond)

	h.Stripe.Fake.FailEventGeneration(true)
	require.NoError(t, h.Stripe.ChangePrice(ctx, sub, "price_pro"))
	health := h.Stripe.Fake.ResolveEventGenerationFailure()
	require.NotEmpty(t, health)
	require.Eventually(t, func() bool { return plan(customer) == "pro" }, 30*time.Second, 20*time.Millisecond,
		"the health event never healed the account:\n%s", proc.logs.String())

	delivered := map[string]bool{}
	for _, d := range h.Stripe.Fake.Deliveries() {
		if d.EventType == stripe.HealthEventResolved && d.StatusCode == 200 {
			require.Equal(t, dest[0], d.EndpointID, "sent to the destination setup made")
			delivered[d.EventID] = true
		}
	}
	for _, id := range health {
		require.True(t, delivered[id], "health event %s was delivered", id)
	}
	var stored int
	for _, e := range storetest.CustomerEvents(t, st, stripe.Provider, customer) {
		if e.Type == stripe.HealthEventResolved {
			stored++
			require.Equal(t, string(reconcile.EventApplied), string(e.Status))
		}
	}
	require.Len(t, health, stored, "each health event stored under the customer and answered")
	stopBillsync(t, proc)
}
