package demo

import (
	"encoding/json"

	"github.com/billsync/billsync/reconcile"
)

// naiveApp is the foil: the handler most apps write. It applies each
// delivery's payload as it arrives, in two writes, with no dedupe, no
// ordering check and no transaction. Never use it for anything else.
type naiveApp struct {
	plans   *reconcile.Plans
	plan    string
	balance int64
}

func (n *naiveApp) handle(body []byte, crash bool) Side {
	var ev struct {
		Type string
		Data struct {
			Object struct {
				Items struct {
					Data []struct {
						Price struct {
							LookupKey string `json:"lookup_key"`
						}
					}
				}
			}
		}
	}
	_ = json.Unmarshal(body, &ev) // the foil trusts its input
	answer := "200"
	switch ev.Type {
	case "customer.subscription.created", "customer.subscription.updated":
		old, _ := n.plans.Named(n.plan)
		if items := ev.Data.Object.Items.Data; len(items) > 0 {
			if p, ok := n.plans.ForPrice("stripe", []string{items[0].Price.LookupKey}); ok {
				n.plan = p.Name // write 1
				if crash {
					answer = "500 (killed)"
					break
				}
				n.balance += max(p.Allowance-old.Allowance, 0) // write 2
			}
		}
	case "invoice.paid":
		p, _ := n.plans.Named(n.plan)
		n.balance += p.Allowance
	case "customer.subscription.deleted":
		n.plan = n.plans.Default().Name
	}
	return Side{Answer: answer, Plan: n.plan, Balance: n.balance}
}
