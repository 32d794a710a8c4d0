package fault

import (
	"context"
	"io"
	"net/http"
	"sync"
	"time"
)

// Deliverer is the webhook-delivery engine both fakes send with, so that
// their deliveries misbehave alike under the same Faults: a delivery is
// dropped by DropRate's dice, else sent as 1+DuplicateCopies+[0,
// RandomCopies] copies, each after its own random [0, ReorderDelay] wait;
// a copy answered 2xx is delivered, any other answer or a network error
// is retried after each wait of the schedule, and after the last it is
// given up. Close abandons what is pending. Build it with NewDeliverer.
type Deliverer struct {
	client   *http.Client
	schedule []time.Duration
	ctx      context.Context // ends deliveries on Close
	cancel   context.CancelFunc
	wg       sync.WaitGroup

	mu       sync.Mutex
	closed   bool
	inflight int
	idle     chan struct{} // closed when inflight drops to 0
}

// NewDeliverer returns an engine that sends with client and retries a
// failed copy after each wait of schedule (real time: a fake scales its
// provider's schedule before), so a copy has len(schedule)+1 attempts.
func NewDeliverer(client *http.Client, schedule []time.Duration) *Deliverer {
	d := &Deliverer{client: client, schedule: schedule}
	d.ctx, d.cancel = context.WithCancel(context.Background())
	return d
}

// Webhook is one delivery of one event to one endpoint.
type Webhook struct {
	// Request builds each attempt's request on ctx (a fresh one per
	// attempt: Stripe signs with the time it sends).
	Request func(ctx context.Context) (*http.Request, error)
	// Record is told every attempt, from the copy's own goroutine (no lock
	// of the caller's is held). An attempt cut short by Close is not
	// recorded: it is no failure of the receiver.
	Record func(Attempt)
}

// Attempt is one send of one copy.
type Attempt struct {
	Copy    int   // 0 = the original, 1..N = duplicate copies
	Attempt int   // 1-based
	Status  int   // the answer's status; 0 on a network error
	Err     error // the network error
	OK      bool  // answered 2xx: delivered
	GaveUp  bool  // failed, and it was the schedule's last attempt
	At      time.Time
}

// Send delivers w with the faults st holds, in the background, and
// reports whether DropRate's dice dropped it (then nothing is sent). The
// dice are thrown now, so the choices follow the order of the calls. After
// Close it sends nothing.
func (d *Deliverer) Send(st *State, w Webhook) (dropped bool) {
	f := st.Get()
	if st.Chance(f.DropRate) {
		return true
	}
	copies := 1 + max(f.DuplicateCopies, 0) + st.Upto(f.RandomCopies)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return false
	}
	for i := range copies {
		delay := st.Delay(f.ReorderDelay)
		if d.inflight == 0 {
			d.idle = make(chan struct{})
		}
		d.inflight++
		d.wg.Add(1)
		go d.deliver(w, i, delay)
	}
	return false
}

// deliver sends one copy until it is answered 2xx or the schedule runs out.
func (d *Deliverer) deliver(w Webhook, copy int, delay time.Duration) {
	defer d.finish()
	if !Sleep(d.ctx, delay) {
		return
	}
	for attempt := 1; ; attempt++ {
		status, err := d.send(w)
		if err != nil && d.ctx.Err() != nil {
			return // closing
		}
		ok := err == nil && status >= 200 && status < 300
		gaveUp := !ok && attempt > len(d.schedule)
		w.Record(Attempt{Copy: copy, Attempt: attempt, Status: status, Err: err, OK: ok, GaveUp: gaveUp, At: time.Now()})
		if ok || gaveUp || !Sleep(d.ctx, d.schedule[attempt-1]) {
			return
		}
	}
}

func (d *Deliverer) send(w Webhook) (int, error) {
	req, err := w.Request(d.ctx)
	if err != nil {
		return 0, err
	}
	resp, err := d.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	return resp.StatusCode, nil
}

func (d *Deliverer) finish() {
	d.mu.Lock()
	d.inflight--
	if d.inflight == 0 {
		close(d.idle)
	}
	d.mu.Unlock()
	d.wg.Done()
}

// WaitIdle waits until no copy is waiting, in flight or between retries.
func (d *Deliverer) WaitIdle(ctx context.Context) error {
	d.mu.Lock()
	if d.inflight == 0 {
		d.mu.Unlock()
		return nil
	}
	idle := d.idle
	d.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close abandons pending deliveries and waits for their goroutines; later
// Sends send nothing.
func (d *Deliverer) Close() {
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	d.cancel()
	d.wg.Wait()
}

// Sleep waits d or until ctx ends; it reports whether the wait completed.
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
