package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	stripemock "github.com/billsync/billsync/mocks/stripe"
	"github.com/billsync/billsync/providers/stripe"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/server"
	"github.com/billsync/billsync/store"
)

// demoLease is short so the demo's "restart after a kill" takes a second.
const demoLease = time.Second

func runDemo(ctx context.Context, args []string, stdout io.Writer, logger *slog.Logger) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), `usage: billsync demo [flags]

Plays the seed scenario with no setup: nine deliveries of three Stripe events
(the Pro plan change three times, the payment five times, an older
cancellation that arrives last), with the process killed during the first
plan change. Each delivery goes to billsync and, side by side, to a naive
handler that applies each message as it arrives (the foil). billsync uses
the embedded PostgreSQL (a fresh database of its own) and an in-process fake
Stripe. Without -once it then keeps serving and prints where to look.`)
		fs.PrintDefaults()
	}
	var cfg config
	cfg.bindCommon(fs, os.Getenv)
	once := fs.Bool("once", false, "exit after the scenario: status 0 only if billsync ended right")
	asJSON := fs.Bool("json", false, "print the final state as JSON instead of tables")
	addr := fs.String("addr", os.Getenv("BILLSYNC_ADDR"), "where billsync listens for webhooks (default 127.0.0.1:8080; 127.0.0.1:0 with -once)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *addr == "" {
		*addr = "127.0.0.1:8080"
		if *once {
			*addr = "127.0.0.1:0"
		}
	}
	out := stdout
	if *asJSON {
		out = io.Discard
	}
	// The demo's own story is on stdout; billsync's logs only say what went wrong.
	if os.Getenv("BILLSYNC_LOG_LEVEL") == "" {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError + 1}))
	}

	fmt.Fprintln(out, "billsync demo: starting PostgreSQL, a fake Stripe and billsync…")
	dbURL, stopCluster, err := databaseURL(ctx, cfg, logger)
	if err != nil {
		return err
	}
	defer stopCluster()
	d, err := newDemo(ctx, dbURL, *addr, logger)
	if err != nil {
		return err
	}
	defer d.close()

	res, err := d.play(ctx, out)
	if err != nil {
		return err
	}
	if *asJSON {
		if err := json.NewEncoder(stdout).Encode(res); err != nil {
			return err
		}
	} else {
		d.printFinal(out, res)
	}
	if !res.Billsync.Right {
		return errors.New("billsync did not end in the right state: this is a bug")
	}
	if *once {
		return nil
	}
	return d.serve(ctx, stdout, res.Customer)
}

// demo holds the running parts: a fresh database, the fake Stripe, billsync's
// intake and worker, the naive foil, and the deliveries the demo holds back
// and replays as the network would.
type demo struct {
	logger    *slog.Logger
	st        *store.Store
	dropDB    func(context.Context) error
	plans     *reconcile.Plans
	fake      *stripemock.Server
	fakeURL   string
	intakeURL string
	verifier  *stripe.Verifier
	worker    *reconcile.Worker
	doomed    *reconcile.Worker // a worker whose process is killed mid-apply
	naive     *naiveApp
	servers   []*http.Server

	dbURL    string // the demo database, for psql
	mu       sync.Mutex
	captured []capturedDelivery
	relay    bool // after the scenario: pass deliveries straight to billsync
}

type capturedDelivery struct {
	id, typ string
	body    []byte
	header  http.Header
}

