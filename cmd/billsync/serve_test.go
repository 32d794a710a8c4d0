package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v82/webhook"

	stripemock "github.com/billsync/billsync/mocks/stripe"
	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/store"
	"github.com/billsync/billsync/store/pgembed"
	"github.com/billsync/billsync/store/storetest"
)

// TestMain lets a test re-run this binary as billsync itself, so SIGTERM
// handling is tested on a real process.
func TestMain(m *testing.M) {
	if os.Getenv("BILLSYNC_TEST_AS_MAIN") == "1" {
		os.Args = append([]string{"billsync"}, strings.Fields(os.Getenv("BILLSYNC_TEST_ARGS"))...)
		main()
		os.Exit(0)
	}
	os.Exit(storetest.Main(m))
}

// startBillsync runs `billsync serve` as a child process on the embedded
// database under dataDir and waits until it is ready.
// billsyncProc is a running `billsync serve` child.
type billsyncProc struct {
	cmd    *exec.Cmd
	exited chan struct{}
	err    error // valid once exited is closed
	logs   *syncBuffer
}

func startBillsync(t *testing.T, dataDir, addr string, env ...string) *billsyncProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(),
		"BILLSYNC_TEST_AS_MAIN=1",
		"BILLSYNC_TEST_ARGS=serve -workers 0 -addr "+addr+" -data-dir "+dataDir,
		"DATABASE_URL=",
		"STRIPE_WEBHOOK_SECRET=whsec_serve_test",
		// The events feed is a second signal: off unless a test asks for
		// it, so a test's customers reach billsync only as it says.
		"BILLSYNC_EVENTS_POLL=off",
	)
	cmd.Env = append(cmd.Env, env...)
	p := &billsyncProc{cmd: cmd, exited: make(chan struct{}), logs: &syncBuffer{}}
	cmd.Stdout, cmd.Stderr = p.logs, p.logs
	require.NoError(t, cmd.Start())
	go func() { p.err = cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-p.exited })

	waitHTTP(t, "http://"+addr+"/readyz", p.exited, p.logs)
	return p
}

func stopBillsync(t *testing.T, p *billsyncProc) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-p.exited:
		require.NoError(t, p.err, "billsync must exit 0 on SIGTERM:\n%s", p.logs.String())
	case <-time.After(time.Minute):
		t.Fatal("billsync did not exit within a minute of SIGTERM")
	}
}

func postEvent(t *testing.T, addr, id string) string {
	t.Helper()
	body := fmt.Appendf(nil, `{"id":%q,"object":"event","type":"invoice.paid","created":%d,"data":{"object":{"object":"invoice","customer":"cus_serve"}}}`, id, time.Now().Unix())
	sig := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: "whsec_serve_test"})
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/webhooks/stripe", bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Stripe-Signature", sig.Header)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var ans struct{ Status string }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&ans))
	return ans.Status
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().String()
}

