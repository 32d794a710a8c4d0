// Package demo plays the seed scenario through billsync and, side by side,
// through a naive handler (the foil): nine deliveries of three events of
// one provider, Stripe's or Kinde's (the Pro plan change three times, the
// payment five times, an older cancellation that arrives last but two),
// with the process killed during the first plan change. Afterwards it can
// keep billsync serving, its worker live, for a person to poke at.
//
// It is a demonstration. It works in a database of its own, created on the
// server it is given and dropped on Close, against an in-process fake
// provider: it must never touch the operator's tables or a real provider,
// and its naive handler must never be used for anything but showing the
// damage. The engine here is the provider's neither: a world (stripe.go,
// kinde.go) is the fake, the intake and the moves at the provider.
package demo

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/providers/kinde"
	"github.com/billsync/billsync/providers/stripe"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store"
	"github.com/billsync/billsync/store/scratch"
)

// lease is short so the demo's "restart after a kill" takes a second.
const lease = time.Second

// Config configures a demo. The zero value works.
type Config struct {
	// Addr is where billsync's intake listens; default 127.0.0.1:8080.
	Addr string
	// Logger gets billsync's logs; nil discards.
	Logger *slog.Logger
	// Provider is whose events the scenario plays: "stripe" (default) or
	// "kinde".
	Provider string
	// ConsoleAddr is where the support console listens; default
	// 127.0.0.1:0 (a free port).
	ConsoleAddr string
	// Connect plays the Stripe scenario on a connected account (Stripe
	// Connect) instead of the platform's own.
	Connect bool
}

// Validate reports what is wrong with cfg.
func (c Config) Validate() error {
	switch c.Provider {
	case "", stripe.Provider, kinde.Provider:
	default:
		return fmt.Errorf("demo provider %q: want stripe or kinde", c.Provider)
	}
	if c.Connect && c.Provider == kinde.Provider {
		return errors.New("demo --connect plays Stripe Connect: not with --provider kinde")
	}
	for _, addr := range []string{c.Addr, c.ConsoleAddr} {
		if addr == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return fmt.Errorf("demo address %q: want host:port: %w", addr, err)
		}
	}
	return nil
}

// Demo holds the running parts: a fresh database, the world (the fake
// provider with billsync's intake and client on it), billsync's worker, the
// naive foil, and the deliveries the demo holds back and replays as the
// network would.
type Demo struct {
	logger  *slog.Logger
	st      *store.Store
	drop    func(context.Context) error
	w       world
	worker  *reconcile.Worker
	doomed  *reconcile.Worker // a worker whose process is killed mid-apply
	naive   *naiveApp
	console *console

	mu       sync.Mutex
	captured []delivery
	relay    bool // after the scenario: pass deliveries straight to billsync
}

// delivery is one signed webhook as the fake sent it; id is the dedupe
// key billsync stores it under.
type delivery struct {
	id, typ string
	body    []byte
	header  http.Header
}

// world is a provider's side of the demo: its fake, billsync's intake and
// client on it, and the scenario's moves at the provider.
type world interface {
	provider() string
	client() reconcile.Provider
	intakeURL() string
	// identify reads a captured delivery's dedupe key and event type.
	identify(body []byte, header http.Header) (id, typ string)
	// naive reads a delivery as the naive app does: what it says happened
	// (change, payment or cancel) and, for a change, the plan's reference.
	naive(body []byte) (kind, planRef string)
	// onFree puts a new customer on Free at the provider and returns it,
	// with the number of webhooks that sends (not part of the scenario).
	onFree(ctx context.Context) (customer string, webhooks int, err error)
	// toPro moves the customer from Free to Pro at the provider: Free
	// ended, Pro started, its payment taken. The three webhooks it sends
	// are the scenario's, of the types scenarioTypes names.
	toPro(ctx context.Context, customer string) error
	scenarioTypes() (change, payment, cancellation string)
	waitDelivered(ctx context.Context) error
	where() Where
	close()
}

