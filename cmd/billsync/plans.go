package main

import (
	"fmt"
	"os"

	"github.com/billsync/billsync/reconcile"
)

// loadPlans reads the plans file at path, or the built-in example.
func loadPlans(path string) (*reconcile.Plans, error) {
	data := reconcile.ExamplePlans
	if path != "" {
		var err error
		if data, err = os.ReadFile(path); err != nil {
			return nil, fmt.Errorf("BILLSYNC_PLANS: %w", err)
		}
	}
	plans, err := reconcile.ParsePlans(data)
	if err != nil {
		return nil, fmt.Errorf("BILLSYNC_PLANS %s: %w", path, err)
	}
	return plans, nil
}