func newDemo(ctx context.Context, dbURL, addr string, logger *slog.Logger) (_ *demo, err error) {
	d := &demo{logger: logger}
	defer func() {
		if err != nil {
			d.close()
		}
	}()
	d.st, d.dropDB, err = store.CreateDatabase(ctx, dbURL, fmt.Sprintf("billsync_demo_%d", time.Now().UnixNano()), store.Options{})
	if err != nil {
		return nil, err
	}
	d.dbURL = d.st.URL()
	if _, err := d.st.Migrate(ctx); err != nil {
		return nil, err
	}
	if d.plans, err = loadPlans(""); err != nil {
		return nil, err
	}
	d.naive = &naiveApp{plans: d.plans}

	d.fake = stripemock.New(stripemock.Options{Logger: logger})
	for _, p := range defaultMockPrices {
		d.fake.AddPrice(p.id, p.lookupKey, p.amount)
	}
	if d.fakeURL, err = d.listen("127.0.0.1:0", d.fake); err != nil {
		return nil, err
	}
	// The network: Stripe's signed deliveries are held here and replayed in
	// the scenario's order, copies included.
	captureURL, err := d.listen("127.0.0.1:0", http.HandlerFunc(d.capture))
	if err != nil {
		return nil, err
	}
	secret := d.fake.AddWebhookEndpoint(captureURL + "/webhooks/stripe")
	if d.verifier, err = stripe.NewVerifier([]string{secret}, 0); err != nil {
		return nil, err
	}
	intake := server.New(server.Config{Logger: logger, Inbox: d.st, Verifiers: []server.Verifier{d.verifier}, Ready: d.st.Ping})
	if d.intakeURL, err = d.listen(addr, intake); err != nil {
		return nil, err
	}
	client, err := stripe.NewClient(stripe.Config{APIKey: stripemock.DefaultAPIKey, BaseURL: d.fakeURL, Logger: logger})
	if err != nil {
		return nil, err
	}
	d.worker, err = reconcile.NewWorker(reconcile.WorkerConfig{Name: "demo", Store: d.st, Providers: []reconcile.Provider{client},
		Plans: d.plans, Logger: logger, Lease: demoLease, Poll: 200 * time.Millisecond, Concurrency: 2})
	if err != nil {
		return nil, err
	}
	d.doomed, err = reconcile.NewWorker(reconcile.WorkerConfig{Name: "doomed", Store: killedStore{d.st, new(atomic.Bool)}, Providers: []reconcile.Provider{client},
		Plans: d.plans, Logger: logger, Lease: demoLease})
	if err != nil {
		return nil, err
	}
	return d, nil
}

// errKilled is what a killed process's database calls amount to.
var errKilled = errors.New("process killed between the plan write and the ledger write")

// killedStore is the store as seen by a process that dies during Apply:
// the transaction is rolled back, and nothing after it (recording the
// failure, releasing or renewing the lease) reaches the database, so the
// customer waits for the lease to run out, as after a real kill -9.
type killedStore struct {
	*store.Store
	claimed *atomic.Bool // the process dies during its first batch
}

func (k killedStore) Claim(ctx context.Context, worker string, limit int, lease time.Duration) ([]reconcile.Job, error) {
	if k.claimed.Swap(true) {
		return nil, errKilled
	}
	return k.Store.Claim(ctx, worker, limit, lease)
}

func (killedStore) Extend(context.Context, string, []reconcile.Job, time.Duration) (int, error) {
	return 0, errKilled
}

func (killedStore) Retry(context.Context, reconcile.Job, time.Time, reconcile.Outcome, time.Duration) (reconcile.Outcome, error) {
	return reconcile.Outcome{}, errKilled
}

func (killedStore) Release(context.Context, string, []reconcile.Job) error { return errKilled }

func (d *demo) listen(addr string, h http.Handler) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("listen on %s: %w", addr, err)
	}
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	d.servers = append(d.servers, hs)
	go func() { _ = hs.Serve(ln) }()
	return "http://" + ln.Addr().String(), nil
}

func (d *demo) close() {
	if d.fake != nil {
		d.fake.Close()
	}
	for _, hs := range d.servers {
		_ = hs.Close()
	}
	if d.dropDB != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := d.dropDB(ctx); err != nil {
			d.logger.Error("drop demo database", slog.Any("error", err))
		}
	}
}

func (d *demo) capture(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	d.mu.Lock()
	relay := d.relay
	if !relay {
		var ev struct{ ID, Type string }
		_ = json.Unmarshal(body, &ev) // a body without them is simply never replayed
		d.captured = append(d.captured, capturedDelivery{ev.ID, ev.Type, body, r.Header.Clone()})
	}
	d.mu.Unlock()
	if !relay {
		w.WriteHeader(http.StatusOK)
		return
	}
	// The scenario is over: the network delivers as is, and Stripe hears
	// billsync's own answer.
	req, err := http.NewRequestWithContext(r.Context(), http.MethodPost, d.intakeURL+"/webhooks/stripe", bytes.NewReader(body))
	if err != nil {
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	req.Header = r.Header.Clone()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	resp.Body.Close()
	w.WriteHeader(resp.StatusCode)
}

// stripeCall calls the fake Stripe's REST API as an app would.
func (d *demo) stripeCall(ctx context.Context, method, path string, form url.Values) (map[string]any, error) {
	req, err := http.NewRequestWithContext(ctx, method, d.fakeURL+path, strings.NewReader(form.Encode()))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+stripemock.DefaultAPIKey)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("stripe %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("stripe %s %s: status %d: %v", method, path, resp.StatusCode, out)
	}
	return out, nil
}