// TestServeEmbeddedRestart: serve on the embedded database, SIGTERM stops the
// server and its PostgreSQL cleanly, and a second start finds the data.
func TestServeEmbeddedRestart(t *testing.T) {
	root, err := os.MkdirTemp("", "billsync-serve-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(root) })
	require.NoError(t, os.Chmod(root, 0o755)) // PostgreSQL's user must reach it when we are root
	dataDir := filepath.Join(root, "data")
	addr := freeAddr(t)

	cmd := startBillsync(t, dataDir, addr)
	require.Equal(t, "stored", postEvent(t, addr, "evt_restart"))
	stopBillsync(t, cmd)
	_, err = os.Stat(filepath.Join(dataDir, "pgdata", "postmaster.pid"))
	require.ErrorIs(t, err, os.ErrNotExist, "SIGTERM must stop the embedded PostgreSQL")

	cmd = startBillsync(t, dataDir, addr)
	require.Equal(t, "duplicate", postEvent(t, addr, "evt_restart"), "the first run's event must survive the restart")
	stopBillsync(t, cmd)
}

func TestServeRefusesBadConfiguration(t *testing.T) {
	dir := t.TempDir()
	secretFile := filepath.Join(dir, "whsec")
	require.NoError(t, os.WriteFile(secretFile, []byte("whsec_from_file\n"), 0o600))
	tests := map[string]struct {
		env  map[string]string
		want string
	}{
		"ErrNoSecret":    {map[string]string{}, "STRIPE_WEBHOOK_SECRET is not set"},
		"ErrBothForms":   {map[string]string{"STRIPE_WEBHOOK_SECRET": "whsec_a", "STRIPE_WEBHOOK_SECRET_FILE": secretFile}, "both set"},
		"ErrNotWhsec":    {map[string]string{"STRIPE_WEBHOOK_SECRET": "sk_test_oops"}, "should start with whsec_"},
		"ErrMissingFile": {map[string]string{"STRIPE_WEBHOOK_SECRET_FILE": filepath.Join(dir, "nope")}, "STRIPE_WEBHOOK_SECRET_FILE"},
		"ErrBadAddr":     {map[string]string{"STRIPE_WEBHOOK_SECRET": "whsec_a", "BILLSYNC_ADDR": "nonsense"}, "BILLSYNC_ADDR"},
		"ErrBadAPIURL":   {map[string]string{"STRIPE_WEBHOOK_SECRET": "whsec_a", "STRIPE_API_URL": "not a url"}, "STRIPE_API_URL"},
		"ErrShortAdmin":  {map[string]string{"STRIPE_WEBHOOK_SECRET": "whsec_a", "BILLSYNC_ADMIN_TOKEN": "whsec_a"}, "BILLSYNC_ADMIN_TOKEN is shorter"},
		"ErrAdminTwice":  {map[string]string{"STRIPE_WEBHOOK_SECRET": "whsec_a", "BILLSYNC_ADMIN_TOKEN": "whsec_a", "BILLSYNC_ADMIN_TOKEN_FILE": secretFile}, "BILLSYNC_ADMIN_TOKEN and BILLSYNC_ADMIN_TOKEN_FILE are both set"},
		"ErrShortApp":    {map[string]string{"STRIPE_WEBHOOK_SECRET": "whsec_a", "BILLSYNC_APP_TOKEN": "whsec_a"}, "BILLSYNC_APP_TOKEN is shorter"},
		"ErrAppTwice":    {map[string]string{"STRIPE_WEBHOOK_SECRET": "whsec_a", "BILLSYNC_APP_TOKEN": "whsec_a", "BILLSYNC_APP_TOKEN_FILE": secretFile}, "BILLSYNC_APP_TOKEN and BILLSYNC_APP_TOKEN_FILE are both set"},
		"ErrAppIsAdmin":  {map[string]string{"STRIPE_WEBHOOK_SECRET": "whsec_a", "BILLSYNC_APP_TOKEN": "whsec_a_0123456789abcdef", "BILLSYNC_ADMIN_TOKEN": "whsec_a_0123456789abcdef"}, "BILLSYNC_APP_TOKEN equals BILLSYNC_ADMIN_TOKEN"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			for _, k := range []string{"STRIPE_WEBHOOK_SECRET", "STRIPE_WEBHOOK_SECRET_FILE", "STRIPE_API_KEY", "STRIPE_API_KEY_FILE", "BILLSYNC_ADDR", "STRIPE_API_URL", "BILLSYNC_ADMIN_TOKEN", "BILLSYNC_ADMIN_TOKEN_FILE", "BILLSYNC_APP_TOKEN", "BILLSYNC_APP_TOKEN_FILE"} {
				t.Setenv(k, tt.env[k])
			}
			// Cancelled: if validation wrongly passed, serve fails at once
			// instead of starting a database.
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			var out bytes.Buffer
			err := run(ctx, []string{"serve"}, &out, &out)
			require.Error(t, err)
			require.Contains(t, err.Error(), tt.want)
			require.NotContains(t, err.Error(), "whsec_a", "a secret must never appear in an error")
		})
	}
	t.Run("ErrBadIntakeTimeout", func(t *testing.T) {
		t.Setenv("STRIPE_WEBHOOK_SECRET", "whsec_a")
		t.Setenv("STRIPE_WEBHOOK_SECRET_FILE", "")
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		var out bytes.Buffer
		err := run(ctx, []string{"serve", "-workers", "0", "-intake-timeout", "0s"}, &out, &out)
		require.ErrorContains(t, err, "-intake-timeout must be positive")
	})
	t.Run("SecretFromFile", func(t *testing.T) {
		t.Setenv("STRIPE_WEBHOOK_SECRET", "")
		t.Setenv("STRIPE_WEBHOOK_SECRET_FILE", secretFile)
		var cfg config
		require.NoError(t, cfg.loadSecrets(os.Getenv))
		require.Equal(t, []string{"whsec_from_file"}, cfg.StripeWebhookSecrets)
		t.Setenv("BILLSYNC_ADMIN_TOKEN_FILE", secretFile)
		require.NoError(t, cfg.loadSecrets(os.Getenv))
		require.Equal(t, "whsec_from_file", cfg.AdminToken)
		t.Setenv("BILLSYNC_ADMIN_TOKEN_FILE", "")
		t.Setenv("BILLSYNC_APP_TOKEN_FILE", secretFile)
		require.NoError(t, cfg.loadSecrets(os.Getenv))
		require.Equal(t, "whsec_from_file", cfg.AppToken)
	})
}

