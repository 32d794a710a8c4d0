package reconcile

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"
)

// leadership runs a duty that one replica does at a time (a feed, the
// sample, the Connect accounts' feeds and sweeps): every replica runs it,
// and whichever holds the duty's lease leads.
type leadership struct {
	// lock takes the lease: held ends if it is lost; ErrLeaseHeld when
	// another replica has it.
	lock  func(ctx context.Context) (held context.Context, release func(), err error)
	retry time.Duration // the wait before a replica that does not lead tries again
	log   *slog.Logger
	what  string // the duty, in the warnings ("events feed")
	// standby, when set, is logged at DEBUG when another replica leads.
	standby string
}

// run leads (lead, until ctx ends or the lease, held, is lost) whenever
// this replica holds the lease, until ctx ends; a replica that does not
// lead tries again every retry, so a leader killed -9 is replaced within
// its lease's TTL and retry.
func (l leadership) run(ctx context.Context, lead func(ctx, held context.Context)) {
	for ctx.Err() == nil {
		held, release, err := l.lock(ctx)
		switch {
		case err == nil:
			lead(ctx, held)
			release()
			continue
		case ctx.Err() != nil:
			return
		case errors.Is(err, ErrLeaseHeld):
			if l.standby != "" {
				l.log.DebugContext(ctx, l.standby)
			}
		default:
			l.log.WarnContext(ctx, l.what+": lease not taken; trying again", slog.Any("error", err))
		}
		select {
		case <-ctx.Done():
		case <-time.After(l.retry):
		}
	}
}

// accountPool runs jobs on connected accounts in the background, at most
// one per account and a fixed number at once (the Connect feed's polls,
// the Connect sweeps): a leader hands it the accounts due, most overdue
// first, as slots free up.
type accountPool struct {
	slots chan struct{} // one a job in flight
	ended chan struct{} // a job ended: a slot, and maybe an account, is free
	wg    sync.WaitGroup

	mu       sync.Mutex
	inflight map[string]bool
}

func newAccountPool(size int) *accountPool {
	return &accountPool{slots: make(chan struct{}, size), ended: make(chan struct{}, 1), inflight: map[string]bool{}}
}

// running counts the jobs running now.
func (p *accountPool) running() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.inflight)
}

// busy returns the accounts whose job runs now: the store leaves them out
// of the accounts due.
func (p *accountPool) busy() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	busy := make([]string, 0, len(p.inflight))
	for a := range p.inflight {
		busy = append(busy, a)
	}
	return busy
}

// start waits for a free slot and runs job on account in the background;
// false (job not run) when ctx ends first.
func (p *accountPool) start(ctx context.Context, account string, job func()) bool {
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return false
	}
	p.mu.Lock()
	p.inflight[account] = true
	p.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		job()
		p.mu.Lock()
		delete(p.inflight, account)
		p.mu.Unlock()
		<-p.slots
		select {
		case p.ended <- struct{}{}:
		default:
		}
	}()
	return true
}

// sleep waits for wait, or until a job ends or ctx does.
func (p *accountPool) sleep(ctx context.Context, wait time.Duration) {
	if wait <= 0 {
		return
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-p.ended:
	case <-t.C:
	}
}

// wait returns once every job started has returned.
func (p *accountPool) wait() { p.wg.Wait() }