// demoRow is one delivery as both handlers saw it.
type demoRow struct {
	N        int    `json:"n"`
	Event    string `json:"event"`
	Type     string `json:"type"`
	Naive    side   `json:"naive"`
	Billsync side   `json:"billsync"`
}

type side struct {
	Answer  string `json:"answer"`
	Plan    string `json:"plan"`
	Balance int64  `json:"balance"`
	Outcome string `json:"outcome,omitempty"`
}

type demoResult struct {
	Customer   string    `json:"customer"`
	Deliveries []demoRow `json:"deliveries"`
	Naive      struct {
		Plan    string `json:"plan"`
		Balance int64  `json:"balance"`
	} `json:"naive"`
	Billsync struct {
		Plan         string           `json:"plan"`
		Balance      int64            `json:"balance"`
		EventsStored int              `json:"events_stored"`
		Deliveries   int              `json:"deliveries"`
		Grants       []store.GrantRow `json:"grants"`
		Right        bool             `json:"right"`
	} `json:"billsync"`
}

// play runs the scenario and returns both handlers' story.
func (d *demo) play(ctx context.Context, out io.Writer) (demoResult, error) {
	var res demoResult
	// The customer starts on Free: a subscription to price_free, reconciled
	// once (billsync) and set by hand (the naive app).
	cus, err := d.stripeCall(ctx, http.MethodPost, "/v1/customers", url.Values{"email": {"ada@example.com"}, "metadata[user_id]": {"user_ada"}})
	if err != nil {
		return res, err
	}
	res.Customer = cus["id"].(string)
	free, err := d.stripeCall(ctx, http.MethodPost, "/v1/subscriptions", url.Values{"customer": {res.Customer}, "items[0][price]": {"price_free"}})
	if err != nil {
		return res, err
	}
	if err := d.waitDeliveries(ctx, 2); err != nil { // created + invoice.paid, not part of the scenario
		return res, err
	}
	d.mu.Lock()
	d.captured = nil
	d.mu.Unlock()
	if err := d.st.Enqueue(ctx, "stripe", res.Customer, reconcile.TriggerResync); err != nil {
		return res, err
	}
	if _, err := d.worker.Drain(ctx); err != nil {
		return res, err
	}
	d.naive.plan, d.naive.balance = "free", 10
	acct, bal, err := d.billsyncState(ctx, res.Customer)
	if err != nil {
		return res, err
	}
	fmt.Fprintf(out, "\nCustomer %s starts on Free. naive: %s/%d, billsync: %s/%d.\n", res.Customer, d.naive.plan, d.naive.balance, acct, bal)

	// What happened at Stripe, in order: the Free subscription was canceled,
	// then a Pro one created and its first invoice paid.
	if _, err := d.stripeCall(ctx, http.MethodDelete, "/v1/subscriptions/"+free["id"].(string), nil); err != nil {
		return res, err
	}
	if _, err := d.stripeCall(ctx, http.MethodPost, "/v1/subscriptions", url.Values{"customer": {res.Customer}, "items[0][price]": {"price_pro"}}); err != nil {
		return res, err
	}
	if err := d.waitDeliveries(ctx, 3); err != nil {
		return res, err
	}
	change, payment, cancellation := d.capturedOf("customer.subscription.created"), d.capturedOf("invoice.paid"), d.capturedOf("customer.subscription.deleted")
	if change == nil || payment == nil || cancellation == nil {
		return res, errors.New("the fake Stripe did not send the three scenario events")
	}
	fmt.Fprintln(out, "At Stripe the customer moved to Pro: the Free subscription was canceled, a Pro one created, its invoice paid.")
	fmt.Fprintln(out, "The network now delivers the plan change 3×, the payment 5×, and the older cancellation once, last but two.")
	fmt.Fprintln(out, "Both processes are killed half way through the first plan change.")
	fmt.Fprintln(out)

	order := []*capturedDelivery{change, payment, change, payment, payment, change, cancellation, payment, payment}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tdelivery\tnaive: answer\tplan\tbalance\tbillsync: answer\tplan\tbalance\twhat billsync did")
	for i, dl := range order {
		row := demoRow{N: i + 1, Event: dl.id, Type: dl.typ}
		crash := i == 0
		row.Naive = d.naive.handle(dl.body, crash)
		if row.Billsync, err = d.deliverToBillsync(ctx, res.Customer, dl, crash); err != nil {
			return res, err
		}
		res.Deliveries = append(res.Deliveries, row)
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%s\t%s\t%d\t%s\n", row.N, label(dl.typ), row.Naive.Answer, row.Naive.Plan,
			row.Naive.Balance, row.Billsync.Answer, row.Billsync.Plan, row.Billsync.Balance, row.Billsync.Outcome)
	}
	if err := tw.Flush(); err != nil {
		return res, err
	}

	res.Naive.Plan, res.Naive.Balance = d.naive.plan, d.naive.balance
	b := &res.Billsync
	if b.Plan, b.Balance, err = d.billsyncState(ctx, res.Customer); err != nil {
		return res, err
	}
	tally, err := d.st.Tally(ctx, "stripe", res.Customer)
	if err != nil {
		return res, err
	}
	b.EventsStored, b.Deliveries, b.Grants = tally.Events, tally.Receipts, tally.Grants
	proGrants := 0
	for _, g := range tally.Grants {
		if g.Plan == "pro" {
			proGrants++
		}
	}
	b.Right = b.Plan == "pro" && b.Balance == 500 && b.EventsStored == 3 && b.Deliveries == 9 && proGrants == 1
	return res, nil
}

