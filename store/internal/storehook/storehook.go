// Package storehook hands what a *store.Store keeps unexported (its
// connection pool and its fault-injection points) to the store's own
// workshop and test helpers, store/scratch and store/storetest, so that
// neither is part of the store's exported API: river's riverinternaltest
// does the same for river's driver.
//
// Go's internal rule keeps every package outside store/ from importing it.
// Production code must never use it: nothing here is how billsync keeps
// state right.
package storehook

import (
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Internals are what a Store keeps unexported.
type Internals struct {
	Pool   *pgxpool.Pool
	Faults *Faults
}

// of is set by package store at init (this package cannot name
// *store.Store: store imports it).
var of func(st any) Internals

// Register is how package store hands over its internals, once, at init.
func Register(f func(st any) Internals) { of = f }

// Of returns the internals of st, which must be a *store.Store.
func Of(st any) Internals { return of(st) }

// Faults are a Store's fault-injection points. Setting one while workers
// run is safe: each point is read once per use, atomically.
type Faults struct {
	afterAccountWrite atomic.Pointer[func() error]
	afterChangeWrite  atomic.Pointer[func() error]
}

// SetAfterChangeWrite installs fn to run inside the transaction that
// writes an account change, right after its account_changes row: a test
// holds the transaction open there, or aborts it. nil removes it.
func (f *Faults) SetAfterChangeWrite(fn func() error) { set(&f.afterChangeWrite, fn) }

// AfterChangeWrite runs the installed fault, if any.
func (f *Faults) AfterChangeWrite() error { return run(&f.afterChangeWrite) }

func set(p *atomic.Pointer[func() error], fn func() error) {
	if fn == nil {
		p.Store(nil)
		return
	}
	p.Store(&fn)
}

func run(p *atomic.Pointer[func() error]) error {
	if fn := p.Load(); fn != nil {
		return (*fn)()
	}
	return nil
}

// SetAfterAccountWrite installs fn to run inside Apply (once per page
// inside ApplySweptPage) between the account write and the ledger write;
// an error from it aborts the transaction as a crash at that point would.
// nil removes it.
func (f *Faults) SetAfterAccountWrite(fn func() error) {
	if fn == nil {
		f.afterAccountWrite.Store(nil)
		return
	}
	f.afterAccountWrite.Store(&fn)
}

// AfterAccountWrite runs the installed fault, if any.
func (f *Faults) AfterAccountWrite() error {
	if fn := f.afterAccountWrite.Load(); fn != nil {
		return (*fn)()
	}
	return nil
}
