package reconcile

import "time"

// Overview is "is billing healthy right now" at a glance, as the database
// tells it (so every replica shows the same): the support console's first
// page. The process's own figures (answers it gave, provider requests per
// second) are added by the server.
type Overview struct {
	Now                time.Time // the database's clock
	Pending, Due, Dead int       // customers in the reconcile queue
	// Sweeps is the newest run of each provider.
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
}

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
}

// OverviewHours is how many hours the overview charts.
const OverviewHours = 24
