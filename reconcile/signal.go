package reconcile

import "sync"

// Signal wakes every waiter at once (a broadcast): the change feed's long
// polls wait on it, and the store's listener on billsync_account_changes
// fires it. The zero Signal is ready to use.
type Signal struct {
	mu sync.Mutex
	ch chan struct{}
}

// C returns a channel closed at the next Fire. Take it before looking for
// work, so that work committed in between still wakes the caller.
func (s *Signal) C() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	return s.ch
}

// Fire wakes everyone waiting on a channel C returned.
func (s *Signal) Fire() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch != nil {
		close(s.ch)
		s.ch = nil
	}
}