// waitDeliveries waits until the fake has sent n more webhooks.
func (d *demo) waitDeliveries(ctx context.Context, n int) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := d.fake.WaitIdle(ctx); err != nil {
		return fmt.Errorf("wait for the fake Stripe's webhooks: %w", err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.captured) < n {
		return fmt.Errorf("the fake Stripe sent %d webhooks, want %d", len(d.captured), n)
	}
	return nil
}

func (d *demo) capturedOf(typ string) *capturedDelivery {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i := range d.captured {
		if d.captured[i].typ == typ {
			return &d.captured[i]
		}
	}
	return nil
}

// deliverToBillsync posts one delivery to billsync's intake, then lets the
// worker reconcile. With crash set the worker is killed between the plan
// write and the ledger write, and "restarted" once its lease runs out.
func (d *demo) deliverToBillsync(ctx context.Context, customer string, dl *capturedDelivery, crash bool) (side, error) {
	var s side
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.intakeURL+"/webhooks/stripe", bytes.NewReader(dl.body))
	if err != nil {
		return s, err
	}
	req.Header = dl.header.Clone()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return s, fmt.Errorf("deliver to billsync: %w", err)
	}
	var ans struct{ Status string }
	err = json.NewDecoder(resp.Body).Decode(&ans)
	resp.Body.Close()
	if err != nil {
		return s, fmt.Errorf("billsync's answer: %w", err)
	}
	s.Answer = fmt.Sprintf("%d %s", resp.StatusCode, ans.Status)

	var prefix string
	if crash {
		d.st.CrashAfterAccountWrite(func() error { return errKilled })
		if _, err := d.doomed.Drain(ctx); err != nil && !errors.Is(err, errKilled) {
			return s, err
		}
		d.st.CrashAfterAccountWrite(nil)
		prefix = "killed mid-apply, rolled back; restarted after the lease: "
		time.Sleep(demoLease + 100*time.Millisecond)
	}
	if _, err := d.worker.Drain(ctx); err != nil {
		return s, err
	}
	if s.Plan, s.Balance, err = d.billsyncState(ctx, customer); err != nil {
		return s, err
	}
	status, outcome, err := d.st.EventOutcome(ctx, "stripe", dl.id)
	if err != nil {
		return s, err
	}
	switch {
	case strings.HasPrefix(ans.Status, "duplicate"):
		s.Outcome = "copy counted; nothing to do"
	default:
		s.Outcome = prefix + string(status) + ": " + outcome
	}
	return s, nil
}

