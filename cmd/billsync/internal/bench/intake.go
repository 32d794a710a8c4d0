package bench

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store"
	"github.com/billsync/billsync/store/scratch"
)

// IntakeResult is the intake at one sender count.
type IntakeResult struct {
	Senders      int         `json:"senders"`
	Rounds       int         `json:"rounds"`
	Deliveries   int         `json:"deliveries"`    // per path and round, timed
	UniqueEvents int         `json:"unique_events"` // per path and round
	Copies       int         `json:"copies"`        // per path and round
	HTTP         Latency     `json:"http"`
	Ceiling      Latency     `json:"ceiling"`
	Ratio        float64     `json:"ratio"` // HTTP deliveries/s over ceiling deliveries/s
	RoundRatios  []float64   `json:"round_ratios"`
	Check        IntakeCheck `json:"check"`
}

// IntakeCheck compares what was sent with what the database holds, over
// every round and both paths (warm-up deliveries included).
type IntakeCheck struct {
	SentDeliveries   int `json:"sent_deliveries"`
	SentUniqueEvents int `json:"sent_unique_events"`
	StoredEvents     int `json:"stored_events"`
	Receipts         int `json:"receipts"`
	SeenCountSum     int `json:"seen_count_sum"`
}

// delivery is one delivery, ready for both paths: signed for HTTP and
// already verified for the direct call, so neither timed loop prepares
// anything.
type delivery struct {
	body     []byte
	header   string
	verified reconcile.Receipt
}

// directAddr is the sender's address the ceiling stores. No connection has
// port 0, so a receipt with it came by the direct call, never over HTTP.
const directAddr = "127.0.0.1:0"

// path is one way a delivery reaches the store.
type path struct {
	name string
	send func(context.Context, delivery) error
}

// intake is the pair the bench compares, on one store: billsync's HTTP
// intake (wired by testenv as serve wires it) and its ceiling, the same
// store call made directly. Both are driven by the same senders.
type intake struct {
	st            *store.Store
	h             *testenv.Env
	poster        *poster
	ceiling, http path
	now           func() time.Time // the meters' clock
	phase         int
}

