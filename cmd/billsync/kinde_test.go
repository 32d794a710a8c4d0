package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/app"
	kindemock "github.com/billsync/billsync/mocks/kinde"
	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/server/openapitest"
	"github.com/billsync/billsync/store"
	"github.com/billsync/billsync/store/storetest"
)

// kindeEnv configures serve for Kinde at domain and nothing of Stripe.
func kindeEnv(domain string) []string {
	return []string{"STRIPE_WEBHOOK_SECRET=", "STRIPE_WEBHOOK_SECRET_FILE=", "STRIPE_API_KEY=", "STRIPE_API_KEY_FILE=",
		"KINDE_DOMAIN=" + domain, "KINDE_CLIENT_ID=" + kindemock.DefaultClientID, "KINDE_CLIENT_SECRET=" + kindemock.DefaultClientSecret,
		"KINDE_CLIENT_ID_FILE=", "KINDE_CLIENT_SECRET_FILE="}
}

// TestServeReconcilesAgainstKinde runs `billsync serve` configured for
// Kinde only: a plan change at the fake Kinde reaches billsync as a signed
// JWT webhook, and the worker applies what Kinde's API says.
func TestServeReconcilesAgainstKinde(t *testing.T) {
	ctx := context.Background()
	h := testenv.ForTest(t, testenv.Kinde, testenv.Options{})
	addr := freeAddr(t)
	h.Kinde.Fake.AddWebhookEndpoint("http://" + addr + "/webhooks/kinde")
	dbURL := storetest.URL(t)
	const adminToken = "kinde_admin_token_0123456789"
	p := startBillsync(t, "", addr, append(kindeEnv(h.URL), "DATABASE_URL="+dbURL, "BILLSYNC_ADMIN_TOKEN="+adminToken,
		"BILLSYNC_TEST_ARGS=serve -workers 2 -addr "+addr)...)
	require.Contains(t, p.logs.String(), "webhooks: POST /webhooks/kinde)", "serve says which intakes are on")
	require.Regexp(t, `providers on.*intake=kinde fetch=kinde`, p.logs.String())

	const customer = "customer_serve"
	h.Kinde.SetPlan(customer, testenv.TeamPlan)
	_, err := h.Kinde.Send("customer.plan_changed", customer)
	require.NoError(t, err)
	st, err := store.Open(ctx, dbURL, store.Options{})
	require.NoError(t, err)
	defer st.Close()
	require.Eventually(t, func() bool {
		a, err := st.Account(ctx, "kinde", customer)
		return err == nil && a.Plan == "team"
	}, 30*time.Second, 50*time.Millisecond, "billsync never applied Kinde's plan:\n%s", p.logs.String())
	a, err := st.Account(ctx, "kinde", customer)
	require.NoError(t, err)
	balance, err := st.Balance(ctx, a.ID)
	require.NoError(t, err)
	require.EqualValues(t, 2000, balance)
	require.Regexp(t, `(?m)^billsync_provider_requests_total\{provider="kinde",status="200"\} [1-9]`, scrape(t, addr))

	// The admin API resyncs a Kinde account (a change whose webhook never
	// came) and sweeps Kinde.
	admin := func(path string) (int, string) {
		req, err := http.NewRequest(http.MethodPost, "http://"+addr+path, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+adminToken)
		resp, err := openapitest.Client().Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	h.Kinde.SetPlan(customer, testenv.ProPlan)
	// A resync while serve's worker holds the customer (its import at
	// start queued it too) is 409 and stays queued: the worker's
	// reconcile then reads Pro.
	status, body := admin(fmt.Sprintf("/admin/api/accounts/%d/resync", a.ID))
	require.Contains(t, []int{http.StatusOK, http.StatusConflict}, status, body)
	storetest.WaitFor(t, "the resync reads Pro from Kinde", func() bool {
		a, err = st.Account(ctx, "kinde", customer)
		require.NoError(t, err)
		return a.Plan == "pro"
	})
	status, body = admin("/admin/api/sweeps")
	require.Equal(t, http.StatusOK, status, body)
	// Beside serve's import at start (a run of its own kind), one sweep.
	require.Eventually(t, func() bool {
		runs, err := st.SweepRuns(ctx, maxSweepRuns)
		n := 0
		for _, r := range runs {
			if r.Provider == "kinde" && r.Kind == reconcile.RunSweep && r.Status == "succeeded" {
				n++
			}
		}
		return err == nil && n == 1
	}, 30*time.Second, 50*time.Millisecond, "the admin API's sweep sweeps Kinde:\n%s", p.logs.String())

	resp, err := http.Post("http://"+addr+"/webhooks/stripe", "application/json", bytes.NewReader([]byte(`{}`)))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNotFound, resp.StatusCode, "Stripe is off: no Stripe intake")
	stopBillsync(t, p)
}

