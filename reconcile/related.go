package reconcile

import (
	"fmt"
	"strings"
)

// Related is an object an event names instead of its customer: a Stripe
// thin event's related_object when it is a subscription or an invoice,
// whose customer only the provider's API can tell.
//
// The intake never asks the provider (a webhook is only stored): it stores
// such an event, and queues it, under the object's Key in place of a
// customer id. The worker that claims that queue row reads the object's
// customer (Provider.CustomerOf) and hands the row and its events to the
// customer (Store.Resolve), then reconciles the customer as any job. So
// the queue's dedup (one row per object, however many copies and events),
// its leases, backoff and dead rows serve the object exactly as they serve
// a customer, and the guarded writes are the customer's reconcile's own.
type Related struct {
	// Account is the connected account holding the object (see
	// Connected), "" for the platform's own.
	Account string
	Type    string // the provider's object type: "subscription", "invoice"
	ID      string
}

// relatedPrefix starts a queue key that names a related object. No
// provider's customer id holds a colon (Stripe's ids are letters, digits
// and underscores).
const relatedPrefix = "related:"

// Key is the object's queue key: "related:<type>:<id>", under its
// connected account's prefix when it has one.
func (r Related) Key() string { return Connected(r.Account, relatedPrefix+r.Type+":"+r.ID) }

func (r Related) String() string { return Connected(r.Account, r.Type+" "+r.ID) }

// RelatedOf reads the object a queue key names; ok is false for a
// customer id.
func RelatedOf(key string) (r Related, ok bool) {
	account, key := SplitConnected(key)
	rest, ok := strings.CutPrefix(key, relatedPrefix)
	if !ok {
		return Related{}, false
	}
	r.Account = account
	r.Type, r.ID, ok = strings.Cut(rest, ":")
	return r, ok && r.Type != "" && r.ID != ""
}

// customerOfRelated checks the customer a provider named for obj: none, or
// one billsync cannot keep, is a *PermanentError (the object's events end
// ignored with the reason).
func customerOfRelated(obj Related, customer string) (string, error) {
	clean, problem := Storable(customer)
	switch {
	case problem != "":
		return "", Permanent("the customer id of %s %s", obj, problem)
	case clean == "":
		return "", Permanent("%s names no customer", obj)
	case strings.HasPrefix(clean, relatedPrefix):
		return "", Permanent("%s names customer %q, which billsync cannot tell from an object", obj, clean)
	}
	return clean, nil
}

// handedOver is the outcome of a resolved job folded into its customer's
// queue row: that row's reconcile, due or under way, answers the events.
// Nothing was written to an account, and no log row is written: the
// customer's reconcile logs what it does.
func handedOver(obj Related, customer string) Outcome {
	return Outcome{Result: ResultUnchanged, Text: fmt.Sprintf("%s belongs to customer %s, queued already: its reconcile answers the events", obj, customer)}
}