func newIntake(st *store.Store) (*intake, error) {
	// The server logs every delivery, as in production: the formatting is
	// part of the cost, the output is not wanted.
	h, err := testenv.New(testenv.Stripe, testenv.Options{Store: st, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return nil, err
	}
	in := &intake{st: st, h: h, poster: newPoster(h.IntakeURL), now: time.Now}
	in.ceiling = path{"ceiling", func(ctx context.Context, d delivery) error {
		_, err := st.StoreReceipt(ctx, d.verified)
		return err
	}}
	in.http = path{"http", func(ctx context.Context, d delivery) error { return in.poster.post(ctx, d.body, d.header) }}
	return in, nil
}

func (in *intake) close() {
	in.poster.close()
	in.h.Close()
}

// plan returns n deliveries with ids tagged tag: 70% distinct events and
// 30% copies of one of them (Stripe re-signs every copy), shuffled, so a
// copy may race its original. unique is the number of distinct events.
func (in *intake) plan(tag string, n int) (_ []delivery, unique int, _ error) {
	in.phase++
	seed := uint64(in.phase)
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	copies := int(math.Round(float64(n) * copyShare))
	unique = n - copies
	bodies := make([][]byte, 0, n)
	for i := range unique {
		bodies = append(bodies, eventBody(fmt.Sprintf("evt_%s%d_%06d", tag, in.phase, i),
			subject{customer: fmt.Sprintf("cus_bench_%04d", rng.IntN(intakeCustomers))}, i))
	}
	for range copies {
		bodies = append(bodies, bodies[rng.IntN(unique)])
	}
	rng.Shuffle(len(bodies), func(i, j int) { bodies[i], bodies[j] = bodies[j], bodies[i] })
	out := make([]delivery, len(bodies))
	now := time.Now()
	for i, body := range bodies {
		header := sign(body, in.h.Stripe.Secret, now)
		d, err := in.h.Stripe.Verifier.Verify(context.Background(), http.Header{"Stripe-Signature": {header}}, body)
		if err != nil {
			return nil, 0, fmt.Errorf("bench delivery does not verify: %w", err)
		}
		d.RemoteAddr = directAddr // the intake stores the sender's address too
		out[i] = delivery{body: body, header: header, verified: d}
	}
	return out, unique, nil
}

// timing is one timed run of a path.
type timing struct {
	lat  []time.Duration
	took time.Duration
	cpu  cpuTime
}

// measure sends plan through p from senders goroutines and times it.
func (in *intake) measure(ctx context.Context, p path, senders int, plan []delivery) (timing, error) {
	cpu0 := cpuNow()
	lat, took, err := sendAll(ctx, in.now, senders, len(plan), func(ctx context.Context, i int) error { return p.send(ctx, plan[i]) })
	if err != nil {
		return timing{}, fmt.Errorf("intake (%s, %d senders): %w", p.name, senders, err)
	}
	return timing{lat, took, cpuNow().sub(cpu0)}, nil
}

func runIntake(ctx context.Context, st *store.Store, cfg Config) ([]IntakeResult, error) {
	in, err := newIntake(st)
	if err != nil {
		return nil, err
	}
	defer in.close()
	return in.run(ctx, cfg)
}

// run measures, at each sender count, the HTTP intake against its ceiling
// in alternating rounds, and fails if the database does not hold exactly
// what was sent.
func (in *intake) run(ctx context.Context, cfg Config) ([]IntakeResult, error) {
	var results []IntakeResult
	for _, senders := range cfg.Senders {
		res := IntakeResult{Senders: senders, Rounds: cfg.Rounds, Deliveries: cfg.IntakeDeliveries}
		before, err := scratch.ReadStats(ctx, in.st)
		if err != nil {
			return nil, err
		}
		runs := map[string]timing{}
		for r := range cfg.Rounds {
			order := []path{in.ceiling, in.http}
			if r%2 == 1 {
				order = []path{in.http, in.ceiling}
			}
			perSec := map[string]float64{}
			for _, p := range order {
				// Warm-up: connections (HTTP and pool) opened, caches
				// filled; stored but not timed.
				warm, warmUnique, err := in.plan(p.name[:1]+"w", max(4*senders, 20))
				if err != nil {
					return nil, err
				}
				if _, err := in.measure(ctx, p, senders, warm); err != nil {
					return nil, fmt.Errorf("warm-up: %w", err)
				}
				plan, unique, err := in.plan(p.name[:1], cfg.IntakeDeliveries)
				if err != nil {
					return nil, err
				}
				t, err := in.measure(ctx, p, senders, plan)
				if err != nil {
					return nil, err
				}
				all := runs[p.name]
				runs[p.name] = timing{append(all.lat, t.lat...), all.took + t.took, all.cpu.add(t.cpu)}
				perSec[p.name] = float64(len(t.lat)) / t.took.Seconds()
				res.UniqueEvents, res.Copies = unique, len(plan)-unique
				res.Check.SentDeliveries += len(warm) + len(plan)
				res.Check.SentUniqueEvents += warmUnique + unique
				cfg.Logger.Info("bench intake", slog.Int("senders", senders), slog.Int("round", r+1), slog.String("path", p.name),
					slog.Float64("deliveries_per_sec", round(perSec[p.name], 1)))
			}
			res.RoundRatios = append(res.RoundRatios, round(perSec[in.http.name]/perSec[in.ceiling.name], 3))
		}
		h, c := runs[in.http.name], runs[in.ceiling.name]
		res.HTTP = latencyOf(h.lat, h.took, h.cpu)
		res.Ceiling = latencyOf(c.lat, c.took, c.cpu)
		res.Ratio = round(res.HTTP.PerSec/res.Ceiling.PerSec, 3)

		after, err := scratch.ReadStats(ctx, in.st)
		if err != nil {
			return nil, err
		}
		res.Check.StoredEvents = after.Events - before.Events
		res.Check.Receipts = after.Receipts - before.Receipts
		res.Check.SeenCountSum = after.SeenCountSum - before.SeenCountSum
		if c := res.Check; c.StoredEvents != c.SentUniqueEvents || c.Receipts != c.SentDeliveries || c.SeenCountSum != c.SentDeliveries {
			return nil, fmt.Errorf("intake at %d senders lost work: sent %d deliveries of %d events, stored %d events, %d receipts, seen_count sum %d",
				senders, c.SentDeliveries, c.SentUniqueEvents, c.StoredEvents, c.Receipts, c.SeenCountSum)
		}
		results = append(results, res)
	}
	return results, nil
}

// poster posts deliveries to billsync's intake as Stripe would: each
// sender on its own keep-alive connection.
type poster struct {
	endpoint  string
	transport *http.Transport
	client    *http.Client
}

func newPoster(intakeURL string) *poster {
	transport := &http.Transport{MaxIdleConns: 512, MaxIdleConnsPerHost: 512, IdleConnTimeout: time.Minute, DisableCompression: true}
	return &poster{endpoint: intakeURL + "/webhooks/stripe", transport: transport, client: &http.Client{Transport: transport, Timeout: time.Minute}}
}

// post sends one delivery and fails on any answer but 200.
func (p *poster) post(ctx context.Context, body []byte, signature string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.endpoint, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Stripe-Signature", signature)
	resp, err := p.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("intake answered %d: %s", resp.StatusCode, bytes.TrimSpace(answer))
	}
	return nil
}

