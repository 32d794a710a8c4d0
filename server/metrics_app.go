package server

import (
	"context"
	"log/slog"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/billsync/billsync/reconcile"
)

// AppDeliveryStatsFunc reads the app deliveries' figures (store.AppDeliveryStats).
type AppDeliveryStatsFunc func(ctx context.Context) (reconcile.AppDeliveryStats, error)

func newAppAttempts() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "billsync_app_delivery_attempts_total",
		Help: "Attempts to deliver an account change to the app, by what came of the delivery (delivered, retry, dead) and the app's status code (none: no answer). Alert on dead.",
	}, []string{"result", "code"})
}

// ObserveAppDelivery counts one attempt of an app delivery and what became
// of the delivery (the deliverer's OnAttempt).
func (m *Metrics) ObserveAppDelivery(_ reconcile.AppDelivery, a reconcile.AppDeliveryAttempt, status string) {
	result := status
	if status == reconcile.DeliveryPending {
		result = "retry"
	}
	code := "none"
	if a.StatusCode != 0 {
		code = strconv.Itoa(a.StatusCode)
	}
	m.appAttempts.WithLabelValues(result, code).Inc()
}

// CollectAccountChanges reports the outbox at each scrape, read from the
// database so every replica tells the same: changes written, deliveries by
// status, and the age of the oldest undelivered change. Alert when it
// passes what the app tolerates, e.g.
// billsync_account_changes_oldest_undelivered_seconds > 900.
func (m *Metrics) CollectAccountChanges(stats AppDeliveryStatsFunc, logger *slog.Logger) {
	m.reg.MustRegister(&appCollector{stats: stats, log: logger})
}

var (
	accountChangesDesc, accountChangesOldDesc = renamedDesc("billsync_account_changes_written_total", "billsync_app_changes_written_total",
		"Account changes written to the outbox (the newest change's id).")
	appDeliveriesDesc = prometheus.NewDesc("billsync_app_deliveries",
		"Deliveries of changes to the app's endpoints, by status (pending, delivered, dead). Alert on dead.", []string{"status"}, nil)
	oldestDesc, oldestOldDesc = renamedDesc("billsync_account_changes_oldest_undelivered_seconds", "billsync_app_changes_oldest_undelivered_seconds",
		"Age of the oldest account change not yet delivered to the app (0 when none waits).")
)

// renamedDesc returns the description of a label-less metric and of its
// old name, served with the same value for one release (docs/metrics.md,
// "Renamed").
func renamedDesc(name, oldName, help string) (desc, old *prometheus.Desc) {
	return prometheus.NewDesc(name, help, nil, nil), prometheus.NewDesc(oldName, deprecatedHelp(name)+" "+help, nil, nil)
}

type appCollector struct {
	stats AppDeliveryStatsFunc
	log   *slog.Logger
}

func (c *appCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- accountChangesDesc
	ch <- accountChangesOldDesc
	ch <- appDeliveriesDesc
	ch <- oldestDesc
	ch <- oldestOldDesc
}

func (c *appCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	st, err := c.stats(ctx)
	if err != nil {
		c.log.Warn("metrics: read app delivery figures", slog.Any("error", err))
		return
	}
	for _, d := range []*prometheus.Desc{accountChangesDesc, accountChangesOldDesc} {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(st.LastChangeID))
	}
	for status, n := range map[string]int64{reconcile.DeliveryPending: st.Pending, reconcile.DeliveryDelivered: st.Delivered, reconcile.DeliveryDead: st.Dead} {
		ch <- prometheus.MustNewConstMetric(appDeliveriesDesc, prometheus.GaugeValue, float64(n), status)
	}
	age := 0.0
	if !st.OldestUndelivered.IsZero() {
		age = max(time.Since(st.OldestUndelivered).Seconds(), 0)
	}
	for _, d := range []*prometheus.Desc{oldestDesc, oldestOldDesc} {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, age)
	}
}
