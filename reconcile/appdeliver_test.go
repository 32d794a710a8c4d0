package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/mocks/inproc"
	"github.com/billsync/billsync/mocks/mock"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/server"
)

// memDeliveries is an in-memory AppDeliveryStore with the store's claim rule
// (due, lease free, no earlier pending change of the account), on the
// bubble's clock. The SQL itself is tested in package store.
type memDeliveries struct {
	mu    sync.Mutex
	rows  []*memRow
	dead  []int64
	tries map[int64][]time.Time
}

type memRow struct {
	d     reconcile.AppDelivery
	due   time.Time
	lease time.Time
	by    string
}

func (m *memDeliveries) add(changeID, account, seq int64) { m.addKind(changeID, account, seq, false) }

// addKind adds a delivery, an import's when imported.
func (m *memDeliveries) addKind(changeID, account, seq int64, imported bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rows = append(m.rows, &memRow{d: reconcile.AppDelivery{ChangeID: changeID, Endpoint: "http://app.test/hook",
		AccountID: account, Seq: seq, Status: reconcile.DeliveryPending, CreatedAt: time.Now(), Imported: imported,
		Body: fmt.Appendf(nil, `{"id":%d,"account_id":%d,"seq":%d}`, changeID, account, seq)}, due: time.Now()})
}

// The memory store's deliveries are put in place by the test: nothing to
// register or fan out.
func (m *memDeliveries) RegisterEndpoints(context.Context, []string) error { return nil }

func (m *memDeliveries) FanOut(context.Context, []string, int, bool) (bool, error) { return false, nil }

func (m *memDeliveries) ClaimDeliveries(_ context.Context, holder string, _ []string, limit, imports int, lease time.Duration) ([]reconcile.AppDelivery, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	var out []reconcile.AppDelivery
	for _, imported := range []bool{false, true} { // live first
		for _, r := range m.rows {
			if len(out) == limit || r.d.Imported != imported || r.d.Status != reconcile.DeliveryPending ||
				r.due.After(now) || r.lease.After(now) {
				continue
			}
			if imported && imports == 0 {
				break
			}
			if slices.ContainsFunc(m.rows, func(e *memRow) bool {
				return e.d.AccountID == r.d.AccountID && e.d.Status == reconcile.DeliveryPending && e.d.Seq < r.d.Seq
			}) {
				continue
			}
			r.lease, r.by = now.Add(lease), holder
			out = append(out, r.d)
			if imported {
				imports--
			}
		}
	}
	return out, nil
}

func (m *memDeliveries) RecordDelivery(_ context.Context, holder string, d reconcile.AppDelivery, a reconcile.AppDeliveryAttempt, status string, retryIn time.Duration) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.tries == nil {
		m.tries = map[int64][]time.Time{}
	}
	m.tries[d.ChangeID] = append(m.tries[d.ChangeID], a.At)
	for _, r := range m.rows {
		if r.d.ChangeID == d.ChangeID && r.by == holder {
			r.d.Attempts++
			r.d.Status, r.due, r.lease, r.by = status, time.Now().Add(retryIn), time.Time{}, ""
			if status == reconcile.DeliveryDead {
				m.dead = append(m.dead, d.ChangeID)
			}
			return nil
		}
	}
	return reconcile.ErrHeld
}

func (m *memDeliveries) pending() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, r := range m.rows {
		if r.d.Status == reconcile.DeliveryPending {
			n++
		}
	}
	return n
}

// flakyApp is the app's endpoint: down until upAt (refusing, 500, hanging,
// answering after the deadline, by turns), then up; it records every
// request's webhook-id and the ids it answered 2xx, in order.
type flakyApp struct {
	upAt      time.Time
	mu        sync.Mutex
	n         int
	ids       []string
	delivered []string
}

var errRefused = errors.New("connection refused")

func (f *flakyApp) RoundTrip(req *http.Request) (*http.Response, error) {
	f.mu.Lock()
	f.n++
	turn := f.n
	f.ids = append(f.ids, req.Header.Get("webhook-id"))
	up := !time.Now().Before(f.upAt)
	f.mu.Unlock()
	if !up && turn%4 == 0 {
		return nil, errRefused
	}
	return inproc.Transport{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case up:
			f.mu.Lock()
			f.delivered = append(f.delivered, r.Header.Get("webhook-id"))
			f.mu.Unlock()
			w.WriteHeader(http.StatusNoContent)
		case turn%4 == 1:
			w.WriteHeader(http.StatusInternalServerError)
		case turn%4 == 2:
			<-r.Context().Done() // hangs past the deadline
		default:
			select { // slow: answers after the deadline
			case <-time.After(server.DefaultAppTimeout + time.Second):
				w.WriteHeader(http.StatusOK)
			case <-r.Context().Done():
			}
		}
	})}.RoundTrip(req)
}