func (p *poster) close() { p.transport.CloseIdleConnections() }

// sign returns the Stripe-Signature header Stripe would send with body.
func sign(body []byte, secret string, at time.Time) string {
	return webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: secret, Timestamp: at}).Header
}

var eventTypes = []struct{ typ, object string }{
	{"customer.subscription.updated", "subscription"},
	{"invoice.paid", "invoice"},
	{"customer.subscription.created", "subscription"},
	{"invoice.payment_succeeded", "invoice"},
	{"customer.updated", "customer"},
}

// subject is what an event is about: the customer and, when known, its
// subscription and price at the fake (the drain's events name them, so the
// worker's read agrees with the event; the intake's are synthetic).
type subject struct{ customer, subscription, price string }

// eventBody is a Stripe-shaped event of about 1.3 KB (real ones are 1-5 KB;
// the body is stored byte for byte).
func eventBody(id string, about subject, n int) []byte {
	et := eventTypes[n%len(eventTypes)]
	customer := about.customer
	objID, cust := fmt.Sprintf("%s_%s", et.object[:3], id[4:]), fmt.Sprintf("%q", customer)
	price := cmp.Or(about.price, "price_pro")
	switch {
	case et.object == "customer":
		objID = customer
		cust = "null"
	case et.object == "subscription" && about.subscription != "":
		objID = about.subscription
	}
	now := time.Now().Unix()
	return fmt.Appendf(nil, `{"id":%q,"object":"event","api_version":"2025-08-27.basil","created":%d,"type":%q,`+
		`"livemode":false,"pending_webhooks":1,"request":{"id":"req_%s","idempotency_key":"%s-idem"},`+
		`"data":{"object":{"id":%q,"object":%q,"customer":%s,"status":"active","cancel_at_period_end":false,`+
		`"collection_method":"charge_automatically","currency":"usd","created":%d,"livemode":false,`+
		`"items":{"object":"list","data":[{"id":"si_%s","object":"subscription_item","quantity":1,`+
		`"current_period_start":%d,"current_period_end":%d,"price":{"id":%q,"object":"price",`+
		`"lookup_key":"pro","unit_amount":2000,"currency":"usd","type":"recurring","active":true,`+
		`"recurring":{"interval":"month","interval_count":1,"usage_type":"licensed"}}}],"has_more":false,"total_count":1},`+
		`"metadata":{"user_id":"user_%s","source":"billsync bench"}},`+
		`"previous_attributes":{"items":{"data":[{"price":{"id":"price_free","lookup_key":"free","unit_amount":0}}]}}}}`,
		id, now, et.typ, id[4:], id[4:], objID, et.object, cust, now, id[4:], now, now+30*86400, price, customer)
}
