package reconcile

import (
	"fmt"
	"slices"
	"strings"
)

// Contradicts reports whether snap plainly disagrees with what the event's
// own object said its subscription is, and how: the subscription missing
// from the customer's current ones (or still there after the event said it
// ended), another status, or a price the event named absent from its
// items. A nil expectation contradicts nothing; nor does a deleted
// customer, whose subscriptions the provider ended.
//
// A contradiction is a reason to read again, never to apply the event: the
// event may simply be older than the provider's state (delivered late).
func (e *Expectation) Contradicts(snap Snapshot) (string, bool) {
	if e == nil || e.SubscriptionID == "" || snap.Deleted {
		return "", false
	}
	i := slices.IndexFunc(snap.Subscriptions, func(s Subscription) bool { return s.ID == e.SubscriptionID })
	ended := e.Status == "canceled" || e.Status == "incomplete_expired"
	switch {
	case i < 0 && ended:
		return "", false
	case i < 0:
		return fmt.Sprintf("the event says subscription %s is %s; the provider lists no such current subscription", e.SubscriptionID, orNone(e.Status)), true
	case ended:
		return fmt.Sprintf("the event says subscription %s is %s; the provider still lists it as %s", e.SubscriptionID, e.Status, snap.Subscriptions[i].Status), true
	}
	sub := snap.Subscriptions[i]
	if e.Status != "" && sub.Status != e.Status {
		return fmt.Sprintf("the event says subscription %s is %s; the provider says %s", e.SubscriptionID, e.Status, sub.Status), true
	}
	var missing []string
	for _, price := range e.Prices {
		if !slices.ContainsFunc(sub.Items, func(it Item) bool { return slices.Contains(it.PriceRefs, price) }) {
			missing = append(missing, price)
		}
	}
	if len(missing) > 0 {
		return fmt.Sprintf("the event says subscription %s has price %s; the provider's items do not", e.SubscriptionID, strings.Join(missing, ", ")), true
	}
	return "", false
}
