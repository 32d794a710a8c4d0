package stripe

import (
	"context"

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
