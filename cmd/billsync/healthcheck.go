package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"
)

// runHealthcheck asks a running serve's /readyz and answers with its exit
// status, for orchestrators that can run a command but not probe HTTP
// (Docker's HEALTHCHECK, ECS, Nomad's script checks). The image has no
// shell and no curl, so billsync asks itself.
func runHealthcheck(ctx context.Context, args []string, stdout io.Writer, logger *slog.Logger) error {
	fs := flag.NewFlagSet("healthcheck", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), `usage: billsync healthcheck [flags]

Asks a running 'billsync serve' for GET /readyz (the database answers) and
exits 0 when it answers 200, 1 otherwise. For orchestrators without HTTP
probes, e.g. Docker's HEALTHCHECK; the address defaults to serve's own
(BILLSYNC_ADDR), with a wildcard host asked on 127.0.0.1.`)
		fs.PrintDefaults()
	}
	addr := fs.String("addr", cmp.Or(os.Getenv("BILLSYNC_ADDR"), defaultAddr), "serve's listen address (env BILLSYNC_ADDR)")
	timeout := fs.Duration("timeout", 5*time.Second, "how long to wait for the answer")
	if err := fs.Parse(args); err != nil {
		return err
	}
	url, err := readyURL(*addr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("not ready: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("not ready: %s answered %s: %s", url, resp.Status, body)
	}
	fmt.Fprintf(stdout, "ready: %s answered %s\n", url, resp.Status)
	return nil
}

// readyURL is /readyz at a listen address; a wildcard or empty host
// (0.0.0.0:8080, [::]:8080, :8080) is asked on the loopback.
func readyURL(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("-addr %q: want host:port: %w", addr, err)
	}
	if port == "" {
		return "", errors.New("-addr " + addr + ": no port")
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port) + "/readyz", nil
}
