package demo

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"net/http"
	"time"

	kindemock "github.com/billsync/billsync/mocks/kinde"
	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/providers/kinde"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store"
)

// kindeWorld plays the scenario at the fake Kinde (testenv): billing
// agreements set at the fake, and Kinde's own webhooks (signed JWTs) for
// the plan change, the payment and the Free agreement's cancellation.
type kindeWorld struct {
	h *testenv.Env
}

func newKindeWorld(st *store.Store, addr string, network http.Handler, logger *slog.Logger) (world, error) {
	h, err := testenv.New(testenv.Kinde, testenv.Options{
		Store: st, IntakeAddr: addr, Network: network, Logger: logger,
		Kinde: testenv.KindeOptions{Fake: kindemock.Options{Logger: logger}},
	})
	if err != nil {
		return nil, err
	}
	return &kindeWorld{h: h}, nil
}

func (w *kindeWorld) provider() string           { return kinde.Provider }
func (w *kindeWorld) client() reconcile.Provider { return w.h.Client }
func (w *kindeWorld) intakeURL() string          { return w.h.IntakeURL }
func (w *kindeWorld) close()                     { w.h.Close() }

func (w *kindeWorld) waitDelivered(ctx context.Context) error { return w.h.WaitDelivered(ctx) }

// kindeClaims is what the demo reads of a Kinde token it carries, without
// verifying it (billsync's intake does that).
type kindeClaims struct {
	Type    string `json:"type"`
	EventID string `json:"event_id"`
	Data    struct {
		PlanCode string `json:"plan_code"`
	} `json:"data"`
}

func readClaims(token []byte) kindeClaims {
	var c kindeClaims
	parts := bytes.Split(bytes.TrimSpace(token), []byte("."))
	if len(parts) != 3 {
		return c
	}
	payload, err := base64.RawURLEncoding.DecodeString(string(parts[1]))
	if err == nil {
		_ = json.Unmarshal(payload, &c)
	}
	return c
}

// identify: the token's signed event_id is billsync's dedupe key.
func (w *kindeWorld) identify(body []byte, _ http.Header) (id, typ string) {
	c := readClaims(body)
	return reconcile.DedupeKeyOf(c.EventID), c.Type
}

func (w *kindeWorld) scenarioTypes() (change, payment, cancellation string) {
	return "customer.plan_changed", "customer.payment_succeeded", "customer.agreement_cancelled"
}

// naive reads a Kinde event as the naive app does: a plan change is to the
// plan code in its data.
func (w *kindeWorld) naive(body []byte) (kind, planRef string) {
	c := readClaims(body) // the foil trusts its input
	switch c.Type {
	case "customer.plan_changed", "customer.plan_assigned":
		return naiveChange, c.Data.PlanCode
	case "customer.payment_succeeded":
		return naivePayment, ""
	case "customer.agreement_cancelled":
		return naiveCancel, ""
	}
	return "", ""
}

// onFree gives the customer a Free agreement; the fake sends no webhook.
func (w *kindeWorld) onFree(context.Context) (string, int, error) {
	const customer = "customer_0a1b2c3d4e5f"
	w.h.Kinde.SetPlan(customer, testenv.FreePlan)
	return customer, 0, nil
}

// toPro replaces the Free agreement with a Pro one and sends what Kinde
// would: the Free agreement's cancellation (its event time a minute
// before the change), the plan change and the payment.
func (w *kindeWorld) toPro(_ context.Context, customer string) error {
	cancelled := time.Now().Add(-time.Minute)
	w.h.Kinde.SetPlan(customer, testenv.ProPlan)
	for _, ev := range []kindemock.Event{
		{Type: "customer.agreement_cancelled", CustomerID: customer, At: cancelled, Data: map[string]any{"plan_code": testenv.FreePlan}},
		{Type: "customer.plan_changed", CustomerID: customer, Data: map[string]any{"plan_code": testenv.ProPlan}},
		{Type: "customer.payment_succeeded", CustomerID: customer, Data: map[string]any{"plan_code": testenv.ProPlan}},
	} {
		if _, err := w.h.Kinde.Fake.SendEvent(ev); err != nil {
			return err
		}
	}
	return nil
}

func (w *kindeWorld) where() Where {
	return Where{FakeURL: w.h.URL, APIKey: kindemock.DefaultClientID}
}
