package reconcile

import "time"

// Trigger says why a customer was queued.
const (
	TriggerWebhook = "webhook"
	TriggerFeed    = "feed" // the events feed listed an event (eventsfeed.go)
	TriggerSweep   = "sweep"
	TriggerImport  = "import" // a provider's first import (RunImport)
	TriggerResync  = "resync"
	TriggerReplay  = "replay"
	TriggerSample  = "sample" // the correctness sample found the account drifted (sample.go)
)

// Job is a claimed queue row: one customer to reconcile, or an object
// whose customer the worker reads first (CustomerID is then a Related key).
type Job struct {
	ID          int64
	Provider    string
	CustomerID  string
	Trigger     string
	RequestedAt time.Time
	// ClaimedAt is the database's time when the job was claimed (or
	// held); zero when the store does not say. A worker's fetch is
	// observed at ClaimedAt plus the time since the claim came back
	// (observer), without asking the database again.
	ClaimedAt time.Time
	Attempts  int // failed attempts so far
	// Actor is who asked, for the audit log: "cli:<os user>", "admin-api";
	// empty for the queue's own work (see ActorOf).
	Actor string
	// Expect is the newest pending event's expectation for the customer
	// (by the provider's event time), nil when none carries one. The store
	// settles it on the queue row as the events arrive.
	Expect *Expectation
	// UserRef is the app reference named by the customer's newest stored
	// event that names one, whatever its status ('' when none ever did),
	// for a provider whose reads do not carry one; settled on the queue row
	// as the events arrive, like Expect.
	UserRef string
}

// ActorOf returns who the job's reconcile is recorded as: its own actor,
// else "sweep" or "import" for those runs' jobs and "worker" for the rest.
func ActorOf(job Job) string {
	switch {
	case job.Actor != "":
		return job.Actor
	case job.Trigger == TriggerSweep:
		return "sweep"
	case job.Trigger == TriggerImport:
		return "import"
	}
	return "worker"
}