// TestDeliveriesSurviveAnOutage: the app is down for two hours, then up:
// every change arrives (2xx), one webhook-id per change on every attempt,
// each account's in seq order, none lost and none invented.
func TestDeliveriesSurviveAnOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &memDeliveries{}
		app := &flakyApp{upAt: time.Now().Add(2 * time.Hour)}
		sender, err := server.NewAppSender(server.AppSenderConfig{Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", Transport: app})
		require.NoError(t, err)
		d, err := reconcile.NewAppDeliverer(reconcile.AppDelivererConfig{Name: "r1", Store: st, Sender: sender,
			Endpoints: []string{"http://app.test/hook"}, Concurrency: 4})
		require.NoError(t, err)
		var id int64
		for seq := int64(1); seq <= 4; seq++ {
			for account := int64(1); account <= 3; account++ {
				id++
				st.add(id, account, seq)
			}
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { d.Run(ctx); close(done) }()
		for st.pending() > 0 {
			time.Sleep(time.Minute)
		}
		cancel()
		<-done

		require.Empty(t, st.dead)
		want := map[string]bool{}
		for i := int64(1); i <= id; i++ {
			want[server.WebhookID(i)] = true
		}
		for _, got := range app.ids {
			require.True(t, want[got], "no invented id: %s", got)
		}
		require.ElementsMatch(t, slices.Collect(func(yield func(string) bool) {
			for k := range want {
				if !yield(k) {
					return
				}
			}
		}), app.delivered, "every change delivered exactly once after the app came back")
		pos := map[string]int{}
		for i, w := range app.delivered {
			pos[w] = i
		}
		for account := int64(1); account <= 3; account++ {
			for seq := int64(2); seq <= 4; seq++ {
				prev, cur := server.WebhookID((seq-2)*3+account), server.WebhookID((seq-1)*3+account)
				require.Less(t, pos[prev], pos[cur], "account %d: seq %d before %d", account, seq-1, seq)
			}
		}
		require.Greater(t, len(app.ids), len(app.delivered), "the outage cost attempts")
	})
}

// TestDeliveryScheduleAndGiveUp: an app that always answers 500 gets the
// change at exponentially growing intervals (jitter within the upper half
// of each backoff) until the change is three days old, and then it is dead.
func TestDeliveryScheduleAndGiveUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &memDeliveries{}
		sender, err := server.NewAppSender(server.AppSenderConfig{Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
			Transport: inproc.Transport{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusInternalServerError)
			})}})
		require.NoError(t, err)
		d, err := reconcile.NewAppDeliverer(reconcile.AppDelivererConfig{Name: "r1", Store: st, Sender: sender,
			Endpoints: []string{"http://app.test/hook"}})
		require.NoError(t, err)
		start := time.Now()
		st.add(1, 1, 1)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { d.Run(ctx); close(done) }()
		for st.pending() > 0 {
			time.Sleep(time.Minute)
		}
		cancel()
		<-done

		require.Equal(t, []int64{1}, st.dead)
		tries := st.tries[1]
		last := tries[len(tries)-1].Sub(start)
		require.GreaterOrEqual(t, last, reconcile.DeliveryMaxAge, "given up only at three days")
		require.Less(t, last, reconcile.DeliveryMaxAge+2*time.Second, "the last try at three days (poll 1 s)")
		for i := 1; i < len(tries); i++ {
			gap := tries[i].Sub(tries[i-1])
			backoff := min(reconcile.DeliveryFirstRetry<<min(i-1, 20), reconcile.DeliveryMaxBackoff)
			if i == len(tries)-1 {
				require.LessOrEqual(t, gap, backoff+time.Second, "the last gap is cut to the window")
				continue
			}
			require.GreaterOrEqual(t, gap, backoff/2, "try %d", i)
			require.LessOrEqual(t, gap, backoff+time.Second, "try %d", i) // + the 1 s poll
		}
		require.Greater(t, len(tries), 70, "hourly tries over three days")
		require.Less(t, len(tries), 160)
	})
}

func TestNextDelivery(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 3, 0, 0, 0, 0, time.UTC)
	d := reconcile.AppDelivery{CreatedAt: now.Add(-time.Minute)}
	for _, tc := range []struct {
		name     string
		d        reconcile.AppDelivery
		code     int
		jitter   float64
		status   string
		retryMin time.Duration
	}{
		{"200", d, 200, 0, reconcile.DeliveryDelivered, 0},
		{"204", d, 204, 0, reconcile.DeliveryDelivered, 0},
		{"Gone", d, 410, 0, reconcile.DeliveryDead, 0},
		{"500First", d, 500, 0, reconcile.DeliveryPending, 2500 * time.Millisecond},
		{"400Retried", d, 400, 0.999, reconcile.DeliveryPending, 4990 * time.Millisecond},
		{"NoAnswerThird", reconcile.AppDelivery{CreatedAt: d.CreatedAt, Attempts: 2}, 0, 0, reconcile.DeliveryPending, 10 * time.Second},
		{"Capped", reconcile.AppDelivery{CreatedAt: d.CreatedAt, Attempts: 40}, 503, 0, reconcile.DeliveryPending, 30 * time.Minute},
		{"CutToWindow", reconcile.AppDelivery{CreatedAt: now.Add(-reconcile.DeliveryMaxAge + time.Second), Attempts: 40}, 503, 0, reconcile.DeliveryPending, time.Second},
		{"TooOld", reconcile.AppDelivery{CreatedAt: now.Add(-reconcile.DeliveryMaxAge), Attempts: 40}, 503, 0, reconcile.DeliveryDead, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, retry := reconcile.NextDelivery(tc.d, reconcile.AppDeliveryAttempt{StatusCode: tc.code}, now, tc.jitter)
			require.Equal(t, tc.status, status)
			require.InDelta(t, tc.retryMin.Seconds(), retry.Seconds(), 0.01)
		})
	}
}