// TestServeStartsWhileKindeIsUnreachable: serve starts with Kinde's key
// set out of reach. A well-formed token it cannot check gets 503 (Kinde
// retries), never 200; a token refused on its face gets 401; nothing is
// stored.
func TestServeStartsWhileKindeIsUnreachable(t *testing.T) {
	ctx := context.Background()
	keys, err := kindemock.NewKeys()
	require.NoError(t, err)
	dead := freeAddr(t) // nothing listens there
	addr := freeAddr(t)
	dbURL := storetest.URL(t)
	// No sample either: its lease would be the one row in the database.
	p := startBillsync(t, "", addr, append(kindeEnv("http://"+dead), "DATABASE_URL="+dbURL,
		"BILLSYNC_TEST_ARGS=serve -workers 1 -import-at-start=false -sample-share 0 -addr "+addr)...)

	post := func(body []byte) int {
		req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/webhooks/kinde", bytes.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/jwt")
		req.Header.Set("webhook-id", "msg_unreachable")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	now := time.Now().UTC().Format(time.RFC3339)
	claims := map[string]any{"type": "customer.plan_changed", "event_id": "event_unreachable", "timestamp": now,
		"data": map[string]any{"customer_id": "customer_unreachable"}}
	token, err := keys.Sign(claims)
	require.NoError(t, err)
	require.Equal(t, http.StatusServiceUnavailable, post(token), "keys unreachable: Kinde must retry\n%s", p.logs.String())
	none := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","kid":"k"}`)) + "." +
		base64.RawURLEncoding.EncodeToString([]byte(`{"type":"customer.plan_changed"}`)) + "."
	require.Equal(t, http.StatusUnauthorized, post([]byte(none)), "refused on its face, without the keys")

	st, err := store.Open(ctx, dbURL, store.Options{})
	require.NoError(t, err)
	defer st.Close()
	for name, digest := range storetest.Tables(t, st) {
		if name != "schema_migrations" {
			require.Equal(t, "0 ", digest, "table %s", name)
		}
	}
	stopBillsync(t, p)
}

func TestKindeConfiguration(t *testing.T) {
	base := func() config {
		return config{DBTimeout: 1, Config: app.Config{Addr: "127.0.0.1:0", ShutdownTimeout: 1, IntakeTimeout: 1, StripeTolerance: 1,
			StripeRateLimit: 1, StripeOperationRate: 1, KindeRateLimit: 1, Workers: 1, SweepSchedule: "off"}}
	}
	kindeOn := func(c *config) {
		c.KindeDomain, c.KindeClientID, c.KindeClientSecret = "https://acme.kinde.com", "id", "s3cr3t_value"
	}
	tests := map[string]struct {
		set  func(*config)
		want []string // empty: valid
	}{
		"KindeOnly":  {kindeOn, nil},
		"StripeOnly": {func(c *config) { c.StripeWebhookSecrets, c.StripeAPIKey = []string{"whsec_a"}, "sk_test_a" }, nil},
		"Both":       {func(c *config) { kindeOn(c); c.StripeWebhookSecrets, c.StripeAPIKey = []string{"whsec_a"}, "sk_test_a" }, nil},
		"ErrNeither": {func(*config) {}, []string{"no provider is configured", "STRIPE_WEBHOOK_SECRET is not set"}},
		// Webhook-free: the events feed alone is a Stripe signal.
		"StripeFeedOnly": {func(c *config) { c.StripeAPIKey, c.EventsPoll = "sk_test_a", time.Minute }, nil},
		"ErrFeedOff":     {func(c *config) { c.StripeAPIKey = "sk_test_a" }, []string{"STRIPE_WEBHOOK_SECRET is not set", "-events-poll not off"}},
		"ErrHalf":        {func(c *config) { c.KindeDomain = "https://acme.kinde.com" }, []string{"half a Kinde configuration: KINDE_CLIENT_ID, KINDE_CLIENT_SECRET not set"}},
		"ErrNoDomain":    {func(c *config) { kindeOn(c); c.KindeDomain = "" }, []string{"KINDE_DOMAIN not set"}},
		"ErrDomain":      {func(c *config) { kindeOn(c); c.KindeDomain = "acme.kinde.com" }, []string{`KINDE_DOMAIN "acme.kinde.com"`}},
		"ErrRate":        {func(c *config) { kindeOn(c); c.KindeRateLimit = 0 }, []string{"-kinde-rate must be positive"}},
		// Stripe half set next to Kinde is still an error, not ignored.
		"ErrStripeHalf": {func(c *config) { kindeOn(c); c.StripeWebhookSecrets = []string{"whsec_a"} }, []string{"STRIPE_API_KEY is not set"}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			c := base()
			tt.set(&c)
			err := c.validateServe()
			if len(tt.want) == 0 {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			for _, w := range tt.want {
				require.Contains(t, err.Error(), w)
			}
			require.NotContains(t, err.Error(), "s3cr3t_value", "a secret must never appear in an error")
		})
	}

	t.Run("FromEnvironment", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "kinde-secret")
		require.NoError(t, os.WriteFile(file, []byte("from_file\n"), 0o600))
		env := map[string]string{"KINDE_CLIENT_ID": "m2m_id", "KINDE_CLIENT_SECRET_FILE": file, "KINDE_REPLAY_WINDOW": "96h"}
		var c config
		require.NoError(t, c.loadKinde(func(k string) string { return env[k] }))
		require.Equal(t, "m2m_id", c.KindeClientID)
		require.Equal(t, "from_file", c.KindeClientSecret)
		require.Equal(t, 96*time.Hour, c.KindeReplayWindow)
		env["KINDE_REPLAY_WINDOW"] = "three days"
		c = config{}
		require.ErrorContains(t, c.loadKinde(func(k string) string { return env[k] }), "KINDE_REPLAY_WINDOW")
	})
	t.Run("SweepPace", func(t *testing.T) {
		c := app.Config{KindeRateLimit: 10}
		require.Equal(t, 200*time.Millisecond, c.KindeSweepInterval(), "half of 10 requests a second")
		c.KindeSweepPace = time.Second
		require.Equal(t, time.Second, c.KindeSweepInterval())
	})
}

