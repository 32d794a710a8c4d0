package e2e_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	kindemock "github.com/billsync/billsync/mocks/kinde"
	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/providers/kinde"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store"
)

// TestKindeUserRefSurvivesAnIgnoredReconcile: the only event naming the
// app's user (data.user_id) is answered by a reconcile that is ignored (the
// customer holds a plan code no plan maps), so it is no longer pending when
// the customer is next reconciled. Whatever brings that reconcile (a
// payment webhook naming no user, the sweep after the webhook was lost, a
// resync), the account is written with the reference of the newest event
// that ever named one, so the app API and resync --user find it.
func TestKindeUserRefSurvivesAnIgnoredReconcile(t *testing.T) {
	t.Parallel()
	for name, next := range map[string]func(t *testing.T, k *userRefCase){
		"Webhook": func(t *testing.T, k *userRefCase) {
			k.send(t, "customer.payment_succeeded", nil)
			k.drain(t)
		},
		"Sweep": func(t *testing.T, k *userRefCase) {
			sw, err := reconcile.NewSweeper(reconcile.SweeperConfig{Store: k.st, Provider: kinde.Provider,
				Plans: k.plans, Pace: time.Millisecond})
			require.NoError(t, err)
			_, err = sw.Run(context.Background())
			require.NoError(t, err)
			k.drain(t)
		},
		"Resync": func(t *testing.T, k *userRefCase) {
			out, err := k.worker.ReconcileNow(context.Background(), reconcile.Request{Provider: kinde.Provider,
				CustomerID: k.customer, Trigger: reconcile.TriggerResync, Actor: "test"})
			require.NoError(t, err)
			require.Equal(t, reconcile.ResultApplied, out.Result, out.Text)
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			k := newUserRefCase(t)
			ctx := context.Background()
			k.SetPlan(k.customer, "customer_plan_nobody_maps")
			assigned := k.send(t, "customer.plan_assigned", map[string]any{"user_id": "kp_a"})
			k.drain(t)
			ev, err := k.st.EventByKey(ctx, kinde.Provider, reconcile.DedupeKeyOf(assigned.EventID))
			require.NoError(t, err)
			require.Equal(t, reconcile.EventIgnored, ev.Status, "the plan code maps to no plan: %s", ev.Outcome)

			k.SetPlan(k.customer, testenv.ProPlan)
			next(t, k)
			a, err := k.st.Account(ctx, kinde.Provider, k.customer)
			require.NoError(t, err)
			require.Equal(t, "pro", a.Plan)
			require.Equal(t, "kp_a", a.UserRef, "the reference of the ignored event, the newest naming one")
			u, err := k.st.UserAccount(ctx, "kp_a", kinde.Provider, "")
			require.NoError(t, err, "the app API finds the user")
			require.Equal(t, a.ID, u.Account.ID)
			require.EqualValues(t, 500, u.Balance)
		})
	}

	t.Run("NewestNamingOneWins", func(t *testing.T) {
		t.Parallel()
		k := newUserRefCase(t)
		ctx := context.Background()
		k.SetPlan(k.customer, testenv.FreePlan)
		k.send(t, "customer.plan_assigned", map[string]any{"user_id": "kp_old"})
		k.drain(t)
		k.send(t, "customer.plan_changed", map[string]any{"org_code": "org_new"})
		k.drain(t)
		k.SetPlan(k.customer, testenv.ProPlan)
		k.send(t, "customer.payment_succeeded", nil)
		k.drain(t)
		a, err := k.st.Account(ctx, kinde.Provider, k.customer)
		require.NoError(t, err)
		require.Equal(t, "pro", a.Plan)
		require.Equal(t, "org_new", a.UserRef, "the newest event naming a reference, not an older one")
	})

	t.Run("NoEventNamesOne", func(t *testing.T) {
		t.Parallel()
		k := newUserRefCase(t)
		ctx := context.Background()
		k.SetPlan(k.customer, testenv.ProPlan)
		k.send(t, "customer.plan_assigned", nil)
		k.drain(t)
		a, err := k.st.Account(ctx, kinde.Provider, k.customer)
		require.NoError(t, err)
		require.Equal(t, "pro", a.Plan)
		require.Empty(t, a.UserRef, "no event ever named one")
	})
}

// TestKindeCapturedTokenUnderFreshWebhookIDsIsOneEvent: the webhook-id
// header is not signed; a token sent again under new webhook-ids (a replay
// by whoever captured it) is a copy of the one event its signed event_id
// names, not a new event each time.
func TestKindeCapturedTokenUnderFreshWebhookIDsIsOneEvent(t *testing.T) {
	t.Parallel()
	k := newUserRefCase(t)
	ctx := context.Background()
	token, err := k.Kinde.Fake.Keys().Sign(map[string]any{"type": "customer.plan_changed", "event_id": "event_captured",
		"timestamp": time.Now().UTC().Format(time.RFC3339), "data": map[string]any{"customer_id": k.customer}})
	require.NoError(t, err)
	for _, id := range []string{"msg_1", "msg_2", "msg_3"} {
		req, err := http.NewRequest(http.MethodPost, k.IntakeURL+"/webhooks/kinde", bytes.NewReader(token))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/jwt")
		req.Header.Set("webhook-id", id)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
	}
	ev, err := k.st.EventByKey(ctx, kinde.Provider, "event_captured")
	require.NoError(t, err)
	require.Equal(t, 3, ev.SeenCount, "one event seen three times")
	_, err = k.st.EventByKey(ctx, kinde.Provider, "msg_2")
	require.True(t, errors.Is(err, reconcile.ErrNotFound), "no event keyed by a webhook-id: %v", err)
}

// userRefCase is one customer of the fake Kinde, billsync's intake storing
// its webhooks in a fresh database and a worker on billsync's Kinde client.
type userRefCase struct {
	*kindeHarness
	st       *store.Store
	plans    *reconcile.Plans
	worker   *reconcile.Worker
	customer string
}

func newUserRefCase(t *testing.T) *userRefCase {
	t.Helper()
	h := newKindeHarness(t, t.Cleanup, kindeOptions{})
	return &userRefCase{kindeHarness: h, st: h.Store, plans: h.Plans, worker: h.worker(), customer: "customer_userref"}
}

// send has the fake Kinde send a webhook about the customer with data's
// extra fields and waits until the intake has stored it.
func (k *userRefCase) send(t *testing.T, typ string, data map[string]any) kindemock.Sent {
	t.Helper()
	sent, err := k.Kinde.Fake.SendEvent(kindemock.Event{Type: typ, CustomerID: k.customer, Data: data})
	require.NoError(t, err)
	k.Delivered()
	return sent
}

func (k *userRefCase) drain(t *testing.T) {
	t.Helper()
	_, err := k.worker.Drain(context.Background())
	require.NoError(t, err)
}
