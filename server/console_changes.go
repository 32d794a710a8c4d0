package server

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/billsync/billsync/reconcile"
)

// ChangeConsoleStore is what the console shows of the app's changes and
// their deliveries (store.Store implements it).
type ChangeConsoleStore interface {
	AccountChanges(ctx context.Context, accountID int64, limit int) ([]reconcile.ChangeFeedEntry, error)
	Deliveries(ctx context.Context, status string, limit int) ([]reconcile.AppDelivery, error)
	DeliveryAttempts(ctx context.Context, changeID int64) (map[string][]reconcile.AppDeliveryAttempt, error)
	RetryDelivery(ctx context.Context, changeID int64, endpoint string) error
	AppDeliveryStats(ctx context.Context) (reconcile.AppDeliveryStats, error)
}

// deliveriesLimit bounds the Deliveries page.
const deliveriesLimit = 50

func (c *console) routeChanges() {
	if c.s.admin.Changes == nil {
		return
	}
	c.handle("GET /admin/deliveries", c.deliveries)
	c.handle("POST /admin/deliveries/{id}/retry", c.retryDelivery)
}

// deliveryRow is one delivery with its attempts.
type deliveryRow struct {
	reconcile.AppDelivery
	Attempts []attemptRow
}

type attemptRow struct {
	reconcile.AppDeliveryAttempt
	Took string
}

// deliveriesData is the Deliveries page's data.
type deliveriesData struct {
	Status     string
	Statuses   []string
	Deliveries []deliveryRow
	Retried    string
}

func (c *console) deliveries(w http.ResponseWriter, r *http.Request, session string) error {
	q := r.URL.Query()
	d := deliveriesData{Status: cmp.Or(q.Get("status"), reconcile.DeliveryDead), Retried: q.Get("retried"),
		Statuses: []string{reconcile.DeliveryDead, reconcile.DeliveryPending, reconcile.DeliveryDelivered}}
	switch d.Status {
	case reconcile.DeliveryDead, reconcile.DeliveryPending, reconcile.DeliveryDelivered:
	default:
		return fmt.Errorf("%w: no such list %q: want dead, pending or delivered", errBadRequest, d.Status)
	}
	if _, err := strconv.ParseInt(d.Retried, 10, 64); d.Retried != "" && err != nil {
		d.Retried = ""
	}
	ds, err := c.s.admin.Changes.Deliveries(r.Context(), d.Status, deliveriesLimit)
	if err != nil {
		return err
	}
	for _, dl := range ds {
		attempts, err := c.s.admin.Changes.DeliveryAttempts(r.Context(), dl.ChangeID)
		if err != nil {
			return err
		}
		row := deliveryRow{AppDelivery: dl}
		for _, a := range attempts[dl.Endpoint] {
			row.Attempts = append(row.Attempts, attemptRow{a, a.Took.Round(time.Millisecond).String()})
		}
		d.Deliveries = append(d.Deliveries, row)
	}
	c.show(w, session, "deliveries", "App deliveries", d)
	return nil
}

func (c *console) retryDelivery(w http.ResponseWriter, r *http.Request, _ string) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	if err := c.s.admin.Changes.RetryDelivery(r.Context(), id, r.PostFormValue("endpoint")); err != nil {
		return err
	}
	http.Redirect(w, r, "/admin/deliveries?status=pending&retried="+url.QueryEscape(strconv.FormatInt(id, 10)), http.StatusSeeOther)
	return nil
}