// syncBuffer is a bytes.Buffer safe for a child's output and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestServeReconcilesAgainstStripe runs `billsync serve` with its workers
// against the fake Stripe: a subscription made at Stripe reaches billsync
// as webhooks, and the account ends as Stripe says, through LISTEN/NOTIFY.
func TestServeReconcilesAgainstStripe(t *testing.T) {
	ctx := context.Background()
	h := testenv.ForTest(t, testenv.Stripe, testenv.Options{})
	addr := freeAddr(t)
	secret := h.Stripe.Fake.AddWebhookEndpoint("http://" + addr + "/webhooks/stripe")
	dataDir := filepath.Join(reachableDir(t), "data")
	// No import at start: on a loaded machine it may list the customer
	// after the test makes it and apply it first, leaving the webhooks'
	// reconciles unchanged.
	cmd := startBillsync(t, dataDir, addr,
		"BILLSYNC_TEST_ARGS=serve -workers 2 -import-at-start=false -addr "+addr+" -data-dir "+dataDir,
		"STRIPE_WEBHOOK_SECRET="+secret, "STRIPE_API_KEY="+stripemock.DefaultAPIKey, "STRIPE_API_URL="+h.URL)

	customer, err := h.Stripe.Customer(ctx, "user_serve")
	require.NoError(t, err)
	_, err = h.Stripe.Subscribe(ctx, customer, "price_team")
	require.NoError(t, err)

	dbURL, err := pgembed.RunningURL(dataDir, "billsync")
	require.NoError(t, err)
	st, err := store.Open(ctx, dbURL, store.Options{})
	require.NoError(t, err)
	defer st.Close()
	require.Eventually(t, func() bool {
		a, err := st.Account(ctx, "stripe", customer)
		return err == nil && a.Plan == "team"
	}, 30*time.Second, 50*time.Millisecond, "billsync never applied the subscription:\n%s", cmd.logs.String())
	a, err := st.Account(ctx, "stripe", customer)
	require.NoError(t, err)
	require.Equal(t, "user_serve", a.UserRef)
	balance, err := st.Balance(ctx, a.ID)
	require.NoError(t, err)
	require.EqualValues(t, 2000, balance)

	// The real wiring counts what happened: the worker's outcome and the
	// intake's answers reach GET /metrics.
	metrics := scrape(t, addr)
	require.Regexp(t, `(?m)^billsync_reconciles_total\{provider="stripe",result="applied"\} [1-9]`, metrics)
	require.Regexp(t, `(?m)^billsync_webhook_receipts_total\{answer="stored",provider="stripe"\} [1-9]`, metrics)
	require.Regexp(t, `(?m)^billsync_queue_customers\{state="dead"\} 0$`, metrics)
	require.Regexp(t, `(?m)^billsync_reconcile_seconds_count\{provider="stripe",result="applied"\} [1-9]`, metrics)
	require.Regexp(t, `(?m)^billsync_provider_requests_total\{provider="stripe",status="200"\} [1-9]`, metrics)
	st.Close()
	stopBillsync(t, cmd)
}

func scrape(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

// TestServeShutdownIsBoundedWhenTheDatabaseHangs: SIGTERM while PostgreSQL
// is frozen (SIGSTOP) and a worker is between its fetch and its write.
// serve must still exit, within -shutdown-timeout plus one -db-timeout, not
// wait for the database forever.
func TestServeShutdownIsBoundedWhenTheDatabaseHangs(t *testing.T) {
	cluster, _ := storetest.PrivateCluster(t)
	// The worker's reads (GETs) hang at the fake until the client gives
	// up: the worker is mid-fetch when the database freezes and SIGTERM
	// comes.
	fetching := make(chan struct{}, 1)
	h := testenv.ForTest(t, testenv.Stripe, testenv.Options{Wrap: func(fake http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodGet {
				select {
				case fetching <- struct{}{}:
				default:
				}
				<-r.Context().Done()
				return
			}
			fake.ServeHTTP(w, r)
		})
	}})
	addr := freeAddr(t)
	secret := h.Stripe.Fake.AddWebhookEndpoint("http://" + addr + "/webhooks/stripe")
	cmd := startBillsync(t, "", addr,
		"BILLSYNC_TEST_ARGS=serve -workers 1 -addr "+addr+" -shutdown-timeout 2s -db-timeout 1s",
		"DATABASE_URL="+cluster.URL("billsync"),
		"STRIPE_WEBHOOK_SECRET="+secret, "STRIPE_API_KEY="+stripemock.DefaultAPIKey, "STRIPE_API_URL="+h.URL)

	customer, err := h.Stripe.Customer(context.Background(), "")
	require.NoError(t, err)
	_, err = h.Stripe.Subscribe(context.Background(), customer, "price_pro")
	require.NoError(t, err)
	select {
	case <-fetching:
	case <-time.After(time.Minute):
		t.Fatalf("no fetch started:\n%s", cmd.logs.String())
	}

	thaw := storetest.Freeze(t, cluster.DataDir())
	defer thaw()
	require.NoError(t, cmd.cmd.Process.Signal(syscall.SIGTERM))
	stopping := time.Now()
	select {
	case <-cmd.exited:
		t.Logf("serve exited %s after SIGTERM (%v) with the database frozen", time.Since(stopping).Round(time.Millisecond), cmd.err)
	case <-time.After(time.Minute): // a liveness guard: before the fix it never exited
		t.Fatalf("billsync serve did not exit while the database was frozen:\n%s", cmd.logs.String())
	}
}

