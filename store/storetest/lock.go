package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/billsync/billsync/store"
)

// TableLock is an ACCESS EXCLUSIVE lock on one table of a store's
// database, held in a transaction on a connection of its own: statements
// of the store on that table wait in the server until it is released, as
// behind a hung or slow database.
type TableLock struct {
	conn  *pgx.Conn
	tx    pgx.Tx
	table string
}

// LockTable locks table of st's database until Release, or until the
// connection closes at the test's cleanup.
func LockTable(t testing.TB, st *store.Store, table string) *TableLock {
	t.Helper()
	ctx, cancel := bounded()
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, dbOf(st).Config().ConnConfig.Copy())
	if err != nil {
		t.Fatalf("storetest: lock %s: %v", table, err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatalf("storetest: lock %s: %v", table, err)
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE `+pgx.Identifier{table}.Sanitize()+` IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatalf("storetest: lock %s: %v", table, err)
	}
	return &TableLock{conn: conn, tx: tx, table: table}
}

// WaitForWaiter returns once some session waits for a lock on the table:
// the statement the test holds is in the server.
func (l *TableLock) WaitForWaiter(t testing.TB) {
	t.Helper()
	l.poll(t, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE NOT granted AND relation = $1::regclass)`, l.table)
}

// Release ends the lock's transaction: waiting statements go on.
func (l *TableLock) Release(t testing.TB) {
	t.Helper()
	ctx, cancel := bounded()
	defer cancel()
	if err := l.tx.Rollback(ctx); err != nil {
		t.Fatalf("storetest: unlock %s: %v", l.table, err)
	}
}

// WaitIdle returns once no other session of the database runs a statement
// (one the server was still running after its caller gave up has ended).
func (l *TableLock) WaitIdle(t testing.TB) {
	t.Helper()
	l.poll(t, `SELECT count(*) = 0 FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid() AND state <> 'idle'`)
}

// poll asks the lock's connection sql (a boolean) until it says true.
func (l *TableLock) poll(t testing.TB, sql string, args ...any) {
	t.Helper()
	ctx, cancel := bounded()
	defer cancel()
	for {
		var done bool
		if err := l.conn.QueryRow(ctx, sql, args...).Scan(&done); err != nil {
			t.Fatalf("storetest: %s: %v", firstLine(sql), err) // the deadline, too: never a hang
		}
		if done {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}
