package reconcile

import (
	"fmt"
	"strconv"
	"time"
)

// Overview is "is billing healthy right now" at a glance, as the database
// tells it (so every replica shows the same): the support console's first
// page. The process's own figures (answers it gave, provider requests per
// second) are added by the server.
type Overview struct {
	Now                time.Time // the database's clock
	Pending, Due, Dead int       // customers in the reconcile queue
	// Sweeps is the newest run of each kind (a sweep, an import) of each
	// provider's own customers (the platform's, not a Stripe Connect
	// account's): a newer import never hides the last sweep.
	Sweeps []SweepRecord
	// Hours are the last 24 hours, oldest first, the current one last.
	Hours []OverviewHour
	// Unmapped are the reconciles of the last 24 hours left ignored
	// because no plan maps a live subscription's prices, by outcome
	// (which names the prices), most accounts first.
	Unmapped []UnmappedCount
	// Signals are further health figures, each with whether it is bad:
	// the place for what later parts report (the events feed's lag, the
	// oldest change not yet delivered to the app). The store fills them.
	Signals []HealthSignal
	// Drifted are the correctness sample's last drifted accounts
	// (OverviewDrifted at most), newest first (docs/correctness.md).
	Drifted []DriftedSample
}

// OverviewDrifted is how many of the sample's last drifted accounts the
// overview lists.
const OverviewDrifted = 10

// OverviewHour counts one hour's deliveries and reconciles.
type OverviewHour struct {
	Start      time.Time
	Deliveries int // deliveries of new events (receipts)
	Copies     int // deliveries of events already stored
	Reconciles map[Result]int
}

// UnmappedCount is one unmapped-price outcome and how many accounts met it.
type UnmappedCount struct {
	Outcome  string
	Accounts int
}

// HealthSignal is one named health figure.
type HealthSignal struct {
	Name, Value, Hint string
	Bad               bool
	// Feed is the provider whose events feed the signal is about ("" for
	// others): a feed turned off leaves its last state, which the console
	// leaves out.
	Feed string
}

// OverviewHours is how many hours the overview charts.
const OverviewHours = 24

// The thresholds of the overview's signals, the same as the alert rules'
// (deploy/prometheus/alerts.yml): a signal is Bad when its alert would be
// pending.
const (
	// FeedStaleAfter: an events feed whose last finished poll is older
	// stopped or fell behind (a backlog's poll finishes only once all of it
	// is stored). Its lag alone says nothing: it grows too while the
	// provider has no new events.
	FeedStaleAfter = 10 * time.Minute
	// UndeliveredTooOld: the app has not heard of a change for this long.
	UndeliveredTooOld = 15 * time.Minute
)

// HealthSignals are the overview's signals from the events feeds' states
// and the app deliveries' figures, read at now: per provider that has
// polled, its feed (lag, last poll, caught) and its webhook endpoint's
// status when a poll read it; and, once any delivery to the app exists,
// the oldest undelivered change's age and the dead deliveries.
func HealthSignals(now time.Time, feeds []EventsFeedState, app AppDeliveryStats) []HealthSignal {
	var out []HealthSignal
	for _, f := range feeds {
		polled := now.Sub(f.PolledAt)
		s := HealthSignal{Name: f.Provider + " events feed", Value: "no events seen",
			Hint: fmt.Sprintf("last poll %s ago; %d caught (webhooks late or lost)", age(polled), f.Caught),
			Bad:  polled > FeedStaleAfter, Feed: f.Provider}
		if f.NewestEventAt != nil {
			s.Value = "lag " + age(now.Sub(*f.NewestEventAt))
		}
		if s.Bad {
			s.Hint += fmt.Sprintf(": no poll for over %s, the feed stopped or fell behind", age(FeedStaleAfter))
		}
		out = append(out, s)
		if f.EndpointEnabled != nil {
			s := HealthSignal{Name: f.Provider + " webhook endpoint", Value: "enabled", Hint: f.EndpointID, Feed: f.Provider}
			if !*f.EndpointEnabled {
				s.Value, s.Bad = "disabled", true
				s.Hint = f.EndpointID + " disabled by the provider: only the events feed signals changes; re-enable it"
			}
			out = append(out, s)
		}
	}
	if app.Pending+app.Delivered+app.Dead == 0 && app.OldestUndelivered.IsZero() {
		return out
	}
	oldest := HealthSignal{Name: "oldest undelivered change", Value: "none", Hint: "every change reached the app"}
	if !app.OldestUndelivered.IsZero() {
		d := max(now.Sub(app.OldestUndelivered), 0)
		oldest.Value = age(d)
		oldest.Hint = fmt.Sprintf("%d deliveries to the app pending", app.Pending)
		if app.Pending == 0 {
			// Changes past an endpoint's cursor have no delivery yet.
			oldest.Hint = "changes not yet queued for the app: is serve's deliverer running?"
		}
		oldest.Bad = d > UndeliveredTooOld
	}
	dead := HealthSignal{Name: "dead app deliveries", Value: strconv.FormatInt(app.Dead, 10), Bad: app.Dead > 0}
	if dead.Bad {
		dead.Hint = "the app never accepted them: fix its endpoint, then retry them from App deliveries"
	}
	return append(out, oldest, dead)
}

// age rounds d to the second for a reader.
func age(d time.Duration) string {
	return d.Round(time.Second).String()
}