// TestASlowAnswerHoldsUpItsOwnAccountOnly: while the app takes its time
// over one account's change, the other accounts' changes keep flowing,
// each in order; the slow account's next change waits for its answer.
func TestASlowAnswerHoldsUpItsOwnAccountOnly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &memDeliveries{}
		st.add(1, 1, 1) // account 1: two changes, the first answered slowly
		st.add(2, 1, 2)
		for seq := int64(1); seq <= 5; seq++ { // account 2: five changes
			st.add(2+seq, 2, seq)
		}
		release := make(chan struct{})
		var mu sync.Mutex
		var answered []int64
		sender := &mock.AppSender{SendFn: func(_ context.Context, dl reconcile.AppDelivery) reconcile.AppDeliveryAttempt {
			if dl.ChangeID == 1 {
				<-release
			}
			mu.Lock()
			answered = append(answered, dl.ChangeID)
			mu.Unlock()
			return reconcile.AppDeliveryAttempt{At: time.Now(), StatusCode: 204}
		}}
		d, err := reconcile.NewAppDeliverer(reconcile.AppDelivererConfig{Name: "r1", Store: st, Sender: sender,
			Endpoints: []string{"http://app.test/hook"}, Concurrency: 2, Poll: time.Hour})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { d.Run(ctx); close(done) }()

		synctest.Wait() // everything that can move has, and no time has passed
		mu.Lock()
		require.Equal(t, []int64{3, 4, 5, 6, 7}, answered, "account 2's changes, in order, while account 1's first hangs")
		mu.Unlock()
		close(release)
		synctest.Wait()
		mu.Lock()
		require.Equal(t, []int64{3, 4, 5, 6, 7, 1, 2}, answered, "account 1's second after its first")
		mu.Unlock()
		require.Zero(t, st.pending())
		cancel()
		<-done
	})
}

// TestALiveChangeNeverWaitsForAnImportsSlots: an import's deliveries that
// hang (a slow app) fill at most ImportSlots of the slots; a live change
// that comes meanwhile is delivered at once.
func TestALiveChangeNeverWaitsForAnImportsSlots(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const concurrency = 4
		st := &memDeliveries{}
		for i := int64(1); i <= 20; i++ { // an import's backlog, one account each
			st.addKind(i, 100+i, 1, true)
		}
		release := make(chan struct{})
		var mu sync.Mutex
		var answered []int64
		var importsHeld int
		sender := &mock.AppSender{SendFn: func(_ context.Context, dl reconcile.AppDelivery) reconcile.AppDeliveryAttempt {
			if dl.Imported {
				mu.Lock()
				importsHeld++
				mu.Unlock()
				<-release
			}
			mu.Lock()
			answered = append(answered, dl.ChangeID)
			mu.Unlock()
			return reconcile.AppDeliveryAttempt{At: time.Now(), StatusCode: 204}
		}}
		d, err := reconcile.NewAppDeliverer(reconcile.AppDelivererConfig{Name: "r1", Store: st, Sender: sender,
			Endpoints: []string{"http://app.test/hook"}, Concurrency: concurrency, Poll: time.Second})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { d.Run(ctx); close(done) }()

		synctest.Wait()
		mu.Lock()
		require.Equal(t, reconcile.ImportSlots(concurrency), importsHeld, "the import's deliveries take their slots, no more")
		mu.Unlock()
		st.add(1000, 1, 1) // a live change while the import's hang
		d.Wake()
		synctest.Wait()
		mu.Lock()
		require.Equal(t, []int64{1000}, answered, "the live change delivered while the import's still hang")
		mu.Unlock()
		close(release)
		synctest.Wait()
		require.Zero(t, st.pending(), "the import's delivered once the app answers")
		cancel()
		<-done
	})
}

func TestImportSlots(t *testing.T) {
	for concurrency, want := range map[int]int{1: 1, 2: 1, 3: 2, 4: 3, 8: 6, 16: 12} {
		require.Equal(t, want, reconcile.ImportSlots(concurrency), "concurrency %d", concurrency)
	}
}
