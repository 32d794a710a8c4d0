package store_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/store"
	"github.com/billsync/billsync/store/internal/dburl"
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

// TestListenOnlyOnASession: told the URL is a transaction pooler's, the
// store never LISTENs on it (Listen returns at once and says so in
// Connection); given a direct URL beside it, LISTEN goes there and a new
// event wakes the listener.
func TestListenOnlyOnASession(t *testing.T) {
	t.Parallel()
	url := storetest.URL(t)
	pooled := storetest.OpenStore(t, url, store.Options{Pooling: store.PoolingTransaction})
	c := pooled.Connection()
	require.False(t, c.Listen)
	if !dburl.Has(url, "default_query_exec_mode") { // BILLSYNC_TEST_QUERY_MODE names one
		require.Equal(t, "exec", c.QueryMode, "a query mode the pooler supports, chosen")
		require.True(t, c.QueryModeChosen)
	}
	returned := make(chan struct{})
	go func() {
		pooled.Listen(context.Background(), slog.New(slog.DiscardHandler), func() { t.Error("woken without LISTEN") })
		close(returned)
	}()
	select {
	case <-returned:
	case <-time.After(time.Minute):
		t.Fatal("Listen held on without a connection that can LISTEN")
	}

	withDirect := storetest.OpenStore(t, url, store.Options{Pooling: store.PoolingTransaction, DirectURL: url})
	c = withDirect.Connection()
	require.True(t, c.Listen)
	require.Equal(t, "direct url", c.ListenVia)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	woken := make(chan struct{}, 10)
	go withDirect.Listen(ctx, slog.New(slog.DiscardHandler), func() { woken <- struct{}{} })
	<-woken // listening
	receive(t, withDirect, "evt_direct", "cus_direct")
	select {
	case <-woken:
	case <-time.After(time.Minute):
		t.Fatal("a new event did not wake the direct listener")
	}
}

// TestRefusesAQueryModeThePoolerBreaks: a transaction pooler with a mode
// that prepares statements by name is refused at open, naming the fix.
func TestRefusesAQueryModeThePoolerBreaks(t *testing.T) {
	t.Parallel()
	url := storetest.URL(t)
	for _, mode := range []string{"cache_statement", "describe_exec"} {
		_, err := store.Open(context.Background(), dburl.WithParam(url, "default_query_exec_mode", mode), store.Options{Pooling: store.PoolingTransaction})
		require.ErrorContains(t, err, "set default_query_exec_mode=exec", mode)
	}
	st := storetest.OpenStore(t, dburl.WithParam(url, "default_query_exec_mode", "cache_describe"), store.Options{Pooling: store.PoolingTransaction})
	require.Equal(t, "cache_describe", st.Connection().QueryMode)
	require.False(t, st.Connection().QueryModeChosen)
}

// TestNotifySuppressedIsSentLate: a second event within the NOTIFY rate
// limit still wakes the listener (at the interval's end): a worker that
// claimed just before it must not wait for its poll.
func TestNotifySuppressedIsSentLate(t *testing.T) {
	st := storetest.NewStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	woken := make(chan struct{}, 10)
	go st.Listen(ctx, slog.New(slog.DiscardHandler), func() { woken <- struct{}{} })
	<-woken // listening
	receive(t, st, "evt_first", "cus_first")
	receive(t, st, "evt_second", "cus_second") // within notifyEvery of the first, on a quiet machine
	for i := range 2 {
		select {
		case <-woken:
		case <-time.After(time.Minute):
			t.Fatalf("wake-up %d of 2 never came", i+1)
		}
	}
}
