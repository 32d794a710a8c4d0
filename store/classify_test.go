package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/reconcile"
)

// TestClassify: every way a connection can end mid-statement is an outage
// (503, retry), not a bug (500); what the server refused stays unexpected.
func TestClassify(t *testing.T) {
	unavailable := map[string]error{
		"UnexpectedEOF":  fmt.Errorf("store: %w", io.ErrUnexpectedEOF),
		"EOF":            fmt.Errorf("receive message failed: %w", io.EOF),
		"ConnClosed":     fmt.Errorf("query: %w", pgconn.ErrConnClosed),
		"Reset":          &net.OpError{Op: "read", Net: "unix", Err: syscall.ECONNRESET},
		"BrokenPipe":     fmt.Errorf("write: %w", syscall.EPIPE),
		"Deadline":       fmt.Errorf("acquire: %w", context.DeadlineExceeded),
		"AdminShutdown":  &pgconn.PgError{Code: "57P01"},
		"CannotConnect":  &pgconn.PgError{Code: "08006"},
		"Serialization":  &pgconn.PgError{Code: "40001"},
		"TooManyClients": &pgconn.PgError{Code: "53300"},
	}
	for name, err := range unavailable {
		t.Run(name, func(t *testing.T) {
			got := classify(err)
			require.ErrorIs(t, got, reconcile.ErrStoreUnavailable)
			require.ErrorIs(t, got, err, "the cause is kept")
		})
	}
	unexpected := map[string]error{
		"BadEncoding": &pgconn.PgError{Code: "22021"},
		"Check":       &pgconn.PgError{Code: "23514"},
		"Canceled":    context.Canceled,
		"Other":       errors.New("disk on fire"),
	}
	for name, err := range unexpected {
		t.Run(name, func(t *testing.T) {
			require.NotErrorIs(t, classify(err), reconcile.ErrStoreUnavailable)
		})
	}
	require.ErrorIs(t, classify(pgx.ErrNoRows), reconcile.ErrNotFound)
}