// TestSupportCommandsForKinde: resync, replay and sweep work on Kinde
// accounts with Kinde configured alone. The sweep queues every Kinde
// account (Kinde has no bulk listing), spaced by -kinde-sweep-pace.
func TestSupportCommandsForKinde(t *testing.T) {
	ctx := context.Background()
	url := storetest.URL(t)
	st := storetest.OpenStore(t, url, store.Options{})
	h := testenv.ForTest(t, testenv.Kinde, testenv.Options{Store: st})
	for _, kv := range append(kindeEnv(h.URL), "DATABASE_URL="+url, "BILLSYNC_PLANS=") {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	billsync := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := run(ctx, args, &out, io.Discard)
		return out.String(), err
	}
	const customer = "customer_support"
	h.Kinde.SetPlan(customer, testenv.FreePlan)
	out, err := billsync("resync", "--provider", "kinde", "--customer", customer)
	require.NoError(t, err, out)
	require.Contains(t, out, "reconciled kinde customer "+customer)
	require.Contains(t, out, "plan     - → free")

	// Drift: Kinde moved the customer to Pro and its webhook was stored
	// but never applied (no worker ran).
	h.Kinde.SetPlan(customer, testenv.ProPlan)
	sent, err := h.Kinde.Send("customer.plan_changed", customer)
	require.NoError(t, err)
	require.NoError(t, h.WaitDelivered(ctx))
	out, err = billsync("replay", "--provider", "kinde", sent.EventID)
	require.NoError(t, err, out)
	require.Contains(t, out, "plan     free → pro")
	require.Contains(t, out, "balance  10 → 500")

	h.Kinde.SetPlan("customer_other", testenv.TeamPlan)
	_, err = billsync("resync", "--provider", "kinde", "--customer", "customer_other")
	require.NoError(t, err)
	out, err = billsync("sweep", "-kinde-sweep-pace", "1h")
	require.NoError(t, err, out)
	// Never imported: this first sweep is Kinde's import, which finds
	// the customers through Kinde's users list.
	require.Contains(t, out, "kinde never imported: this sweep ran as its import")
	require.Contains(t, out, "kinde import 1 succeeded")
	require.Contains(t, out, "found 2 customers")
	var due []time.Time
	for _, q := range storetest.Queue(t, st) {
		if q.Provider == "kinde" && q.Trigger == reconcile.TriggerImport {
			due = append(due, q.DueAt)
		}
	}
	slices.SortFunc(due, time.Time.Compare)
	require.Len(t, due, 2, "both Kinde accounts queued by the import")
	require.InDelta(t, time.Hour.Seconds(), due[1].Sub(due[0]).Seconds(), 60, "spaced by -kinde-sweep-pace")

	_, err = billsync("sweep", "-provider", "stripe")
	require.ErrorContains(t, err, `provider "stripe" is not configured`)
}