// Start creates the demo's database on the server at databaseURL and
// starts the fake Stripe and billsync; Close stops them and drops it.
func Start(ctx context.Context, databaseURL string, cfg Config) (_ *Demo, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	d := &Demo{logger: cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))}
	defer func() {
		if err != nil {
			d.Close()
		}
	}()
	d.st, d.drop, err = scratch.CreateDatabase(ctx, databaseURL, fmt.Sprintf("billsync_demo_%d", time.Now().UnixNano()), store.Options{})
	if err != nil {
		return nil, err
	}
	if _, err := d.st.Migrate(ctx); err != nil {
		return nil, err
	}
	plans := testenv.Plans()
	d.naive = &naiveApp{plans: plans}
	// The network between the fake and billsync is the demo's: it holds
	// the provider's signed deliveries and replays them in the scenario's
	// order.
	addr, network := cmp.Or(cfg.Addr, "127.0.0.1:8080"), http.HandlerFunc(d.capture)
	if cfg.Provider == kinde.Provider {
		d.w, err = newKindeWorld(d.st, addr, network, d.logger)
	} else {
		d.w, err = newStripeWorld(d.st, addr, network, d.logger, cfg.Connect)
	}
	if err != nil {
		return nil, err
	}
	// billsync itself, as serve assembles it: its worker is d.worker.
	if err := d.startConsole(cmp.Or(cfg.ConsoleAddr, "127.0.0.1:0"), plans); err != nil {
		return nil, err
	}
	// The process the scenario kills: a worker on a store that dies.
	d.doomed, err = reconcile.NewWorker(reconcile.WorkerConfig{
		Name: "doomed", Store: killedStore{d.st, new(atomic.Bool)}, Providers: []reconcile.Provider{d.w.client()},
		Plans: plans, Logger: d.logger, Lease: lease,
	})
	if err != nil {
		return nil, err
	}
	return d, nil
}

// errKilled is what a killed process's database calls amount to.
var errKilled = errors.New("process killed between the plan write and the ledger write")

// killedStore is the store as seen by a process that dies during its first
// Apply: the transaction is rolled back, and nothing after it (recording
// the failure, renewing or releasing the lease, claiming) reaches the
// database, so the customer waits for the lease to run out, as after a
// real kill -9.
type killedStore struct {
	*store.Store
	claimed *atomic.Bool
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

// Close stops everything and drops the demo's database.
func (d *Demo) Close() {
	if d.console != nil {
		d.console.close()
	}
	if d.w != nil {
		d.w.close()
	}
	if d.drop != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := d.drop(ctx); err != nil {
			d.logger.Error("drop demo database", slog.Any("error", err))
		}
	}
}

func (d *Demo) capture(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	d.mu.Lock()
	relay := d.relay
	if !relay {
		id, typ := d.w.identify(body, r.Header) // a body without them is simply never replayed
		d.captured = append(d.captured, delivery{id, typ, body, r.Header.Clone()})
	}
	d.mu.Unlock()
	if !relay {
		w.WriteHeader(http.StatusOK)
		return
	}
	// The scenario is over: the network delivers as is, and the provider hears
	// billsync's own answer.
	resp, err := d.post(r.Context(), body, r.Header)
	if err != nil {
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	resp.Body.Close()
	w.WriteHeader(resp.StatusCode)
}

// post sends a delivery to billsync's intake.
func (d *Demo) post(ctx context.Context, body []byte, header http.Header) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.w.intakeURL()+"/webhooks/"+d.w.provider(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header = header.Clone()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("deliver to billsync: %w", err)
	}
	return resp, nil
}

// Row is one delivery as both handlers saw it.
type Row struct {
	N        int    `json:"n"`
	Event    string `json:"event"`
	Type     string `json:"type"`
	Naive    Side   `json:"naive"`
	Billsync Side   `json:"billsync"`
}

// Side is one handler's answer and state after a delivery.
type Side struct {
	Answer  string `json:"answer"`
	Plan    string `json:"plan"`
	Balance int64  `json:"balance"`
	Outcome string `json:"outcome,omitempty"`
}

// State is a handler's plan and balance.
type State struct {
	Plan    string `json:"plan"`
	Balance int64  `json:"balance"`
}

// Result is the scenario as both handlers lived it.
type Result struct {
	Provider string `json:"provider"`
	Customer string `json:"customer"`
	Start    struct {
		Naive    State `json:"naive"`
		Billsync State `json:"billsync"`
	} `json:"start"`
	Deliveries []Row `json:"deliveries"`
	Naive      State `json:"naive"`
	Billsync   Held  `json:"billsync"`
	// NaiveTold is what an app hooked to the naive handler would have been
	// told: every time its state moved, copies and the late cancellation
	// included.
	NaiveTold []Told `json:"naive_told"`
}

// Told is one thing the app was told about the customer's account.
type Told struct {
	Seq     int64    `json:"seq,omitempty"` // billsync's per-account sequence
	Changed []string `json:"changed,omitempty"`
	Before  State    `json:"before"`
	After   State    `json:"after"`
}

// Held is what billsync holds for the customer at the end, and whether it
// is right.
type Held struct {
	Plan         string  `json:"plan"`
	Balance      int64   `json:"balance"`
	EventsStored int     `json:"events_stored"`
	Deliveries   int     `json:"deliveries"` // copies included
	Grants       []Grant `json:"grants"`
	// AppTold is what billsync told the app during the scenario (its
	// account changes).
	AppTold []Told `json:"app_told"`
	Right   bool   `json:"right"`
}