func (d *demo) billsyncState(ctx context.Context, customer string) (plan string, balance int64, err error) {
	a, err := d.st.Account(ctx, "stripe", customer)
	if err != nil {
		return "", 0, err
	}
	balance, err = d.st.Balance(ctx, a.ID)
	return a.Plan, balance, err
}

func (d *demo) printFinal(out io.Writer, res demoResult) {
	b := res.Billsync
	fmt.Fprintf(out, "\nFinal state\n  naive handler (foil): plan %s, balance %d\n", res.Naive.Plan, res.Naive.Balance)
	fmt.Fprintf(out, "  billsync:             plan %s, balance %d (%d events stored from %d deliveries; grants:", b.Plan, b.Balance, b.EventsStored, b.Deliveries)
	for _, g := range b.Grants {
		fmt.Fprintf(out, " %s +%d", g.Plan, g.Delta)
	}
	fmt.Fprintln(out, ")")
	if b.Right {
		fmt.Fprintln(out, "  billsync is right: Stripe says Pro, and Pro's allowance is 500, granted once.")
	}
}

// serve keeps billsync running after the scenario, with its worker live.
func (d *demo) serve(ctx context.Context, out io.Writer, customer string) error {
	d.mu.Lock()
	d.relay = true
	d.mu.Unlock()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); d.st.Listen(ctx, d.logger, d.worker.Wake) }()
	go func() { defer wg.Done(); d.worker.Run(ctx) }()
	fmt.Fprintf(out, `
billsync keeps running, its worker live (Ctrl-C to stop; the demo database is dropped on exit).
Changes made at the fake Stripe now reach billsync as signed webhooks. Try:
  curl -u %[2]s: %[1]s/v1/subscriptions -d customer=%[3]s -d 'items[0][price]=price_team'
  curl -u %[2]s: '%[1]s/v1/subscriptions?customer=%[3]s&status=all'
  psql '%[4]s' -c 'SELECT customer_id, plan, status, period_start FROM accounts'
  psql '%[4]s' -c 'SELECT id, result, outcome FROM reconcile_log ORDER BY id'
  psql '%[4]s' -c 'SELECT type, seen_count, status, outcome FROM inbox_events'
billsync's intake: POST %[5]s/webhooks/stripe, health %[5]s/readyz; fake faults: %[1]s/_mock/faults
`, d.fakeURL, stripemock.DefaultAPIKey, customer, d.dbURL, d.intakeURL)
	<-ctx.Done()
	wg.Wait()
	return nil
}

func label(typ string) string {
	switch typ {
	case "customer.subscription.created":
		return "plan change (to Pro)"
	case "invoice.paid":
		return "payment"
	case "customer.subscription.deleted":
		return "older cancellation"
	}
	return typ
}

// naiveApp is the foil: the handler most apps write. It applies each
// delivery's payload as it arrives, in two writes, with no dedupe, no
// ordering check and no transaction. Never use it for anything else.
type naiveApp struct {
	plans   *reconcile.Plans
	plan    string
	balance int64
}

func (n *naiveApp) handle(body []byte, crash bool) side {
	var ev struct {
		Type string
		Data struct {
			Object struct {
				Items struct {
					Data []struct {
						Price struct {
							LookupKey string `json:"lookup_key"`
						}
					}
				}
			}
		}
	}
	_ = json.Unmarshal(body, &ev) // the foil trusts its input
	answer := "200"
	switch ev.Type {
	case "customer.subscription.created", "customer.subscription.updated":
		old, _ := n.plans.Named(n.plan)
		if items := ev.Data.Object.Items.Data; len(items) > 0 {
			if p, ok := n.plans.ForPrice("stripe", []string{items[0].Price.LookupKey}); ok {
				n.plan = p.Name // write 1
				if crash {
					answer = "500 (killed)"
					break
				}
				n.balance += max(p.Allowance-old.Allowance, 0) // write 2
			}
		}
	case "invoice.paid":
		p, _ := n.plans.Named(n.plan)
		n.balance += p.Allowance
	case "customer.subscription.deleted":
		n.plan = n.plans.Default().Name
	}
	return side{Answer: answer, Plan: n.plan, Balance: n.balance}
}
