package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/billsync/billsync/reconcile"
)

// ChangesChannel is the LISTEN/NOTIFY channel on which every committed
// account change is announced (docs/app-changes.md): the payload is
// {"id":…,"account_id":…,"seq":…}. PostgreSQL sends it at commit, never
// for a transaction that rolls back.
const ChangesChannel = "billsync_account_changes"

// announce writes the app's change of an account, as the domain formed it
// (nil: nothing the app sees changed, and nothing is written), in the
// caller's transaction: the account_changes row, numbered in the account's
// sequence under the row lock the caller holds, naming the events the
// transaction answered (the first reconcile.MaxWhyEvents ids of n), and the
// NOTIFY. Its deliveries are not written here but by serve's deliverer
// (FanOut), for the endpoints serve knows: the writer may be a process that
// knows none.
func (s *Store) announce(ctx context.Context, tx pgx.Tx, change *reconcile.AccountChange, events []string, n int) error {
	if change == nil {
		return nil
	}
	ch := *change
	if events != nil {
		ch.Why.EventIDs = events
	}
	ch.Why.Events = n
	// The feed's order key (migrations/015_change_order.sql): this
	// transaction's id, or the account's previous change's key if that is
	// greater, so the account's changes read in seq order.
	var key int64
	if err := tx.QueryRow(ctx, `
		UPDATE accounts SET change_seq = change_seq + 1,
			change_xid = greatest(change_xid, pg_current_xact_id()::text::bigint)
		WHERE id = $1
		RETURNING change_seq, change_xid, nextval(pg_get_serial_sequence('account_changes', 'id')), now()`,
		ch.AccountID).Scan(&ch.Seq, &key, &ch.ID, &ch.Time); err != nil {
		return fmt.Errorf("number change: %w", err)
	}
	ch.Time = ch.Time.UTC()
	body, err := json.Marshal(ch)
	if err != nil {
		return fmt.Errorf("encode change: %w", err)
	}
	if _, err := tx.Exec(ctx, `
		INSERT INTO account_changes (id, account_id, seq, xid, created_at, payload) VALUES ($1, $2, $3, $4, $5, $6::jsonb)`,
		ch.ID, ch.AccountID, ch.Seq, key, ch.Time, string(body)); err != nil { // text: a []byte is bytea in the exec modes
		return fmt.Errorf("write change: %w", err)
	}
	if err := s.faults.AfterChangeWrite(); err != nil {
		return err
	}
	note := `{"id":` + strconv.FormatInt(ch.ID, 10) + `,"account_id":` + strconv.FormatInt(ch.AccountID, 10) +
		`,"seq":` + strconv.FormatInt(ch.Seq, 10) + `}`
	if _, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, ChangesChannel, note); err != nil {
		return fmt.Errorf("notify change: %w", err)
	}
	return nil
}

// readLedger reads the account's ledger by meter in two periods (a zero
// start has none), in one query.
func readLedger(ctx context.Context, tx pgx.Tx, accountID int64, a, b time.Time) (reconcile.Ledger, error) {
	rows, _ := tx.Query(ctx, `
		SELECT period_start, meter, coalesce(sum(delta) FILTER (WHERE kind = 'grant'), 0), sum(delta), count(*) FROM ledger
		WHERE account_id = $1 AND period_start IN ($2, $3) GROUP BY meter, period_start`,
		accountID, nullTime(a), nullTime(b))
	l, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (reconcile.PeriodLedger, error) {
		var p reconcile.PeriodLedger
		return p, r.Scan(&p.PeriodStart, &p.Meter, &p.Granted, &p.Balance, &p.Rows)
	})
	if err != nil {
		return nil, fmt.Errorf("read ledger: %w", err)
	}
	return l, nil
}

const changeColumns = `id, xid, payload::text`

func scanChange(r pgx.CollectableRow) (reconcile.ChangeFeedEntry, error) {
	var c reconcile.ChangeFeedEntry
	var xid int64
	var body string
	if err := r.Scan(&c.Cursor.ID, &xid, &body); err != nil {
		return c, err
	}
	c.Cursor.XID = uint64(xid)
	c.Body = []byte(body)
	if err := json.Unmarshal(c.Body, &c.AccountChange); err != nil {
		return c, fmt.Errorf("change %d: %w", c.Cursor.ID, err)
	}
	return c, nil
}

// Changes returns up to limit committed changes after the cursor, in feed
// order: (key, id), where a change's key is its writing transaction's id
// or its account's previous change's key if greater. Only changes whose
// key is older than every transaction still in flight are shown: each of
// those has ended, and a change in flight has a key at least its own
// transaction's id, so no change can later commit before the last one
// returned and a reader that moves its cursor past a change never skips
// another. A change waits to be shown while any older transaction is open.
func (s *Store) Changes(ctx context.Context, after reconcile.ChangeCursor, limit int) ([]reconcile.ChangeFeedEntry, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, `SELECT `+changeColumns+` FROM account_changes
		WHERE (xid, id) > ($1, $2) AND xid < pg_snapshot_xmin(pg_current_snapshot())::text::bigint
		ORDER BY xid, id LIMIT $3`, int64(after.XID), after.ID, limit)
	if err != nil {
		return nil, fmt.Errorf("changes after %s: %w", after, classify(err))
	}
	cs, err := pgx.CollectRows(rows, scanChange)
	if err != nil {
		return nil, fmt.Errorf("changes after %s: %w", after, classify(err))
	}
	return cs, nil
}

// AccountChanges returns an account's newest changes, newest first.
func (s *Store) AccountChanges(ctx context.Context, accountID int64, limit int) ([]reconcile.ChangeFeedEntry, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, `SELECT `+changeColumns+` FROM account_changes
		WHERE account_id = $1 ORDER BY seq DESC LIMIT $2`, accountID, limit)
	if err != nil {
		return nil, fmt.Errorf("changes of account %d: %w", accountID, classify(err))
	}
	cs, err := pgx.CollectRows(rows, scanChange)
	if err != nil {
		return nil, fmt.Errorf("changes of account %d: %w", accountID, classify(err))
	}
	return cs, nil
}
