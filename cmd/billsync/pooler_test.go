package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/migrations"
	stripemock "github.com/billsync/billsync/mocks/stripe"
	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/store"
	"github.com/billsync/billsync/store/storetest"
)

// pgbouncer is Debian's PgBouncer in front of one test database.
type pgbouncer struct {
	cmd    *exec.Cmd
	exited chan struct{}
	log    *syncBuffer // its log: stderr
}

// startPgBouncer runs PgBouncer in mode (transaction or session) in front
// of directURL's database and returns the pooled URL, as a user copies it
// (no extra parameters). Without the binary the test is skipped, except in
// CI, where .ci/run installs it.
func startPgBouncer(t *testing.T, directURL, mode string) (*pgbouncer, string) {
	t.Helper()
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("pgbouncer is missing: .ci/run installs Debian's pgbouncer")
		}
		t.Skip("pgbouncer is not installed (apt-get install pgbouncer)")
	}
	cfg, err := pgx.ParseConfig(directURL)
	require.NoError(t, err)
	dir := reachableDir(t)
	addr := freeAddr(t)
	host, port, _ := strings.Cut(addr, ":")
	ini := fmt.Sprintf(`[databases]
billsync = host=%s port=%d dbname=%s user=%s
[pgbouncer]
listen_addr = %s
listen_port = %s
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = %s
max_client_conn = 500
default_pool_size = 40
ignore_startup_parameters = extra_float_digits
`, cfg.Host, cfg.Port, cfg.Database, cfg.User, host, port, filepath.Join(dir, "users.txt"), mode)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "users.txt"), fmt.Appendf(nil, "%q \"\"\n", cfg.User), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "pgbouncer.ini"), []byte(ini), 0o644))
	args := []string{filepath.Join(dir, "pgbouncer.ini")}
	if os.Geteuid() == 0 {
		args = append([]string{"-u", "postgres"}, args...) // PgBouncer refuses root
		if _, err := exec.Command("id", "postgres").Output(); err != nil {
			args[1] = "nobody"
		}
	}
	p := &pgbouncer{cmd: exec.Command(bin, args...), exited: make(chan struct{}), log: &syncBuffer{}}
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	require.NoError(t, p.cmd.Start())
	go func() { _ = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() { _ = p.cmd.Process.Kill(); <-p.exited })
	pooled := fmt.Sprintf("postgres://%s@%s/billsync?sslmode=disable", cfg.User, addr)
	storetest.WaitFor(t, "pgbouncer answers", func() bool {
		select {
		case <-p.exited:
			t.Fatalf("pgbouncer exited:\n%s", p.log)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, pooled+"&default_query_exec_mode=simple_protocol")
		if err != nil {
			return false
		}
		defer c.Close(ctx)
		return c.Ping(ctx) == nil
	})
	return p, pooled
}

// alive fails the test if PgBouncer died (its cancel-request crash takes
// every client with it).
func (p *pgbouncer) alive(t *testing.T) {
	t.Helper()
	select {
	case <-p.exited:
		t.Fatalf("pgbouncer died:\n%s", p.log)
	default:
	}
}

// runCommand runs one billsync command to its end.
func runCommand(env []string, args string) ([]byte, error) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), "BILLSYNC_TEST_AS_MAIN=1", "BILLSYNC_TEST_ARGS="+args), env...)
	return cmd.CombinedOutput()
}

