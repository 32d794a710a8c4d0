package demo

import (
	"github.com/billsync/billsync/reconcile"
)

// What a delivery says happened, as the naive app reads it.
const (
	naiveChange  = "change"
	naivePayment = "payment"
	naiveCancel  = "cancel"
)

// naiveApp is the foil: the handler most apps write. It applies each
// delivery's payload as it arrives, in two writes, with no dedupe, no
// ordering check and no transaction. Never use it for anything else.
type naiveApp struct {
	plans   *reconcile.Plans
	plan    string
	balance int64
}

// handle applies one delivery as the world read it (kind, and for a
// change the plan's reference at provider).
func (n *naiveApp) handle(provider, kind, planRef string, crash bool) Side {
	answer := "200"
	switch kind {
	case naiveChange:
		old, _ := n.plans.Named(n.plan)
		if p, ok := n.plans.ForPrice(provider, "", []string{planRef}); ok {
			n.plan = p.Name // write 1
			if crash {
				answer = "500 (killed)"
				break
			}
			n.balance += max(p.Allowance-old.Allowance, 0) // write 2
		}
	case naivePayment:
		p, _ := n.plans.Named(n.plan)
		n.balance += p.Allowance
	case naiveCancel:
		n.plan = n.plans.Default().Name
	}
	return Side{Answer: answer, Plan: n.plan, Balance: n.balance}
}
