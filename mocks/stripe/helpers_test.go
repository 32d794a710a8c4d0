package stripe_test

import (
	"cmp"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v82"
	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/billsync/billsync/mocks/inproc"
	stripemock "github.com/billsync/billsync/mocks/stripe"
	"github.com/billsync/billsync/mocks/testenv"
)

type fake struct {
	*stripemock.Server
	URL string
	sc  *stripe.Client
	h   *testenv.Test
	api *http.Client // how do reaches the fake; nil = over the network
}

// newBubbleFake is a fake made inside a testing/synctest bubble, with the
// harness's prices and a stopped clock: do reaches its API in-process and
// its webhooks reach deliverTo in-process, so its latency, delivery
// delays, retry schedule and stale reads run on the bubble's clock, which
// moves only while every goroutine of the bubble waits: what a test
// measures there is exactly what the fake chose, however busy the machine.
// Call it inside the bubble; it closes (its deliveries joined) as the
// bubble's test ends. Its sc and h are nil: it has no network side.
func newBubbleFake(t *testing.T, opts stripemock.Options, deliverTo http.Handler) *fake {
	t.Helper()
	opts.Clock = cmp.Or(opts.Clock, stripemock.NewStoppedClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)))
	if deliverTo != nil {
		opts.HTTPClient = &http.Client{Transport: inproc.Transport{Handler: deliverTo}}
	}
	opts.ExtraAPIKeys = append(opts.ExtraAPIKeys, testenv.DriverAPIKey)
	s := stripemock.New(opts)
	for _, p := range testenv.Prices() {
		s.AddPrice(p.ID, p.LookupKey, p.Amount)
	}
	t.Cleanup(s.Close)
	return &fake{Server: s, URL: "http://stripe.invalid", api: &http.Client{Transport: inproc.Transport{Handler: s}}}
}

// driverKey sends a request with the harness driver's key, as the tests'
// stripe-go client does: billsync's key may be faulted.
var driverKey = map[string]string{"Authorization": "Bearer " + testenv.DriverAPIKey}

// create POSTs values to path (a create or an update) with the driver's
// key and returns the object's id.
func (f *fake) create(t *testing.T, path string, values url.Values) string {
	t.Helper()
	resp, obj := f.do(t, http.MethodPost, path, values, driverKey)
	require.Equal(t, http.StatusOK, resp.StatusCode, obj)
	return obj["id"].(string)
}

// newFake starts the shared harness's fake (with its prices) and a stripe-go
// client pointed at it (no client retries, no client logging); no intake.
func newFake(t *testing.T, opts stripemock.Options) *fake {
	t.Helper()
	h := testenv.ForTest(t, testenv.Stripe, testenv.Options{Stripe: testenv.StripeOptions{Fake: opts}})
	return &fake{Server: h.Stripe.Fake, URL: h.URL, sc: h.Stripe.API, h: h}
}

func (f *fake) customer(t *testing.T) *stripe.Customer {
	t.Helper()
	c, err := f.sc.V1Customers.Create(context.Background(), &stripe.CustomerCreateParams{
		Email: stripe.String("ada@example.com"), Metadata: map[string]string{"user_id": "u1"}})
	require.NoError(t, err)
	return c
}

func (f *fake) subscribe(t *testing.T, customerID, priceID string) *stripe.Subscription {
	t.Helper()
	sub, err := f.h.Stripe.Subscribe(context.Background(), customerID, priceID)
	require.NoError(t, err)
	return sub
}

// do sends a raw request; form values go in the query for GET/DELETE and in
// the body for POST, as Stripe clients do.
func (f *fake) do(t *testing.T, method, path string, values url.Values, header map[string]string) (*http.Response, map[string]any) {
	t.Helper()
	var body io.Reader
	target := f.URL + path
	if method == http.MethodPost {
		body = strings.NewReader(values.Encode())
	} else if len(values) > 0 {
		target += "?" + values.Encode()
	}
	req, err := http.NewRequest(method, target, body)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+stripemock.DefaultAPIKey)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range header {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := cmp.Or(f.api, http.DefaultClient).Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var out map[string]any
	require.NoError(t, json.Unmarshal(raw, &out), "body: %s", raw)
	return resp, out
}

func (f *fake) waitIdle(t *testing.T) {
	t.Helper()
	require.NoError(t, f.h.WaitDelivered(context.Background()))
}

// receiver is a webhook endpoint that verifies each delivery with stripe-go
// exactly as billsync will, and records what it accepted.
type receiver struct {
	srv *httptest.Server

	mu       sync.Mutex
	secret   string
	events   []stripe.Event
	rejected int
	status   int // answer for verified deliveries; 200 unless set
}

func newReceiver(t *testing.T) *receiver {
	t.Helper()
	rc := &receiver{status: http.StatusOK}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		defer rc.mu.Unlock()
		ev, err := webhook.ConstructEventWithOptions(body, r.Header.Get("Stripe-Signature"), rc.secret,
			webhook.ConstructEventOptions{IgnoreAPIVersionMismatch: true})
		if err != nil {
			rc.rejected++
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		rc.events = append(rc.events, ev)
		w.WriteHeader(rc.status)
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

// register adds the receiver to the fake and keeps the secret to verify with.
func (rc *receiver) register(f *fake) {
	secret := f.AddWebhookEndpoint(rc.srv.URL)
	rc.mu.Lock()
	rc.secret = secret
	rc.mu.Unlock()
}

// registerFor adds the receiver through POST /v1/webhook_endpoints for some
// event types only.
func (rc *receiver) registerFor(t *testing.T, f *fake, types ...string) {
	t.Helper()
	resp, ep := f.do(t, http.MethodPost, "/v1/webhook_endpoints", url.Values{"url": {rc.srv.URL}, "enabled_events[]": types}, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	rc.mu.Lock()
	rc.secret = ep["secret"].(string)
	rc.mu.Unlock()
}

func (rc *receiver) received() ([]stripe.Event, int) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]stripe.Event(nil), rc.events...), rc.rejected
}

func (rc *receiver) ofType(typ string) []stripe.Event {
	events, _ := rc.received()
	var out []stripe.Event
	for _, e := range events {
		if string(e.Type) == typ {
			out = append(out, e)
		}
	}
	return out
}

// path digs into decoded JSON: path(m, "items", "data", 0, "price", "id").
func path(v any, keys ...any) any {
	for _, k := range keys {
		switch k := k.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			a, ok := v.([]any)
			if !ok || k >= len(a) {
				return nil
			}
			v = a[k]
		}
	}
	return v
}

func has(v any, key string) bool {
	m, ok := v.(map[string]any)
	if !ok {
		return false
	}
	_, ok = m[key]
	return ok
}