// TestServeBehindTransactionPooler: billsync through Debian's PgBouncer in
// transaction mode, with the pooled URL as a user copies it and nothing
// else said: concurrent migrates are serialised; three serve replicas
// detect the pooler, choose a query mode it supports, apply deliveries and
// answer the change feed; no session advisory lock or LISTEN is ever taken
// on the server (seen from pg_locks and pg_stat_activity, not billsync's
// report); one feed poller and one sweep at a time (the server's lease and
// sweep rows); the feed's leader killed -9 is replaced once its lease runs
// out; and the pooler outlives kills and graceful stops.
func TestServeBehindTransactionPooler(t *testing.T) {
	ctx := context.Background()
	h := testenv.ForTest(t, testenv.Stripe, testenv.Options{})
	directURL := storetest.EmptyURL(t)
	bouncer, pooled := startPgBouncer(t, directURL, "transaction")
	direct, err := pgx.Connect(ctx, directURL)
	require.NoError(t, err)
	defer direct.Close(ctx)

	// Session state on the server, sampled throughout: must stay none.
	sessionState := func() {
		t.Helper()
		var locks, listens int
		require.NoError(t, direct.QueryRow(ctx, `
			SELECT (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'),
			       (SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query ILIKE 'listen%')`).
			Scan(&locks, &listens))
		require.Zero(t, locks, "a session advisory lock was taken through the pooler")
		require.Zero(t, listens, "LISTEN was sent through the pooler")
	}

	// Three migrates at once on an empty database: each migration once,
	// none fails or waits on a leaked lock.
	env := []string{"DATABASE_URL=" + pooled}
	var wg sync.WaitGroup
	outs := make([][]byte, 3)
	errs := make([]error, 3)
	for i := range 3 {
		wg.Go(func() { outs[i], errs[i] = runCommand(env, "migrate") })
	}
	wg.Wait()
	for i := range 3 {
		require.NoError(t, errs[i], "migrate %d:\n%s", i, outs[i])
	}
	files, err := fs.Glob(migrations.FS, "*.sql")
	require.NoError(t, err)
	var applied int
	require.NoError(t, direct.QueryRow(ctx, `SELECT count(*) FROM schema_migrations`).Scan(&applied))
	require.Equal(t, len(files), applied)
	sessionState()

	const adminToken, appToken = "admin-token-0123456789", "app-token-0123456789abc"
	start := func() (*billsyncProc, string) {
		addr := freeAddr(t)
		secret := h.Stripe.Fake.AddWebhookEndpoint("http://" + addr + "/webhooks/stripe")
		p := startBillsync(t, t.TempDir(), addr, "DATABASE_URL="+pooled,
			"BILLSYNC_TEST_ARGS=serve -workers 2 -events-poll 300ms -stripe-read-allocation 1e12 -addr "+addr,
			"BILLSYNC_EVENTS_POLL=", "STRIPE_WEBHOOK_SECRET="+secret, "STRIPE_API_KEY="+stripemock.DefaultAPIKey,
			"STRIPE_API_URL="+h.URL, "BILLSYNC_ADMIN_TOKEN="+adminToken, "BILLSYNC_APP_TOKEN="+appToken)
		return p, addr
	}
	procs := map[int]*billsyncProc{}
	addrs := map[int]string{}
	for range 3 {
		p, addr := start()
		procs[p.cmd.Process.Pid], addrs[p.cmd.Process.Pid] = p, addr
	}
	for _, p := range procs {
		logs := p.logs.String()
		require.Contains(t, logs, "pooling=transaction", "detection:\n%s", logs)
		require.Contains(t, logs, "exec (chosen for the transaction pooler", logs)
		require.Contains(t, logs, `listen="off: polling every`, logs)
	}

	// Deliveries and reconciles through the pooler.
	var customers []string
	for range 10 {
		cus := h.Customer("")
		h.Subscribe(cus, "price_pro")
		customers = append(customers, cus)
	}
	storetest.WaitFor(t, "every customer applied through the pooler", func() bool {
		var pro int
		require.NoError(t, direct.QueryRow(ctx, `SELECT count(*) FROM accounts WHERE customer_id = ANY($1) AND plan = 'pro'`, customers).Scan(&pro))
		return pro == len(customers)
	})
	sessionState()

	// The change feed answers, from any replica.
	for _, addr := range addrs {
		req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/api/changes?limit=100", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+appToken)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		require.Contains(t, string(body), customers[0])
	}

	// One feed poller: the lease row names a live replica; kill it and
	// another takes over once the lease has run out, not before.
	holderPid := func() (pid int, expires time.Time) {
		var holder string
		err := direct.QueryRow(ctx, `SELECT holder, expires_at FROM leases WHERE name = 'feed.stripe'`).Scan(&holder, &expires)
		if err != nil {
			return 0, time.Time{}
		}
		_, p, _ := strings.Cut(holder, ":")
		pid, _ = strconv.Atoi(p)
		return pid, expires
	}
	var leader int
	storetest.WaitFor(t, "a replica leads the feed", func() bool {
		leader, _ = holderPid()
		return procs[leader] != nil
	})
	require.NoError(t, procs[leader].cmd.Process.Signal(syscall.SIGKILL))
	<-procs[leader].exited
	_, expired := holderPid()
	delete(procs, leader)
	var polls int
	require.NoError(t, direct.QueryRow(ctx, `SELECT polls FROM events_feed WHERE provider = 'stripe'`).Scan(&polls))
	storetest.WaitFor(t, "a live replica takes the killed leader's feed lease", func() bool {
		pid, _ := holderPid()
		return procs[pid] != nil
	})
	var acquired time.Time
	require.NoError(t, direct.QueryRow(ctx, `SELECT acquired_at FROM leases WHERE name = 'feed.stripe'`).Scan(&acquired))
	require.False(t, acquired.Before(expired), "taken at %s while the dead leader's lease ran to %s", acquired, expired)
	storetest.WaitFor(t, "the new leader polls", func() bool {
		var now int
		require.NoError(t, direct.QueryRow(ctx, `SELECT polls FROM events_feed WHERE provider = 'stripe'`).Scan(&now))
		return now > polls
	})
	bouncer.alive(t)
	p, addr := start() // the replacement
	procs[p.cmd.Process.Pid], addrs[p.cmd.Process.Pid] = p, addr

	// Sweeps asked of every replica at once, three rounds: never two runs
	// of a provider overlap, by the server's own rows.
	for range 3 {
		var swg sync.WaitGroup
		for pid := range procs {
			swg.Go(func() {
				req, _ := http.NewRequest(http.MethodPost, "http://"+addrs[pid]+"/admin/api/sweeps", nil)
				req.Header.Set("Authorization", "Bearer "+adminToken)
				if resp, err := http.DefaultClient.Do(req); err == nil {
					resp.Body.Close()
				}
			})
		}
		swg.Wait()
	}
	storetest.WaitFor(t, "the sweeps end", func() bool {
		var running, succeeded int
		require.NoError(t, direct.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'running'), count(*) FILTER (WHERE status = 'succeeded') FROM sweep_runs`).
			Scan(&running, &succeeded))
		return running == 0 && succeeded > 0
	})
	var overlaps int
	require.NoError(t, direct.QueryRow(ctx, `
		SELECT count(*) FROM sweep_runs a JOIN sweep_runs b ON a.id < b.id AND a.provider = b.provider
		WHERE tstzrange(a.started_at, a.finished_at) && tstzrange(b.started_at, b.finished_at)`).Scan(&overlaps))
	require.Zero(t, overlaps, "two sweeps of a provider ran at once")
	sessionState()

	// Graceful stops send no cancel request PgBouncer could die of.
	for _, p := range procs {
		stopBillsync(t, p)
	}
	bouncer.alive(t)
}

// TestMeasureWakeBehindPooler measures, behind PgBouncer in transaction
// mode, the time from a subscription at the fake Stripe to the change
// feed's long poll answering with it (webhook → intake → worker → apply →
// change feed), with LISTEN on BILLSYNC_DATABASE_DIRECT_URL and without it
// (polling). A measurement, not a check: run it with
// BILLSYNC_MEASURE_WAKE=1 -v; docs/database.md has the figures.
func TestMeasureWakeBehindPooler(t *testing.T) {
	if os.Getenv("BILLSYNC_MEASURE_WAKE") == "" {
		t.Skip("a measurement: BILLSYNC_MEASURE_WAKE=1")
	}
	const appToken, rounds = "app-token-0123456789abc", 40
	for _, withDirect := range []bool{true, false} {
		h := testenv.ForTest(t, testenv.Stripe, testenv.Options{})
		directURL := storetest.URL(t)
		_, pooled := startPgBouncer(t, directURL, "transaction")
		addr := freeAddr(t)
		secret := h.Stripe.Fake.AddWebhookEndpoint("http://" + addr + "/webhooks/stripe")
		env := []string{"DATABASE_URL=" + pooled, "BILLSYNC_TEST_ARGS=serve -workers 2 -addr " + addr,
			"STRIPE_WEBHOOK_SECRET=" + secret, "STRIPE_API_KEY=" + stripemock.DefaultAPIKey,
			"STRIPE_API_URL=" + h.URL, "BILLSYNC_APP_TOKEN=" + appToken}
		if withDirect {
			env = append(env, "BILLSYNC_DATABASE_DIRECT_URL="+directURL)
		}
		p := startBillsync(t, t.TempDir(), addr, env...)
		next := ""
		var took []time.Duration
		for range rounds {
			answered := make(chan string, 1)
			go func() {
				req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/api/changes?wait=30s&after="+next, nil)
				req.Header.Set("Authorization", "Bearer "+appToken)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					answered <- ""
					return
				}
				defer resp.Body.Close()
				var ans struct{ Next string }
				_ = json.NewDecoder(resp.Body).Decode(&ans)
				answered <- ans.Next
			}()
			time.Sleep(50 * time.Millisecond) // a measurement: let the poll start waiting
			began := time.Now()
			h.Subscribe(h.Customer(""), "price_pro")
			next = <-answered
			took = append(took, time.Since(began))
			require.NotEmpty(t, next, p.logs.String())
		}
		slices.Sort(took)
		t.Logf("LISTEN via direct url %v: subscription → change feed answered, %d rounds: p50 %s, p90 %s, max %s",
			withDirect, rounds, took[rounds/2], took[rounds*9/10], took[rounds-1])
		stopBillsync(t, p)
	}
}

// TestServeBehindSessionPooler: through PgBouncer in session mode (said,
// since a pooler reaching PostgreSQL over a socket shows no port to detect
// by), serve applies a subscription and LISTENs on its URL; a kill -9 and a
// graceful stop leave the pooler running (no cancel request is sent behind
// a pooler: PgBouncer 1.18 can die of one).
func TestServeBehindSessionPooler(t *testing.T) {
	ctx := context.Background()
	h := testenv.ForTest(t, testenv.Stripe, testenv.Options{})
	directURL := storetest.URL(t)
	bouncer, pooled := startPgBouncer(t, directURL, "session")
	direct, err := pgx.Connect(ctx, directURL)
	require.NoError(t, err)
	defer direct.Close(ctx)
	start := func() *billsyncProc {
		addr := freeAddr(t)
		secret := h.Stripe.Fake.AddWebhookEndpoint("http://" + addr + "/webhooks/stripe")
		return startBillsync(t, t.TempDir(), addr, "DATABASE_URL="+pooled, "BILLSYNC_DATABASE_POOLER=session",
			"BILLSYNC_TEST_ARGS=serve -workers 2 -addr "+addr, "STRIPE_WEBHOOK_SECRET="+secret,
			"STRIPE_API_KEY="+stripemock.DefaultAPIKey, "STRIPE_API_URL="+h.URL)
	}
	applied := func(cus string) func() bool {
		return func() bool {
			var n int
			require.NoError(t, direct.QueryRow(ctx, `SELECT count(*) FROM accounts WHERE customer_id = $1 AND plan = 'pro'`, cus).Scan(&n))
			return n == 1
		}
	}
	p := start()
	require.Contains(t, p.logs.String(), "pooling=session")
	require.Contains(t, p.logs.String(), `listen="on, via the database url"`)
	cus := h.Customer("")
	h.Subscribe(cus, "price_pro")
	storetest.WaitFor(t, "the subscription applied through the session pooler", applied(cus))
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
	<-p.exited
	bouncer.alive(t)

	p = start()
	cus = h.Customer("")
	h.Subscribe(cus, "price_pro")
	storetest.WaitFor(t, "the subscription applied after the kill", applied(cus))
	stopBillsync(t, p)
	bouncer.alive(t)
}

// TestPoolingDetectedOnABusyPooler: billsync tells PgBouncer's transaction
// and session modes apart while other clients keep the pooler busy (three
// migrates starting at once did, and one took a transaction pooler for a
// direct connection: its prepared statements then failed). PgBouncer
// reaches PostgreSQL over a Unix socket here, so the port the server
// listens on tells nothing.
func TestPoolingDetectedOnABusyPooler(t *testing.T) {
	ctx := context.Background()
	direct := storetest.URL(t)
	for _, mode := range []store.Pooling{store.PoolingTransaction, store.PoolingSession} {
		t.Run(string(mode), func(t *testing.T) {
			_, pooled := startPgBouncer(t, direct, string(mode))
			busy, stop := context.WithCancel(ctx)
			var wg sync.WaitGroup
			for range 4 {
				wg.Go(func() {
					cc, err := pgx.ParseConfig(pooled)
					if err != nil {
						t.Error(err)
						return
					}
					cc.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
					conn, err := pgx.ConnectConfig(busy, cc)
					if err != nil {
						t.Error(err)
						return
					}
					defer conn.Close(ctx) //nolint:errcheck // a load
					for busy.Err() == nil {
						_, _ = conn.Exec(busy, `SELECT pg_sleep(0.001)`)
					}
				})
			}
			for i := range 10 {
				st, err := store.Open(ctx, pooled, store.Options{})
				require.NoError(t, err)
				got := st.Connection()
				st.Close()
				require.Equal(t, mode, got.Pooling, "open %d: %s", i, got.Detected)
			}
			stop()
			wg.Wait()
		})
	}
}
