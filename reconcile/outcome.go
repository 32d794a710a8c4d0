package reconcile

import "time"

// Result classifies what one reconcile did.
type Result string

const (
	ResultApplied   Result = "applied"   // the account changed
	ResultUnchanged Result = "unchanged" // the account already matched
	ResultStale     Result = "stale"     // a newer snapshot was already applied
	ResultIgnored   Result = "ignored"   // permanent: nothing can be applied
	ResultRetry     Result = "retry"     // transient failure, will retry
	ResultDead      Result = "dead"      // transient failures exhausted the attempts
)

// Outcomes of a second read (Outcome.Recheck).
const (
	RecheckAgreed    = "agreed"    // the first read was stale
	RecheckDisagreed = "disagreed" // still contradicts: the event was older than the provider's state, or the lag is longer
)

// Outcome is what one reconcile did, as recorded in reconcile_log.
type Outcome struct {
	AccountID int64   `json:"account_id"`
	Result    Result  `json:"result"`
	Text      string  `json:"text"`
	Granted   int64   `json:"granted"` // allowance added by this reconcile
	Before    Account `json:"before"`
	After     Account `json:"after"`
	Events    int     `json:"events"` // stored events this reconcile answered
	// Unmapped names the prices that left the account frozen (ignored):
	// subscriptions keep their plan but none of their prices maps to a
	// plan. Counted (billsync_unmapped_prices) and alerted by the caller.
	Unmapped []string `json:"unmapped,omitempty"`
	// Recheck says whether the customer was read a second time because the
	// first read contradicted its newest event (a stale read), and whether
	// the second read then agreed: "" (not read again), RecheckAgreed or
	// RecheckDisagreed.
	Recheck string `json:"recheck,omitempty"`
	// Answered are the stored events this reconcile answered, each once
	// (set by the store, for the freshness SLI).
	Answered []Answered `json:"-"`
	// AnsweredAt is the database's time just after the commit that
	// answered them (set by the worker; zero when unknown): each event
	// waited AnsweredAt - ReceivedAt to be reflected in its account.
	AnsweredAt time.Time `json:"-"`
	// Took is how long the reconcile took, from the clock read to the
	// commit (set by the worker; metrics).
	Took time.Duration `json:"-"`
}

// Answered is one stored event a reconcile answered: where it was first
// stored from and when, by the database's clock.
type Answered struct {
	Source     string // SourceWebhook or SourceFeed
	ReceivedAt time.Time
}

// EventStatus is the status the outcome gives the events it answers.
func (o Outcome) EventStatus() EventStatus {
	switch o.Result {
	case ResultIgnored:
		return EventIgnored
	case ResultDead:
		return EventDead
	case ResultRetry:
		return EventPending
	}
	return EventApplied
}
