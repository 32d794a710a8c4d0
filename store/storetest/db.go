package storetest

import (
	"context"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/billsync/billsync/store"
	"github.com/billsync/billsync/store/internal/storehook"
	"github.com/billsync/billsync/store/storetest/tb"
)

// This file and its neighbours (setup.go, rows.go, lock.go, counts.go) hold
// every SQL statement a test outside store/ needs, each behind a named
// function: a column rename is mended here, not in the tests of server,
// reconcile and cmd.

// TB is what the helpers fail a test through (package tb's: one TB for
// every test helper).
type TB = tb.TB

// CleanupTB is a TB that runs cleanups (a test's *testing.T).
type CleanupTB = tb.CleanupTB

// fatalf fails the test now.
var fatalf = tb.Fatalf

// dbOf is st's connection pool, reached through the store's internal
// handle: the store's exported API never hands it out.
func dbOf(st *store.Store) *pgxpool.Pool { return storehook.Of(st).Pool }

// WaitFor is the tests' one way to wait for a condition (tb.WaitFor): it
// polls cond in the test's own goroutine, so cond may call the helpers
// here, and fails the test after a minute with what.
var WaitFor = tb.WaitFor

// WaitUpTo is WaitFor with its own deadline (tb.WaitUpTo).
var WaitUpTo = tb.WaitUpTo

// bounded gives a helper's statement a deadline, so a hung database fails
// the test instead of holding it until the test binary's timeout.
func bounded() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), time.Minute)
}

// change's wants beyond an exact count.
const (
	someRows = -1 // one row or more
	anyRows  = -2 // whatever it finds, none included
)

// change runs a setup statement and fails the test unless it changed want
// rows (or, for someRows, at least one): a setup that silently does
// nothing would let the test pass for the wrong reason.
func change(t TB, st *store.Store, want int64, sql string, args ...any) {
	t.Helper()
	ctx, cancel := bounded()
	defer cancel()
	tag, err := dbOf(st).Exec(ctx, sql, args...)
	if err != nil {
		fatalf(t, "storetest: %s: %v", firstLine(sql), err)
	}
	switch n := tag.RowsAffected(); {
	case want == anyRows:
	case want == someRows && n == 0:
		fatalf(t, "storetest: %s: changed no row", firstLine(sql))
	case want != someRows && n != want:
		fatalf(t, "storetest: %s: changed %d rows, want %d", firstLine(sql), n, want)
	}
}

// collect runs a query and scans each row with scan, failing the test on
// any error.
func collect[T any](t TB, st *store.Store, scan func(pgx.CollectableRow) (T, error), sql string, args ...any) []T {
	t.Helper()
	ctx, cancel := bounded()
	defer cancel()
	rows, _ := dbOf(st).Query(ctx, sql, args...) // CollectRows reports the error
	out, err := pgx.CollectRows(rows, scan)
	if err != nil {
		fatalf(t, "storetest: %s: %v", firstLine(sql), err)
	}
	return out
}

// queryRow runs a one-row query into dest, failing the test on any error.
func queryRow(t TB, st *store.Store, sql string, args []any, dest ...any) {
	t.Helper()
	ctx, cancel := bounded()
	defer cancel()
	if err := dbOf(st).QueryRow(ctx, sql, args...).Scan(dest...); err != nil {
		fatalf(t, "storetest: %s: %v", firstLine(sql), err)
	}
}

// firstLine names a statement in a failure message.
func firstLine(sql string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(sql), "\n")
	return line
}