// Grant is one grant in billsync's ledger for the customer.
type Grant struct {
	Plan  string `json:"plan"`
	Delta int64  `json:"delta"`
}

// Play runs the scenario and returns both handlers' story.
func (d *Demo) Play(ctx context.Context) (Result, error) {
	res := Result{Provider: d.w.provider()}
	// The customer starts on Free at the provider, reconciled once
	// (billsync) and set by hand (the naive app).
	customer, webhooks, err := d.w.onFree(ctx)
	if err != nil {
		return res, err
	}
	res.Customer = customer
	if err := d.waitDeliveries(ctx, webhooks); err != nil { // not part of the scenario
		return res, err
	}
	d.mu.Lock()
	d.captured = nil
	d.mu.Unlock()
	if err := d.st.Enqueue(ctx, d.w.provider(), res.Customer, reconcile.TriggerResync); err != nil {
		return res, err
	}
	if _, err := d.worker.Drain(ctx); err != nil {
		return res, err
	}
	d.naive.plan, d.naive.balance = "free", 10
	res.Start.Naive = State{d.naive.plan, d.naive.balance}
	if res.Start.Billsync, err = d.billsyncState(ctx, res.Customer); err != nil {
		return res, err
	}
	told, err := d.appTold(ctx, res.Customer, 0)
	if err != nil {
		return res, err
	}
	var startSeq int64
	if len(told) > 0 {
		startSeq = told[len(told)-1].Seq
	}

	// What happened at the provider, in order: Free ended, then Pro
	// started and its first payment was taken.
	if err := d.w.toPro(ctx, res.Customer); err != nil {
		return res, err
	}
	if err := d.waitDeliveries(ctx, 3); err != nil {
		return res, err
	}
	changeType, paymentType, cancellationType := d.w.scenarioTypes()
	change, payment, cancellation := d.capturedOf(changeType), d.capturedOf(paymentType), d.capturedOf(cancellationType)
	if change == nil || payment == nil || cancellation == nil {
		return res, fmt.Errorf("the fake %s did not send the three scenario events", d.w.provider())
	}

	order := []*delivery{change, payment, change, payment, payment, change, cancellation, payment, payment}
	for i, dl := range order {
		row := Row{N: i + 1, Event: dl.id, Type: dl.typ}
		crash := i == 0
		kind, planRef := d.w.naive(dl.body)
		row.Naive = d.naive.handle(d.w.provider(), kind, planRef, crash)
		if row.Billsync, err = d.deliverToBillsync(ctx, res.Customer, dl, crash); err != nil {
			return res, err
		}
		res.Deliveries = append(res.Deliveries, row)
	}

	res.Naive = State{d.naive.plan, d.naive.balance}
	prev := res.Start.Naive
	for _, row := range res.Deliveries {
		if now := (State{row.Naive.Plan, row.Naive.Balance}); now != prev {
			res.NaiveTold = append(res.NaiveTold, Told{Before: prev, After: now})
			prev = now
		}
	}
	b := &res.Billsync
	if b.AppTold, err = d.appTold(ctx, res.Customer, startSeq); err != nil {
		return res, err
	}
	final, err := d.billsyncState(ctx, res.Customer)
	if err != nil {
		return res, err
	}
	b.Plan, b.Balance = final.Plan, final.Balance
	if err := d.tally(ctx, res.Customer, b); err != nil {
		return res, err
	}
	proGrants := 0
	for _, g := range b.Grants {
		if g.Plan == "pro" {
			proGrants++
		}
	}
	toldOnce := len(b.AppTold) == 1 && b.AppTold[0].Before == State{"free", 10} && b.AppTold[0].After == State{"pro", 500}
	b.Right = b.Plan == "pro" && b.Balance == 500 && b.EventsStored == 3 && b.Deliveries == 9 && proGrants == 1 && toldOnce
	return res, nil
}

// appTold returns the account changes billsync wrote for the customer
// after seq, oldest first: what the app was told.
func (d *Demo) appTold(ctx context.Context, customer string, after int64) ([]Told, error) {
	a, err := d.st.Account(ctx, d.w.provider(), customer)
	if err != nil {
		return nil, err
	}
	cs, err := d.st.AccountChanges(ctx, a.ID, 100)
	if err != nil {
		return nil, err
	}
	var out []Told
	for _, c := range slices.Backward(cs) {
		if c.Seq <= after {
			continue
		}
		t := Told{Seq: c.Seq, Changed: c.Changed, After: State{c.After.Plan, c.After.Balance}}
		if c.Before != nil {
			t.Before = State{c.Before.Plan, c.Before.Balance}
		}
		out = append(out, t)
	}
	return out, nil
}

