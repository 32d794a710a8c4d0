package stripe_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v82"

	stripemock "github.com/billsync/billsync/mocks/stripe"
	"github.com/billsync/billsync/mocks/testenv"
	billstripe "github.com/billsync/billsync/providers/stripe"
)

// rawReceiver records every delivery's body and headers as sent.
type rawReceiver struct {
	srv *httptest.Server
	up  atomic.Bool
	// answered gets whether each delivery was accepted, once its answer is
	// decided (a test waits on it instead of guessing when a delivery
	// comes); deliveries beyond its buffer are not told.
	answered chan bool

	mu     sync.Mutex
	bodies [][]byte
	heads  []http.Header
	at     []time.Time
}

func newRawReceiver(t *testing.T, up bool) *rawReceiver {
	t.Helper()
	rc := &rawReceiver{answered: make(chan bool, 64)}
	rc.up.Store(up)
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		up := rc.up.Load()
		rc.mu.Lock()
		rc.bodies, rc.heads, rc.at = append(rc.bodies, body), append(rc.heads, r.Header.Clone()), append(rc.at, time.Now())
		rc.mu.Unlock()
		if !up {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		select {
		case rc.answered <- up:
		default: // nobody is counting this many: never hold a delivery up
		}
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

// nextAnswer waits for the next delivery's answer: whether it was accepted.
func (rc *rawReceiver) nextAnswer(t *testing.T) bool {
	t.Helper()
	select {
	case up := <-rc.answered:
		return up
	case <-time.After(time.Minute):
		t.Fatal("no delivery came")
		return false
	}
}

func TestThinEventsToADestination(t *testing.T) {
	t.Parallel()
	f := newFake(t, stripemock.Options{})
	rc := newRawReceiver(t, true)
	secret := f.AddEventDestination(rc.srv.URL, "v1.customer.subscription.updated")
	sub := f.subscribe(t, f.customer(t).ID, "price_free")
	require.NoError(t, f.h.Stripe.ChangePrice(context.Background(), sub, "price_pro"))
	f.waitIdle(t)

	rc.mu.Lock()
	defer rc.mu.Unlock()
	require.Len(t, rc.bodies, 1, "only the enabled thin type")
	body, header := rc.bodies[0], rc.heads[0]

	// stripe-go parses and verifies it as a thin event…
	thin, err := stripe.NewClient("sk_test_unused").ParseThinEvent(body, header.Get("Stripe-Signature"), secret)
	require.NoError(t, err)
	require.Equal(t, "v1.customer.subscription.updated", thin.Type)
	require.Regexp(t, `^evt_`, thin.ID)
	require.Equal(t, &stripe.RelatedObject{ID: sub.ID, Type: "subscription", URL: "/v1/subscriptions/" + sub.ID}, thin.RelatedObject)
	require.WithinDuration(t, time.Now(), thin.Created, time.Minute)
	_, err = stripe.NewClient("sk_test_unused").ParseThinEvent(body, header.Get("Stripe-Signature"), "whsec_wrong")
	require.Error(t, err, "signed with the destination's secret only")

	// …billsync's verifier accepts its signature…
	v, err := billstripe.NewVerifier([]string{secret}, 0)
	require.NoError(t, err)
	_, err = v.Verify(context.Background(), header, body)
	require.NoError(t, err)

	// …and the body is the thin shape: no snapshot, no API version.
	m := rawJSON(t, body)
	require.Equal(t, "v2.core.event", m["object"])
	require.Equal(t, false, m["livemode"])
	require.Contains(t, m, "context")
	require.Nil(t, m["context"])
	require.NotContains(t, m, "data")
	require.NotContains(t, m, "api_version")
	_, err = time.Parse(time.RFC3339, m["created"].(string))
	require.NoError(t, err, "created is an RFC 3339 string")

	// The same event is a snapshot event in /v1/events.
	ev, err := f.sc.V1Events.Retrieve(context.Background(), thin.ID, nil)
	require.NoError(t, err)
	require.Equal(t, "customer.subscription.updated", string(ev.Type))
}

func TestRateLimitIsStripeShaped(t *testing.T) {
	t.Parallel()
	f := newFake(t, stripemock.Options{Faults: stripemock.Faults{RateLimitRate: 1}})
	resp, body := f.do(t, http.MethodGet, "/v1/customers", nil, nil)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	require.Empty(t, resp.Header.Get("Retry-After"), "Stripe sends no Retry-After")
	require.Equal(t, "invalid_request_error", path(body, "error", "type"))
	require.Equal(t, "rate_limit", path(body, "error", "code"))
	require.Regexp(t, `^req_`, resp.Header.Get("Request-Id"))
}

// TestRetryScheduleCompressed: billsync is down when the event is made and
// comes back; Stripe's retry an hour later (a second here) delivers it.
func TestRetryScheduleCompressed(t *testing.T) {
	t.Parallel()
	rc := newRawReceiver(t, false)
	// In a synctest bubble the retry waits on the bubble's clock: the gap
	// between the attempts is the schedule's, exactly.
	synctest.Test(t, func(t *testing.T) {
		schedule := []time.Duration{time.Hour, 2 * time.Hour}
		f := newBubbleFake(t, stripemock.Options{RetrySchedule: schedule, TimeFactor: 3600 * 4}, rc.srv.Config.Handler)
		f.AddWebhookEndpoint(rc.srv.URL)
		f.create(t, "/v1/customers", url.Values{"email": {"ada@example.com"}})
		synctest.Wait() // the first attempt is answered; the retry waits
		require.False(t, rc.nextAnswer(t), "the first attempt finds billsync down")
		rc.up.Store(true) // billsync comes back before the retry
		require.NoError(t, f.WaitIdle(context.Background()))
		require.Equal(t, stripemock.Settlement{Delivered: 1}, f.Settled())

		rc.mu.Lock()
		require.Len(t, rc.at, 2)
		gap := rc.at[1].Sub(rc.at[0])
		rc.mu.Unlock()
		require.Equal(t, 250*time.Millisecond, gap, "an hour, compressed 14400×")
		var attempts []int
		for _, d := range f.Deliveries() {
			attempts = append(attempts, d.Attempt)
		}
		require.Equal(t, []int{1, 2}, attempts)
	})

	t.Run("GivesUpAfterTheSchedule", func(t *testing.T) {
		t.Parallel()
		f := newFake(t, stripemock.Options{RetrySchedule: stripemock.LiveRetrySchedule, TimeFactor: 3600 * 24 * 30})
		rc := newRawReceiver(t, false)
		f.AddWebhookEndpoint(rc.srv.URL)
		f.customer(t)
		st, err := f.h.Stripe.WaitSettled(context.Background(), 20*time.Second)
		require.NoError(t, err)
		require.Equal(t, stripemock.Settlement{GaveUp: 1}, st)
		d := f.Deliveries()
		require.Len(t, d, 1+len(stripemock.LiveRetrySchedule))
		require.True(t, d[len(d)-1].GaveUp)
		require.False(t, d[len(d)-2].GaveUp)
		var total time.Duration
		for _, w := range stripemock.LiveRetrySchedule {
			total += w
		}
		require.InDelta(t, 72, total.Hours(), 4, "up to three days, like Stripe's live mode")
	})
}

func TestRandomCopiesAreSeeded(t *testing.T) {
	t.Parallel()
	copies := func() []int {
		f := newFake(t, stripemock.Options{Faults: stripemock.Faults{RandomCopies: 3, Seed: 42}})
		rc := newRawReceiver(t, true)
		f.AddWebhookEndpoint(rc.srv.URL)
		for range 10 {
			f.customer(t)
		}
		st, err := f.h.Stripe.WaitSettled(context.Background(), 10*time.Second)
		require.NoError(t, err)
		byEvent := map[string]int{}
		for _, d := range f.Deliveries() {
			byEvent[d.EventID]++
		}
		var order []string // events in the order they were made
		for e, err := range f.sc.V1Events.List(context.Background(), &stripe.EventListParams{}) {
			require.NoError(t, err)
			order = append([]string{e.ID}, order...)
		}
		require.Len(t, order, 10)
		var n []int
		sum := 0
		for _, id := range order {
			require.GreaterOrEqual(t, byEvent[id], 1)
			require.LessOrEqual(t, byEvent[id], 4)
			n = append(n, byEvent[id])
			sum += byEvent[id]
		}
		require.Equal(t, stripemock.Settlement{Delivered: sum}, st)
		rc.mu.Lock()
		require.Len(t, rc.bodies, sum)
		rc.mu.Unlock()
		return n
	}
	first := copies()
	distinct := map[int]bool{}
	for _, n := range first {
		distinct[n] = true
	}
	require.Greater(t, len(distinct), 1, "copies vary between events: %v", first)
	require.Equal(t, first, copies(), "the same seed, the same numbers of copies, event by event")
}

func TestFaultTargetsOneKey(t *testing.T) {
	t.Parallel()
	f := newFake(t, stripemock.Options{Faults: stripemock.Faults{Error5xxRate: 1, TargetKey: stripemock.DefaultAPIKey}})
	// The driver (testenv's Stripe driver, on its own key) is served.
	cust := f.customer(t)
	// billsync's key gets the fault, on every request.
	for range 3 {
		resp, body := f.do(t, http.MethodGet, "/v1/customers/"+cust.ID, nil, nil)
		require.Equal(t, http.StatusInternalServerError, resp.StatusCode)
		require.Equal(t, "api_error", path(body, "error", "type"))
	}
	resp, _ := f.do(t, http.MethodGet, "/v1/customers/"+cust.ID, nil, map[string]string{"Authorization": "Bearer " + testenv.DriverAPIKey})
	require.Equal(t, http.StatusOK, resp.StatusCode)
	// An unknown key is still refused, not faulted.
	resp, _ = f.do(t, http.MethodGet, "/v1/customers", nil, map[string]string{"Authorization": "Bearer sk_test_other"})
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)

	f.SetFaults(stripemock.Faults{Error5xxRate: 1})
	_, err := f.sc.V1Customers.Retrieve(context.Background(), cust.ID, nil)
	require.True(t, isStatus(err, http.StatusInternalServerError), "no target: every key")
}

func TestStaleReadReturnsThePreviousState(t *testing.T) {
	t.Parallel()
	// In a synctest bubble the reads happen at the bubble's clock, which
	// moves only by the sleeps below: each read lands exactly where the
	// test puts it, inside the lag or past it, however busy the machine.
	synctest.Test(t, func(t *testing.T) {
		const lag = time.Second
		f := newBubbleFake(t, stripemock.Options{}, nil)
		cust := f.create(t, "/v1/customers", url.Values{"email": {"ada@example.com"}})
		sub := f.create(t, "/v1/subscriptions", url.Values{"customer": {cust}, "items[0][price]": {"price_free"}})
		f.SetFaults(stripemock.Faults{StaleReads: lag, TargetKey: stripemock.DefaultAPIKey})

		priceSeen := func(header map[string]string) string {
			_, body := f.do(t, http.MethodGet, "/v1/subscriptions/"+sub, nil, header)
			return path(body, "items", "data", 0, "price", "id").(string)
		}
		_, s := f.do(t, http.MethodGet, "/v1/subscriptions/"+sub, nil, driverKey)
		item := path(s, "items", "data", 0, "id").(string)
		f.create(t, "/v1/subscriptions/"+sub, url.Values{"items[0][id]": {item}, "items[0][price]": {"price_pro"}})
		require.Equal(t, "price_free", priceSeen(nil), "billsync reads the state before the change")
		_, list := f.do(t, http.MethodGet, "/v1/subscriptions", nil, nil)
		require.Equal(t, "price_free", path(list, "data", 0, "items", "data", 0, "price", "id"), "lists are stale too")
		require.Equal(t, "price_pro", priceSeen(driverKey), "the driver's key reads the new state")
		time.Sleep(lag - time.Nanosecond)
		require.Equal(t, "price_free", priceSeen(nil), "stale for all of StaleReads")
		time.Sleep(time.Nanosecond)
		require.Equal(t, "price_pro", priceSeen(nil), "and not a moment longer")

		// A customer deleted a moment ago still reads as live; one created a
		// moment ago is not found yet.
		resp, _ := f.do(t, http.MethodDelete, "/v1/customers/"+cust, nil, driverKey)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		_, body := f.do(t, http.MethodGet, "/v1/customers/"+cust, nil, nil)
		require.Nil(t, body["deleted"])
		require.Equal(t, "ada@example.com", body["email"])
		fresh := f.create(t, "/v1/customers", url.Values{"email": {"grace@example.com"}})
		resp, _ = f.do(t, http.MethodGet, "/v1/customers/"+fresh, nil, nil)
		require.Equal(t, http.StatusNotFound, resp.StatusCode)
		time.Sleep(lag)
		resp, body = f.do(t, http.MethodGet, "/v1/customers/"+cust, nil, nil)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Equal(t, true, body["deleted"])
		resp, _ = f.do(t, http.MethodGet, "/v1/customers/"+fresh, nil, nil)
		require.Equal(t, http.StatusOK, resp.StatusCode)
	})
}

func TestWaitSettled(t *testing.T) {
	t.Parallel()
	f := newFake(t, stripemock.Options{DeliveryAttempts: 2, RetryBackoff: 10 * time.Millisecond,
		Faults: stripemock.Faults{DuplicateCopies: 1, ReorderDelay: 50 * time.Millisecond, Seed: 5}})
	ok := newRawReceiver(t, true)
	down := newRawReceiver(t, false)
	f.AddWebhookEndpoint(ok.srv.URL)
	f.AddWebhookEndpoint(down.srv.URL)
	f.subscribe(t, f.customer(t).ID, "price_pro") // 3 events × 2 endpoints × 2 copies
	st, err := f.h.Stripe.WaitSettled(context.Background(), 10*time.Second)
	require.NoError(t, err)
	require.Equal(t, stripemock.Settlement{Delivered: 6, GaveUp: 6}, st)
	down.mu.Lock()
	require.Len(t, down.bodies, 12, "each of 6 copies tried twice before giving up")
	down.mu.Unlock()

	resp, err := http.Get(f.URL + "/_mock/deliveries/settled")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.JSONEq(t, `{"delivered":6,"gave_up":6,"dropped":0}`, string(body))

	// Dropped deliveries settle at once.
	f.SetFaults(stripemock.Faults{DropRate: 1})
	f.customer(t)
	st, err = f.h.Stripe.WaitSettled(context.Background(), time.Second)
	require.NoError(t, err)
	require.Equal(t, 2, st.Dropped, "one event, dropped for each of the two endpoints")
}
