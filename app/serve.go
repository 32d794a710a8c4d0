package app

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"
)

// listenAndServe serves h on addr until ctx is done; then, within grace in
// all, it lets in-flight requests finish and runs stop (the background
// work's own shutdown) alongside, and then last, with what is left.
func listenAndServe(ctx context.Context, addr string, h http.Handler, grace time.Duration, stdout io.Writer, logger *slog.Logger,
	stop func(context.Context) error, last func(context.Context), console bool, intakes ...string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	hs := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	var hooks []string
	for _, p := range intakes {
		hooks = append(hooks, "POST /webhooks/"+p)
	}
	// The admin token opens the console; without one it is not served.
	consoleURL := "off (set BILLSYNC_ADMIN_TOKEN)"
	if console {
		consoleURL = "http://" + ln.Addr().String() + "/admin/"
	}
	fmt.Fprintf(stdout, "billsync listening on http://%s (console: %s; webhooks: %s)\n", ln.Addr(), consoleURL, cmp.Or(strings.Join(hooks, ", "), "none"))
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	logger.Info("shutting down", slog.Duration("grace", grace))
	shutCtx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- stop(shutCtx) }()
	var errs []error
	if err := hs.Shutdown(shutCtx); err != nil {
		errs = append(errs, fmt.Errorf("shutdown: %w", err))
	}
	errs = append(errs, <-stopped)
	last(shutCtx)
	return errors.Join(errs...)
}
