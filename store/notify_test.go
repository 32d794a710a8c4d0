package store_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/billsync/billsync/store/storetest"
)

// TestListenWakesOnNewWork: a stored event wakes a listening worker through
// NOTIFY, well before any poll would.
func TestListenWakesOnNewWork(t *testing.T) {
	st := storetest.NewStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	woken := make(chan struct{}, 10)
	done := make(chan struct{})
	go func() {
		st.Listen(ctx, slog.New(slog.DiscardHandler), func() { woken <- struct{}{} })
		close(done)
	}()
	select { // the first wake-up comes when listening starts
	case <-woken:
	case <-time.After(10 * time.Second):
		t.Fatal("Listen never started")
	}
	// A fresh store has sent no NOTIFY yet, so its rate limit (one per
	// notifyEvery) lets this event's through at once.
	receive(t, st, "evt_wake", "cus_wake")
	select {
	case <-woken:
	case <-time.After(10 * time.Second):
		t.Fatal("a new event did not wake the listener")
	}
	cancel()
	<-done
}
