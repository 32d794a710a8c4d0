package reconcile

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"
)

// OnDemandStore is what reconciling one customer on demand (resync,
// replay) needs from the store beyond Store.
type OnDemandStore interface {
	// Hold makes the customer's queue row due for trigger (creating or
	// reviving it) and leases it to holder, so the caller reconciles it as
	// a claimed job. A row another worker holds wraps ErrHeld.
	Hold(ctx context.Context, provider, customerID, trigger, holder string, lease time.Duration) (Job, error)
	// Preview runs Apply's transaction and rolls it back: what Apply would
	// do now, with nothing written.
	Preview(ctx context.Context, job Job, observedAt time.Time, d Decider) (Outcome, error)
}

// Request asks for one customer to be reconciled now.
type Request struct {
	Provider   string
	CustomerID string
	Trigger    string // TriggerResync or TriggerReplay
	Actor      string // who asked: "cli:<os user>", "admin-api"
	DryRun     bool   // fetch and decide, write nothing
}

// ErrNotReconciled means the reconcile was tried and failed for a reason
// that may pass (the provider is down): the customer stays queued, and the
// worker retries it as it would any failed job.
var ErrNotReconciled = errors.New("not reconciled")

var holdSeq atomic.Int64

// ReconcileNow reconciles one customer at once, through exactly the path a
// claimed job takes (process), so a resync or a replay can do nothing a
// worker could not: it holds the customer's queue row, fetches, applies,
// answers the customer's events, and logs req.Trigger and req.Actor. An
// outcome of retry or dead comes with an error wrapping ErrNotReconciled.
// A dry run fetches and decides on the current account in a transaction
// that is rolled back: the outcome says what would change.
func (w *Worker) ReconcileNow(ctx context.Context, req Request) (Outcome, error) {
	st, ok := w.cfg.Store.(OnDemandStore)
	if !ok {
		return Outcome{}, errors.New("reconcile now: this store cannot hold a customer's queue row")
	}
	if _, ok := w.providers[req.Provider]; !ok {
		return Outcome{}, fmt.Errorf("reconcile now: provider %q is not configured: %w", req.Provider, ErrNotFound)
	}
	if req.DryRun {
		return w.preview(ctx, st, req)
	}
	holder := w.cfg.Name + "-" + req.Trigger + "-" + strconv.FormatInt(holdSeq.Add(1), 10)
	job, err := st.Hold(ctx, req.Provider, req.CustomerID, req.Trigger, holder, w.cfg.Lease)
	held := time.Now()
	if err != nil {
		return Outcome{}, fmt.Errorf("reconcile %s/%s now: %w", req.Provider, req.CustomerID, err)
	}
	job.Actor = req.Actor
	stop := w.heartbeat(ctx, holder, &heldJobs{jobs: []Job{job}})
	out := w.process(ctx, holder, job, held, nil)
	stop()
	if out.Result == ResultRetry || out.Result == ResultDead {
		return out, fmt.Errorf("%s/%s: %s: %w", req.Provider, req.CustomerID, out.Text, ErrNotReconciled)
	}
	return out, nil
}

// preview is a dry run: the same fetch and decision, rolled back.
func (w *Worker) preview(ctx context.Context, st OnDemandStore, req Request) (Outcome, error) {
	out, _, err := w.dryRun(ctx, st, Job{Provider: req.Provider, CustomerID: req.CustomerID, Trigger: req.Trigger, Actor: req.Actor})
	return out, err
}

// dryRun fetches job's customer and previews the decision on its account
// (Preview: Apply's transaction, rolled back). unknown reports that the
// provider does not know the customer (the outcome is then ignored).
func (w *Worker) dryRun(ctx context.Context, st OnDemandStore, job Job) (out Outcome, unknown bool, err error) {
	customer := job.CustomerID
	var snap Snapshot
	var observedAt time.Time
	if obj, ok := RelatedOf(job.CustomerID); ok {
		// A thin event's object not resolved yet: its customer is read
		// (and nothing handed over), then previewed.
		var c string
		if c, observedAt, err = w.customerOf(ctx, job, obj, w.cfg.Store.Now, nil); err == nil {
			job.CustomerID = c
		}
	}
	if err == nil {
		snap, observedAt, err = w.fetch(ctx, job, w.cfg.Store.Now, nil)
	}
	if err != nil && observedAt.IsZero() { // no read: no slot, or no database time
		return Outcome{}, false, fmt.Errorf("dry run %s/%s: %w", job.Provider, customer, err)
	}
	if err == nil {
		out, err = st.Preview(ctx, job, observedAt, NewDecider(job, snap, w.cfg.Plans, observedAt))
		return out, false, err
	}
	if out, ok := permanent(job, err); ok {
		return out, errors.Is(err, ErrCustomerUnknown), nil
	}
	return Outcome{Result: ResultRetry, Text: err.Error()}, false,
		fmt.Errorf("dry run %s/%s: %w: %w", job.Provider, customer, ErrNotReconciled, err)
}
