package reconcile

// ImportState is where a provider's first import stands, for the app API
// to tell "not a customer" from "not known yet".
type ImportState struct {
	Provider string
	// Imported: a run of the provider (an import or a sweep: both list
	// every customer) succeeded.
	Imported bool
	// Running is the provider's run in progress (of either kind), nil
	// when none runs.
	Running *SweepRecord
}

// Pending reports whether some of the provider's customers may not be
// known yet: it was never imported, or an import of it runs now.
func (s ImportState) Pending() bool {
	return !s.Imported || (s.Running != nil && s.Running.Kind == RunImport)
}
