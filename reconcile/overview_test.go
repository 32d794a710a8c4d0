package reconcile_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/reconcile"
)

// TestHealthSignals: each signal is bad exactly past its alert's
// threshold; a feed that saw no event and an enabled endpoint are shown
// and fine; no app signal before any delivery exists.
func TestHealthSignals(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	on, off := true, false
	newest := now.Add(-2 * time.Hour)
	cases := []struct {
		name  string
		feeds []reconcile.EventsFeedState
		app   reconcile.AppDeliveryStats
		want  map[string]bool // signal name → bad
		value map[string]string
	}{
		{name: "nothing", want: map[string]bool{}},
		{name: "a quiet feed polled at the threshold, its endpoint enabled",
			feeds: []reconcile.EventsFeedState{{Provider: "stripe", PolledAt: now.Add(-reconcile.FeedStaleAfter), NewestEventAt: &newest, EndpointID: "we_1", EndpointEnabled: &on}},
			want:  map[string]bool{"stripe events feed": false, "stripe webhook endpoint": false},
			value: map[string]string{"stripe events feed": "lag 2h0m0s", "stripe webhook endpoint": "enabled"}},
		{name: "a feed past the threshold that saw no event, webhook-free",
			feeds: []reconcile.EventsFeedState{{Provider: "stripe", PolledAt: now.Add(-reconcile.FeedStaleAfter - time.Second)}},
			want:  map[string]bool{"stripe events feed": true},
			value: map[string]string{"stripe events feed": "no events seen"}},
		{name: "an endpoint disabled",
			feeds: []reconcile.EventsFeedState{{Provider: "stripe", PolledAt: now, EndpointEnabled: &off}},
			want:  map[string]bool{"stripe events feed": false, "stripe webhook endpoint": true}},
		{name: "every change delivered",
			app:   reconcile.AppDeliveryStats{Delivered: 3},
			want:  map[string]bool{"oldest undelivered change": false, "dead app deliveries": false},
			value: map[string]string{"oldest undelivered change": "none", "dead app deliveries": "0"}},
		{name: "a change waiting at the threshold",
			app:  reconcile.AppDeliveryStats{Pending: 1, OldestUndelivered: now.Add(-reconcile.UndeliveredTooOld)},
			want: map[string]bool{"oldest undelivered change": false, "dead app deliveries": false}},
		{name: "a change waiting past the threshold, two dead",
			app:   reconcile.AppDeliveryStats{Pending: 1, Dead: 2, OldestUndelivered: now.Add(-reconcile.UndeliveredTooOld - time.Second)},
			want:  map[string]bool{"oldest undelivered change": true, "dead app deliveries": true},
			value: map[string]string{"oldest undelivered change": "15m1s", "dead app deliveries": "2"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, values := map[string]bool{}, map[string]string{}
			for _, s := range reconcile.HealthSignals(now, c.feeds, c.app) {
				got[s.Name], values[s.Name] = s.Bad, s.Value
				require.Equal(t, s.Name != "oldest undelivered change" && s.Name != "dead app deliveries", s.Feed == "stripe", s.Name)
			}
			require.Equal(t, c.want, got)
			for name, v := range c.value {
				require.Equal(t, v, values[name], name)
			}
		})
	}
}
