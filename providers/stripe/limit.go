package stripe

import (
	"context"

	"golang.org/x/time/rate"
)

// listLimiterKey carries List's own rate limiter to attemptTransport.
type listLimiterKey struct{}

// listLimiter returns the limiter List put on ctx, or nil.
func listLimiter(ctx context.Context) *rate.Limiter {
	l, _ := ctx.Value(listLimiterKey{}).(*rate.Limiter)
	return l
}
