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
// billsync_app_changes_oldest_undelivered_seconds > 900.
func (m *Metrics) CollectAccountChanges(stats AppDeliveryStatsFunc, logger *slog.Logger) {
	m.reg.MustRegister(&appCollector{stats: stats, log: logger})
}

var (
	appChangesDesc = prometheus.NewDesc("billsync_app_changes_written_total",
		"Account changes written to the outbox (the newest change's id).", nil, nil)
	appDeliveriesDesc = prometheus.NewDesc("billsync_app_deliveries",
		"Deliveries of changes to the app's endpoints, by status (pending, delivered, dead). Alert on dead.", []string{"status"}, nil)
	appOldestDesc = prometheus.NewDesc("billsync_app_changes_oldest_undelivered_seconds",
		"Age of the oldest change not yet delivered to the app (0 when none waits).", nil, nil)
)

type appCollector struct {
	stats AppDeliveryStatsFunc
	log   *slog.Logger
}

func (c *appCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- appChangesDesc
	ch <- appDeliveriesDesc
	ch <- appOldestDesc
}

func (c *appCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	st, err := c.stats(ctx)
	if err != nil {
		c.log.Warn("metrics: read app delivery figures", slog.Any("error", err))
		return
	}
	ch <- prometheus.MustNewConstMetric(appChangesDesc, prometheus.CounterValue, float64(st.LastChangeID))
	for status, n := range map[string]int64{reconcile.DeliveryPending: st.Pending, reconcile.DeliveryDelivered: st.Delivered, reconcile.DeliveryDead: st.Dead} {
		ch <- prometheus.MustNewConstMetric(appDeliveriesDesc, prometheus.GaugeValue, float64(n), status)
	}
	age := 0.0
	if !st.OldestUndelivered.IsZero() {
		age = max(time.Since(st.OldestUndelivered).Seconds(), 0)
	}
	ch <- prometheus.MustNewConstMetric(appOldestDesc, prometheus.GaugeValue, age)
}
