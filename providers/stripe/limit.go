package stripe

import (
	"context"
	"strings"
	"sync"

	"golang.org/x/time/rate"
)

// listLimiterKey carries the listing's own rate limiter to the attempt
// transport.
type listLimiterKey struct{}

// listLimiter returns the limiter ListPage or Split put on ctx, or nil.
func listLimiter(ctx context.Context) *rate.Limiter {
	l, _ := ctx.Value(listLimiterKey{}).(*rate.Limiter)
	return l
}

// endpointLimiters keeps one rate limiter per endpoint family, made on
// first use: the family is the path's first segment after /v1/ (customers,
// subscriptions, prices, invoices, …), which is how Stripe groups the
// limits it applies per endpoint. A nil *endpointLimiters limits nothing.
type endpointLimiters struct {
	limit rate.Limit
	burst int
	mu    sync.Mutex
	by    map[string]*rate.Limiter
}

func newEndpointLimiters(perSecond float64, burst int) *endpointLimiters {
	if perSecond <= 0 {
		return nil
	}
	return &endpointLimiters{limit: rate.Limit(perSecond), burst: burst, by: map[string]*rate.Limiter{}}
}

// of returns the limiter of path's endpoint family.
func (e *endpointLimiters) of(path string) *rate.Limiter {
	if e == nil {
		return nil
	}
	family, _, _ := strings.Cut(strings.TrimPrefix(path, "/v1/"), "/")
	e.mu.Lock()
	defer e.mu.Unlock()
	l, ok := e.by[family]
	if !ok {
		l = rate.NewLimiter(e.limit, e.burst)
		e.by[family] = l
	}
	return l
}
