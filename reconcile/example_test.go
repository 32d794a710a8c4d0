package reconcile_test

import (
	"fmt"
	"os"
	"sync"

	"github.com/billsync/billsync/reconcile"
)

// The plans the pure tests decide with, parsed once and shared (a
// *reconcile.Plans is only read). They are the harness's own
// (testenv.Plans, testenv.FeaturePlans), read here without importing
// mocks/testenv: that would link the fakes, the harness and the store into
// tests that need none of them.

// examplePlans is reconcile.ExamplePlans parsed.
var examplePlans = sync.OnceValue(func() *reconcile.Plans {
	return mustParsePlans("plans.example.yaml", reconcile.ExamplePlans)
})

// featurePlansYAML is the example plans with features declared, the
// fixture testenv embeds as FeaturePlansYAML.
var featurePlansYAML = sync.OnceValue(func() []byte {
	yaml, err := os.ReadFile("../mocks/testenv/plans.features.yaml")
	if err != nil {
		panic(fmt.Sprintf("the feature plans: %v", err))
	}
	return yaml
})

// featurePlans is featurePlansYAML parsed.
var featurePlans = sync.OnceValue(func() *reconcile.Plans {
	return mustParsePlans("plans.features.yaml", featurePlansYAML())
})

func mustParsePlans(name string, yaml []byte) *reconcile.Plans {
	plans, err := reconcile.ParsePlans(yaml)
	if err != nil {
		panic(fmt.Sprintf("%s does not parse: %v", name, err))
	}
	return plans
}