// tally reads what billsync holds for the customer from the account's
// detail, as the console shows it: its events and their deliveries (copies
// counted), and its grants, oldest first. The scenario's few rows are well
// within the detail's limit.
func (d *Demo) tally(ctx context.Context, customer string, b *Held) error {
	a, err := d.st.Account(ctx, d.w.provider(), customer)
	if err != nil {
		return err
	}
	detail, err := d.st.AccountDetail(ctx, a.ID)
	if err != nil {
		return err
	}
	b.EventsStored, b.Deliveries, b.Grants = len(detail.Events), 0, nil
	for _, e := range detail.Events {
		b.Deliveries += e.SeenCount
	}
	for _, l := range slices.Backward(detail.Ledger) {
		if l.Kind == "grant" {
			b.Grants = append(b.Grants, Grant{Plan: l.Plan, Delta: l.Delta})
		}
	}
	return nil
}

// waitDeliveries waits until the fake has sent n more webhooks.
func (d *Demo) waitDeliveries(ctx context.Context, n int) error {
	if err := d.w.waitDelivered(ctx); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.captured) < n {
		return fmt.Errorf("the fake %s sent %d webhooks, want %d", d.w.provider(), len(d.captured), n)
	}
	return nil
}

func (d *Demo) capturedOf(typ string) *delivery {
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
// write and the ledger write, and another worker takes the customer once
// the dead one's lease has run out.
func (d *Demo) deliverToBillsync(ctx context.Context, customer string, dl *delivery, crash bool) (Side, error) {
	var s Side
	resp, err := d.post(ctx, dl.body, dl.header)
	if err != nil {
		return s, err
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
		scratch.CrashAfterAccountWrite(d.st, func() error { return errKilled })
		if _, err := d.doomed.Drain(ctx); err != nil && !errors.Is(err, errKilled) {
			return s, err
		}
		scratch.CrashAfterAccountWrite(d.st, nil)
		prefix = "killed mid-apply, rolled back; restarted after the lease: "
	}
	if err := d.drainUntilAnswered(ctx, dl.id); err != nil {
		return s, err
	}
	state, err := d.billsyncState(ctx, customer)
	if err != nil {
		return s, err
	}
	s.Plan, s.Balance = state.Plan, state.Balance
	ev, err := d.st.EventByKey(ctx, d.w.provider(), dl.id)
	if err != nil {
		return s, err
	}
	switch {
	case strings.HasPrefix(ans.Status, "duplicate"):
		s.Outcome = "copy counted; nothing to do"
	default:
		s.Outcome = fmt.Sprintf("%s%s: %s", prefix, ev.Status, ev.Outcome)
	}
	return s, nil
}

// drainUntilAnswered lets the worker reconcile until the event is no
// longer pending (after a kill, its customer is due again a lease later).
func (d *Demo) drainUntilAnswered(ctx context.Context, eventID string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*lease)
	defer cancel()
	for {
		if _, err := d.worker.Drain(ctx); err != nil {
			return err
		}
		ev, err := d.st.EventByKey(ctx, d.w.provider(), eventID)
		if err != nil || ev.Status != reconcile.EventPending {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("event %s still pending: %w", eventID, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (d *Demo) billsyncState(ctx context.Context, customer string) (State, error) {
	a, err := d.st.Account(ctx, d.w.provider(), customer)
	if err != nil {
		return State{}, err
	}
	balance, err := d.st.Balance(ctx, a.ID)
	return State{a.Plan, balance}, err
}

// Serve keeps billsync running after the scenario, its worker live and the
// fake's webhooks relayed to the intake, until ctx is done.
func (d *Demo) Serve(ctx context.Context) {
	d.mu.Lock()
	d.relay = true
	d.mu.Unlock()
	d.console.stop = d.console.app.Start(ctx)
	<-ctx.Done()
}

// Where says where the running demo's parts are, for PrintServing.
type Where struct {
	Provider                                string
	FakeURL, APIKey, IntakeURL, DatabaseURL string
	// ConsoleURL is the support console; ConsoleToken signs in to it (a
	// token made for this demo run).
	ConsoleURL, ConsoleToken string
}

// Where returns where the running demo's parts are.
func (d *Demo) Where() Where {
	wh := d.w.where()
	wh.Provider, wh.IntakeURL, wh.DatabaseURL = d.w.provider(), d.w.intakeURL(), scratch.URL(d.st)
	wh.ConsoleURL, wh.ConsoleToken = d.console.url, d.console.token
	return wh
}
