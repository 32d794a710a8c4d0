package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	kindemock "github.com/billsync/billsync/mocks/kinde"
	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/providers/kinde"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store/storetest"
)

// TestKindeTimesInEveryRFC3339Form: Kinde signs a delivery whose times are
// RFC 3339 in a form Go's strict reader refuses (a lowercase "t"/"z", a
// space for "T"), with an offset of hours only, or with more fractional
// digits than nanoseconds. Each is answered 200 (a 401 makes Kinde retry
// in vain for 36 hours), stored with the time of the change it names, and
// reconciled.
func TestKindeTimesInEveryRFC3339Form(t *testing.T) {
	t.Parallel()
	h := newKindeHarness(t, t.Cleanup, kindeOptions{})
	ctx := context.Background()
	west := time.FixedZone("", -5*3600)
	forms := []struct {
		name   string
		format func(time.Time) string
	}{
		{"lowercase t and z", func(t time.Time) string { return t.UTC().Format("2006-01-02t15:04:05.000z") }},
		{"space for T", func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05.000Z07:00") }},
		{"hours-only +00", func(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000-07") }},
		{"hours-only -05", func(t time.Time) string { return t.In(west).Format("2006-01-02T15:04:05.000-07") }},
		{"twelve fractional digits", func(t time.Time) string {
			return t.UTC().Format("2006-01-02T15:04:05.000000000") + "999Z"
		}},
	}
	changed := time.Now().Add(-time.Minute).Truncate(time.Second).Add(250 * time.Millisecond).UTC()
	sent := map[string]kindemock.Sent{}
	for i, f := range forms {
		customer := fmt.Sprintf("customer_form_%d", i)
		h.SetPlan(customer, testenv.ProPlan)
		s, err := h.Kinde.Fake.SendEvent(kindemock.Event{Type: "customer.plan_changed", CustomerID: customer,
			At: changed, Format: f.format})
		require.NoError(t, err, f.name)
		sent[customer] = s
	}
	h.Delivered()
	for _, d := range h.Kinde.Fake.Deliveries() {
		require.Equal(t, http.StatusOK, d.Status, "%+v", d)
	}

	_, err := h.worker().Drain(ctx)
	require.NoError(t, err)
	for i, f := range forms {
		customer := fmt.Sprintf("customer_form_%d", i)
		ev := storetest.EventByKey(t, h.Store, kinde.Provider, reconcile.DedupeKeyOf(sent[customer].EventID))
		require.NotNil(t, ev.EventTime, f.name)
		require.Equal(t, changed, ev.EventTime.UTC(), "%s: stored with the time of the change", f.name)
		require.Equal(t, reconcile.EventApplied, ev.Status, f.name)
		require.Equal(t, "pro", h.state(customer).Plan, f.name)
	}
}
