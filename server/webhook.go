package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/billsync/billsync/reconcile"
)

// webhookAnswer is the body of a 200 answer: it says "stored", never
// "applied".
type webhookAnswer struct {
	Status    string `json:"status"` // stored, duplicate or ignored
	Event     string `json:"event"`
	SeenCount int    `json:"seen_count"`
	Reason    string `json:"reason,omitempty"`
}

func (s *Server) handleWebhook(w http.ResponseWriter, r *http.Request) {
	v, ok := s.verifiers[r.PathValue("provider")]
	if !ok {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no such provider configured"})
		return
	}
	body, release, err := s.readBody(w, r)
	if err != nil {
		s.writeError(w, r, toProvider, fmt.Errorf("read body: %w", err))
		return
	}
	defer release()
	// One deadline from here: verifying (a Kinde token may wait for its key
	// set) and storing together answer within StoreTimeout, so a provider
	// never waits two. The client hanging up must not cancel a store half
	// way (the body is in hand, and the provider retries anyway); a hung
	// database must not hold the request either: past it the answer is 503.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), s.storeTimeout)
	defer cancel()
	d, err := v.Verify(ctx, r.Header, body)
	if err != nil {
		s.writeError(w, r, toProvider, err)
		return
	}
	d.RemoteAddr = r.RemoteAddr
	st, err := s.inbox.StoreReceipt(ctx, d)
	if err != nil {
		s.writeError(w, r, toProvider, err)
		return
	}
	ans := webhookAnswer{Status: "stored", Event: d.Event.DedupeKey, SeenCount: st.SeenCount}
	switch {
	case st.Duplicate:
		ans.Status = "duplicate"
	case st.Status == "ignored":
		ans.Status, ans.Reason = "ignored", d.Event.IgnoreReason
	}
	if s.metrics != nil {
		s.metrics.ObserveReceipt(v.Provider(), ans.Status)
	}
	// Debug, not info: every delivery already has its receipts row, and the
	// worker logs what each reconcile did. LogAttrs: nothing is allocated
	// when debug is off.
	s.log.LogAttrs(ctx, slog.LevelDebug, "webhook stored", slog.String("provider", v.Provider()),
		slog.String("event", d.Event.DedupeKey), slog.String("type", d.Event.Type),
		slog.String("customer", d.Event.CustomerID), slog.String("status", ans.Status))
	writeJSON(w, http.StatusOK, ans)
}

// bodyChunk is what every body starts in. Stripe's events are a few KB, so
// most never need more, and a client that announces a megabyte and sends
// nothing costs this, not a megabyte: the buffer grows only with what
// arrives.
const bodyChunk = 8 << 10

// chunks recycles bodyChunk buffers: most webhook receipts need no other memory.
// A buffer goes back only after StoreReceipt has returned (the store has
// copied the payload into its query by then; an Inbox must not keep
// d.Event.Payload), and grown buffers are left to the collector.
var chunks = sync.Pool{New: func() any { return new([bodyChunk]byte) }}

var (
	// errIncompleteBody: the client hung up, sent less than it announced,
	// or was too slow. Its failure, not billsync's: counted apart from
	// server errors and never logged as one, so nobody can trip a 5xx
	// alert by hanging up.
	errIncompleteBody = errors.New("request body incomplete")
	// errBusy: the bodies being read already hold BodyMemory.
	errBusy = errors.New("too many large webhook bodies being read at once")
)

// readBody reads the request body, refusing more than MaxBodyBytes, within
// BodyTimeout. Growing past bodyChunk reserves memory from the server's
// BodyMemory budget; release returns it once the body is no longer used.
// When the budget is spent the body is refused at once (errBusy, a 503 the
// provider retries) rather than queued: a queue would let a flood of slow
// senders hold every later delivery too, while small bodies, which need no
// reservation, keep flowing.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) (body []byte, release func(), err error) {
	if r.ContentLength > MaxBodyBytes {
		return nil, nil, fmt.Errorf("%w: Content-Length %d", reconcile.ErrTooLarge, r.ContentLength)
	}
	// The body gets its own deadline, whatever the listener's timeouts: a
	// client trickling it is cut off. (A ResponseWriter that cannot set
	// one, in tests, reads without.)
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(s.bodyTimeout))
	s.bodiesReading.Add(1)
	defer s.bodiesReading.Add(-1)

	chunk := chunks.Get().(*[bodyChunk]byte)
	var reserved int64
	release = func() {
		s.bodyMemory.Add(-reserved)
		chunks.Put(chunk)
	}
	src := http.MaxBytesReader(w, r.Body, MaxBodyBytes)
	buf := chunk[:0]
	for {
		if len(buf) == cap(buf) {
			// One byte over the limit lets MaxBytesReader tell "exactly
			// 1 MiB" from "more".
			grown := min(2*cap(buf), MaxBodyBytes+1)
			extra := int64(grown - cap(buf))
			if s.bodyMemory.Add(extra) > s.bodyMemoryMax {
				s.bodyMemory.Add(-extra)
				release()
				return nil, nil, errBusy
			}
			reserved += extra
			buf = append(make([]byte, 0, grown), buf...)
		}
		n, err := src.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		switch {
		case err == io.EOF:
			return buf, release, nil
		case err != nil:
			release()
			if tooBig := (*http.MaxBytesError)(nil); errors.As(err, &tooBig) {
				return nil, nil, fmt.Errorf("%w: %w", reconcile.ErrTooLarge, err)
			}
			return nil, nil, fmt.Errorf("%w: %w", errIncompleteBody, err)
		}
	}
}
