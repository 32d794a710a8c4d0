// Package attempt is the HTTP transport the providers' clients put below
// go-retryablehttp, so it runs once per attempt, retries included: it waits
// for the client's rate limiters, bounds the attempt by its own deadline
// (the wait does not count against it), and reports the attempt's outcome.
package attempt

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/billsync/billsync/reconcile"
)

// NetTransport returns the network transport under a provider's client:
// Go's default, keeping up to reconcile.DefaultMaxInFlight idle
// connections to the provider instead of two, since the worker keeps that
// many requests in flight at most; with two, every request beyond them
// would open (and TLS-handshake) a connection of its own.
func NetTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = reconcile.DefaultMaxInFlight
	return t
}

// Limit is a rate limiter an attempt waits for, named for the error when
// the wait is cut short.
type Limit struct {
	Name    string
	Limiter *rate.Limiter
}

// Transport is an http.RoundTripper; Base is required.
type Transport struct {
	Base http.RoundTripper
	// Limits returns what the request waits for, in order (nil entries
	// and a nil func are skipped).
	Limits  func(*http.Request) []Limit
	Timeout time.Duration
	// OnAttempt, when set, sees every attempt's status code ("200", "429",
	// …) or "error" when no answer came (metrics).
	OnAttempt func(status string)
	// OnAnswer, when set, sees every attempt that got an answer, before
	// its body is read: a client's budget counts and reacts to it there.
	OnAnswer func(*http.Request, *http.Response)
}

// Timed runs call with a ctx whose attempts count their waits for the
// rate limits (measure), and adds call's duration less those waits to m,
// unless ctx ended first (a call cut short says nothing of the provider).
func Timed(ctx context.Context, m *reconcile.LatencyMeter, call func(ctx context.Context)) {
	ctx, took := measure(ctx)
	call(ctx)
	if ctx.Err() == nil {
		m.Observe(took())
	}
}

// waitedKey carries the counter of measure to the transport.
type waitedKey struct{}

// measure returns ctx for a call's requests and a func that returns the
// time since measure less what the call's attempts waited for the rate
// limits: the call's own latency (the provider's answers, backoff between
// retries, the client's work), which is what sizes the calls kept in
// flight (reconcile.Budget). The whole duration would not do: it grows
// with the wait for the limiter, and sizing by it grows the calls in
// flight without end (more in flight, longer waits, more in flight).
func measure(ctx context.Context) (context.Context, func() time.Duration) {
	waited := new(atomic.Int64)
	start := time.Now()
	return context.WithValue(ctx, waitedKey{}, waited), func() time.Duration {
		return time.Since(start) - time.Duration(waited.Load())
	}
}

// RoundTrip waits for the limits, then sends req within Timeout.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.Limits != nil {
		began := time.Now()
		for _, l := range t.Limits(req) {
			if l.Limiter == nil {
				continue
			}
			if err := l.Limiter.Wait(req.Context()); err != nil {
				return nil, fmt.Errorf("wait for the %s rate limit: %w", l.Name, err)
			}
		}
		if waited, ok := req.Context().Value(waitedKey{}).(*atomic.Int64); ok {
			waited.Add(int64(time.Since(began)))
		}
	}
	ctx, cancel := context.WithTimeout(req.Context(), t.Timeout)
	resp, err := t.Base.RoundTrip(req.WithContext(ctx))
	if t.OnAttempt != nil {
		status := "error"
		if err == nil {
			status = strconv.Itoa(resp.StatusCode)
		}
		t.OnAttempt(status)
	}
	if err != nil {
		cancel()
		return nil, err
	}
	if t.OnAnswer != nil {
		t.OnAnswer(req, resp)
	}
	resp.Body = cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
}

// cancelOnClose ends the attempt's deadline once the body is read and closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b cancelOnClose) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}