// TestNoMigrateRefusesPendingMigrations: with -no-migrate, serve must not
// start on a schema that is behind, and must not touch it either.
func TestNoMigrateRefusesPendingMigrations(t *testing.T) {
	ctx := context.Background()
	st := storetest.OpenStore(t, storetest.EmptyURL(t), store.Options{})
	logger := slog.New(slog.DiscardHandler)

	err := prepareSchema(ctx, st, true, logger)
	require.ErrorContains(t, err, "migrations are pending")
	pending, err := st.Pending(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, pending, "refusing must not migrate")

	require.NoError(t, prepareSchema(ctx, st, false, logger))
	require.NoError(t, prepareSchema(ctx, st, true, logger), "an up-to-date schema is accepted")
}

// TestServeStopsWithALongPollInFlight: SIGTERM while the app long-polls the
// change feed (wait=30s, the docs' example): the poll answers at once with
// the cursor it sent, and serve exits 0 instead of sitting out
// -shutdown-timeout (a rolling deploy would stop taking webhooks meanwhile).
func TestServeStopsWithALongPollInFlight(t *testing.T) {
	const appToken = "app-token-0123456789abc"
	addr := freeAddr(t)
	dataDir := filepath.Join(reachableDir(t), "data")
	p := startBillsync(t, dataDir, addr, "BILLSYNC_APP_TOKEN="+appToken,
		"BILLSYNC_TEST_ARGS=serve -workers 0 -shutdown-timeout 10s -addr "+addr+" -data-dir "+dataDir)
	sent := make(chan string, 1) // the client's local address, once the request is written
	type answer struct {
		code int
		body string
		err  error
	}
	answered := make(chan answer, 1)
	go func() {
		var local string
		trace := &httptrace.ClientTrace{
			GotConn:      func(info httptrace.GotConnInfo) { local = info.Conn.LocalAddr().String() },
			WroteRequest: func(httptrace.WroteRequestInfo) { sent <- local },
		}
		req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace),
			http.MethodGet, "http://"+addr+"/api/changes?wait=30s", nil)
		req.Header.Set("Authorization", "Bearer "+appToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			answered <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		answered <- answer{code: resp.StatusCode, body: string(b), err: err}
	}()
	// SIGTERM only once serve has read the request: one it has not read
	// is closed unanswered, as any HTTP server does at shutdown.
	client := <-sent
	storetest.WaitFor(t, "serve reads the long poll", func() bool { return tcpRead(t, addr, client) })
	stopBillsync(t, p) // exit 0, or the test fails
	a := <-answered
	require.NoError(t, a.err)
	require.Equal(t, http.StatusOK, a.code, a.body)
	require.JSONEq(t, `{"changes":[],"next":"0-0"}`, a.body, "nothing came: the cursor it sent (the start)")
}

// tcpRead reports whether the server side of the loopback connection from
// client to server has no bytes left unread (its receive queue in
// /proc/net/tcp is empty).
func tcpRead(t *testing.T, server, client string) bool {
	t.Helper()
	hexPort := func(addr string) string {
		_, port, err := net.SplitHostPort(addr)
		require.NoError(t, err)
		n, err := strconv.Atoi(port)
		require.NoError(t, err)
		return fmt.Sprintf(":%04X", n)
	}
	b, err := os.ReadFile("/proc/net/tcp")
	require.NoError(t, err)
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) > 4 && strings.HasSuffix(f[1], hexPort(server)) && strings.HasSuffix(f[2], hexPort(client)) {
			_, rx, _ := strings.Cut(f[4], ":")
			return strings.Trim(rx, "0") == ""
		}
	}
	return false
}
