package server

import (
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/billsync/billsync/reconcile"
)

// budgetMetrics are a provider's budget as every replica shares it
// (reconcile.Spending): the reads of 30 days by operation, the allocation
// and the projection, the replicas sharing the rates, and the 429s by
// reason. The billsync_provider_ series are the platform's own reads;
// the reads on behalf of Stripe Connect accounts, which Stripe allocates
// apart, are the billsync_connect_ series of the same names.
type budgetMetrics struct {
	limited      *prometheus.CounterVec
	reads        *prometheus.GaugeVec
	allocation   *prometheus.GaugeVec
	projected    *prometheus.GaugeVec
	transactions *prometheus.GaugeVec
	replicas     *prometheus.GaugeVec
	// The reads on behalf of connected accounts (SpendView.Connect).
	connectReads        *prometheus.GaugeVec
	connectAllocation   *prometheus.GaugeVec
	connectProjected    *prometheus.GaugeVec
	connectTransactions *prometheus.GaugeVec
	last                *lastSpends // for the console's overview
}

// lastSpends holds each provider's last budget report.
type lastSpends struct {
	mu    sync.Mutex
	views map[string]reconcile.SpendView
}

func newBudgetMetrics() budgetMetrics {
	return budgetMetrics{
		limited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "billsync_provider_rate_limited_total",
			Help: "429 answers of the provider's API, retries included, by provider, API operation and reason (Stripe-Rate-Limited-Reason: global-rate, global-concurrency, endpoint-rate, endpoint-concurrency, resource-specific; none: a 429 without one, e.g. a lock timeout). A rate reason slows what it names. Expect 0 in steady state.",
		}, []string{"provider", "operation", "reason"}),
		reads: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "billsync_provider_reads_30d",
			Help: "Read requests every replica made at the provider's API over the last 30 days (UTC days, today included), by API operation: what the provider's read allocation counts. The platform's own: reads on behalf of Stripe Connect accounts are billsync_connect_reads_30d.",
		}, []string{"provider", "operation"}),
		allocation: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "billsync_provider_read_allocation",
			Help: "The provider's read allocation, reads per rolling 30 days: -stripe-read-allocation, or 500 per transaction stored over 30 days, at least 10,000.",
		}, []string{"provider"}),
		projected: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "billsync_provider_reads_projected_30d",
			Help: "Reads over a whole 30 days at the pace of the days recorded: alert when it exceeds billsync_provider_read_allocation.",
		}, []string{"provider"}),
		transactions: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "billsync_provider_transactions_30d",
			Help: "Payments billsync stored an event of over the last 30 days (Stripe: invoice.paid with money, checkout sessions paid), which the derived read allocation follows. The platform's own customers': connected accounts' are billsync_connect_transactions_30d.",
		}, []string{"provider"}),
		replicas: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "billsync_provider_replicas",
			Help: "Replicas running the provider's worker, which share its global and per-operation rates equally.",
		}, []string{"provider"}),
		connectReads: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "billsync_connect_reads_30d",
			Help: "Read requests every replica made on behalf of Stripe Connect accounts (with Stripe-Account) over the last 30 days, by API operation: what the platform's allocation for its connected accounts counts, apart from billsync_provider_reads_30d.",
		}, []string{"provider", "operation"}),
		connectAllocation: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "billsync_connect_read_allocation",
			Help: "The read allocation of the platform's reads on behalf of its Stripe Connect accounts, reads per rolling 30 days: 500 per transaction of the connected accounts' customers stored over 30 days, at least 10,000.",
		}, []string{"provider"}),
		connectProjected: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "billsync_connect_reads_projected_30d",
			Help: "Reads on behalf of Stripe Connect accounts over a whole 30 days at the pace of the days recorded: alert when it exceeds billsync_connect_read_allocation.",
		}, []string{"provider"}),
		connectTransactions: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "billsync_connect_transactions_30d",
			Help: "Payments of Stripe Connect accounts' customers billsync stored an event of over the last 30 days, which billsync_connect_read_allocation follows.",
		}, []string{"provider"}),
		last: &lastSpends{views: map[string]reconcile.SpendView{}},
	}
}

// spends returns each provider's last budget report, by provider.
func (b budgetMetrics) spends() []reconcile.SpendView {
	b.last.mu.Lock()
	defer b.last.mu.Unlock()
	vs := make([]reconcile.SpendView, 0, len(b.last.views))
	for _, v := range b.last.views {
		vs = append(vs, v)
	}
	slices.SortFunc(vs, func(a, b reconcile.SpendView) int { return strings.Compare(a.Provider, b.Provider) })
	return vs
}

func (b budgetMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{b.limited, b.reads, b.allocation, b.projected, b.transactions, b.replicas,
		b.connectReads, b.connectAllocation, b.connectProjected, b.connectTransactions}
}

// ObserveRateLimited counts one 429 (wire it to the client's OnRateLimited).
func (m *Metrics) ObserveRateLimited(provider, operation, reason string) {
	m.budget.limited.WithLabelValues(provider, operation, reason).Inc()
}

// ObserveSpend records a budget report (wire it to Spending's OnReport).
func (m *Metrics) ObserveSpend(v reconcile.SpendView) {
	b := m.budget
	for op, n := range v.Reads {
		b.reads.WithLabelValues(v.Provider, op).Set(float64(n))
	}
	b.allocation.WithLabelValues(v.Provider).Set(v.Allocation)
	b.projected.WithLabelValues(v.Provider).Set(v.Projected)
	b.transactions.WithLabelValues(v.Provider).Set(float64(v.Transactions))
	b.replicas.WithLabelValues(v.Provider).Set(float64(v.Replicas))
	for op, n := range v.Connect.Reads {
		b.connectReads.WithLabelValues(v.Provider, op).Set(float64(n))
	}
	b.connectAllocation.WithLabelValues(v.Provider).Set(v.Connect.Allocation)
	b.connectProjected.WithLabelValues(v.Provider).Set(v.Connect.Projected)
	b.connectTransactions.WithLabelValues(v.Provider).Set(float64(v.Connect.Transactions))
	b.last.mu.Lock()
	b.last.views[v.Provider] = v
	b.last.mu.Unlock()
}
