package fault_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/mocks/fault"
	"github.com/billsync/billsync/mocks/inproc"
	kindemock "github.com/billsync/billsync/mocks/kinde"
	stripemock "github.com/billsync/billsync/mocks/stripe"
)

// receiver is a webhook endpoint that counts what it is sent and answers
// status.
type receiver struct {
	status int
	mu     sync.Mutex
	posts  int
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	rc.mu.Lock()
	rc.posts++
	rc.mu.Unlock()
	w.WriteHeader(rc.status)
}

func (rc *receiver) count() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.posts
}

// sender is one fake, seen only as what the faults act on: it sends one
// webhook to its endpoint, waits for its deliveries, and says what it
// recorded of them.
type sender struct {
	send     func(t *testing.T)
	waitIdle func(ctx context.Context) error
	recorded func() (attempts, dropped int)
}

// stripeSender is a fake Stripe whose webhooks (a customer.created per
// send) go to endpoint; failed copies are retried twice.
func stripeSender(t *testing.T, f fault.Faults, endpoint string) sender {
	s := stripemock.New(stripemock.Options{Faults: f, DeliveryAttempts: 3, RetryBackoff: time.Millisecond})
	t.Cleanup(s.Close)
	s.AddWebhookEndpoint(endpoint)
	api := &http.Client{Transport: inproc.Transport{Handler: s}}
	return sender{
		send: func(t *testing.T) {
			body := strings.NewReader(url.Values{"email": {"ada@example.com"}}.Encode())
			req, err := http.NewRequest(http.MethodPost, "http://stripe.invalid/v1/customers", body)
			require.NoError(t, err)
			req.Header.Set("Authorization", "Bearer "+stripemock.DefaultAPIKey)
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			resp, err := api.Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, http.StatusOK, resp.StatusCode)
		},
		waitIdle: s.WaitIdle,
		recorded: func() (int, int) {
			return tally(s.Deliveries(), func(d stripemock.DeliveryRecord) bool { return d.Dropped })
		},
	}
}

// kindeSender is a fake Kinde whose webhooks go to endpoint; failed copies
// are retried twice.
func kindeSender(t *testing.T, f fault.Faults, endpoint string) sender {
	k, err := kindemock.New(kindemock.Options{Faults: f, RetrySchedule: []time.Duration{time.Millisecond, time.Millisecond}})
	require.NoError(t, err)
	t.Cleanup(k.Close)
	k.AddWebhookEndpoint(endpoint)
	return sender{
		send: func(t *testing.T) {
			_, err := k.SendEvent(kindemock.Event{Type: "customer.plan_changed", CustomerID: "customer_1"})
			require.NoError(t, err)
		},
		waitIdle: k.WaitIdle,
		recorded: func() (int, int) {
			return tally(k.Deliveries(), func(d kindemock.Delivery) bool { return d.Dropped })
		},
	}
}

// tally counts a fake's delivery records: attempts, and dropped deliveries.
func tally[T any](records []T, dropped func(T) bool) (attempts, drops int) {
	for _, r := range records {
		if dropped(r) {
			drops++
		} else {
			attempts++
		}
	}
	return attempts, drops
}

// outcome is what one fake did with the same faults: the copies the
// receiver got of each webhook, in order, and what the fake recorded.
type outcome struct {
	copies            []int
	attempts, dropped int
}

func run(t *testing.T, newSender func(*testing.T, fault.Faults, string) sender, f fault.Faults, status int) outcome {
	t.Helper()
	rc := &receiver{status: status}
	hook := httptest.NewServer(rc)
	t.Cleanup(hook.Close)
	s := newSender(t, f, hook.URL)
	var out outcome
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for range 24 {
		before := rc.count()
		s.send(t)
		require.NoError(t, s.waitIdle(ctx))
		out.copies = append(out.copies, rc.count()-before)
	}
	out.attempts, out.dropped = s.recorded()
	return out
}

// TestSameFaultsSameDeliveries: both fakes send with one engine, so the
// same Faults (and seed) make the same choices for the same sequence of
// webhooks: which are dropped (and recorded as dropped), how many copies
// each gets (DuplicateCopies plus RandomCopies' dice), and what counts as
// delivered (any 2xx: a 202 is not retried; a 500 is, until given up).
func TestSameFaultsSameDeliveries(t *testing.T) {
	for name, tc := range map[string]struct {
		faults fault.Faults
		status int
		check  func(t *testing.T, o outcome)
	}{
		"Copies": {fault.Faults{DuplicateCopies: 1, RandomCopies: 2, Seed: 7}, http.StatusAccepted, func(t *testing.T, o outcome) {
			seen := map[int]bool{}
			for _, n := range o.copies {
				require.True(t, n >= 2 && n <= 4, "1+1 copies plus 0..2 more: %v", o.copies)
				seen[n] = true
			}
			require.Len(t, seen, 3, "the random copies vary: %v", o.copies)
		}},
		"Drops": {fault.Faults{DropRate: 0.5, Seed: 3}, http.StatusOK, func(t *testing.T, o outcome) {
			require.Contains(t, o.copies, 0)
			require.Contains(t, o.copies, 1)
			require.Equal(t, len(o.copies), o.attempts+o.dropped, "each sent once or recorded as dropped")
		}},
		"2xxIsDelivered": {fault.Faults{DuplicateCopies: 1}, http.StatusAccepted, func(t *testing.T, o outcome) {
			require.Equal(t, 2*len(o.copies), o.attempts, "one attempt per copy: a 202 is not retried")
		}},
		"OtherStatusesAreRetried": {fault.Faults{}, http.StatusInternalServerError, func(t *testing.T, o outcome) {
			require.Equal(t, 3*len(o.copies), o.attempts, "three attempts each, then given up")
		}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			stripe := run(t, stripeSender, tc.faults, tc.status)
			kinde := run(t, kindeSender, tc.faults, tc.status)
			require.Equal(t, stripe, kinde, "the same faults, the same deliveries")
			tc.check(t, stripe)
		})
	}
}
