// Package openapi runs Stripe's own stateless OpenAPI mock (stripe-mock) for
// tests, so requests billsync sends to its fake Stripe are also checked
// against Stripe's published API description, and reads the spec that
// stripe-mock ships with kin-openapi (Spec.Check) so the fake's answers can
// be checked against it too. It installs the pinned stripe-mock with `go install` when
// it is not already on the machine.
//
// It is test infrastructure: nothing in billsync's binary may import it.
package openapi

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Module is the pinned stripe-mock release.
const Module = "github.com/stripe/stripe-mock@v0.203.0"

var installOnce struct {
	sync.Once
	path string
	err  error
}

// Binary returns the path of stripe-mock, installing it if needed.
func Binary() (string, error) {
	installOnce.Do(func() { installOnce.path, installOnce.err = findOrInstall() })
	return installOnce.path, installOnce.err
}

func findOrInstall() (string, error) {
	if p, err := exec.LookPath("stripe-mock"); err == nil {
		return p, nil
	}
	gobin, err := goEnv("GOBIN")
	if err != nil {
		return "", err
	}
	if gobin == "" {
		gopath, err := goEnv("GOPATH")
		if err != nil {
			return "", err
		}
		gobin = filepath.Join(strings.Split(gopath, string(os.PathListSeparator))[0], "bin")
	}
	p := filepath.Join(gobin, "stripe-mock")
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	cmd := exec.Command("go", "install", Module)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go install %s: %w\n%s", Module, err, out.String())
	}
	return p, nil
}

func goEnv(name string) (string, error) {
	out, err := exec.Command("go", "env", name).Output()
	if err != nil {
		return "", fmt.Errorf("go env %s: %w", name, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// Start runs stripe-mock on a free loopback port for the rest of the test and
// returns its base URL.
func Start(t testing.TB) string {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		t.Fatalf("stripe-mock: %v", err)
	}
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	// stripe-mock also serves HTTPS (default :12112): give it a free port too.
	cmd := exec.CommandContext(ctx, bin, "-http-addr", addr, "-https-addr", "127.0.0.1:0")
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("start stripe-mock: %v", err)
	}
	t.Cleanup(func() { cancel(); _ = cmd.Wait() })

	url := "http://" + addr
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(url + "/v1/customers/cus_probe")
		if err == nil {
			resp.Body.Close()
			return url
		}
		if time.Now().After(deadline) {
			t.Fatalf("stripe-mock did not answer on %s: %v\n%s", addr, err, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("find a free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
