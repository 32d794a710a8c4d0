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

// announcement is one account's change as the domain formed it (nil:
// nothing the app sees changed), with the events its transaction answered:
// the first reconcile.MaxWhyEvents ids of n.
type announcement struct {
	change *reconcile.AccountChange
	events []string
	n      int
}

// announce writes the app's changes of accounts (one each at most) in the
// caller's transaction: the account_changes rows, each numbered in its
// account's sequence under the row lock the caller holds and naming the
// events the transaction answered, and a NOTIFY each, with one statement
// of each kind. Their deliveries are not written here but by serve's
// deliverer (FanOut), for the endpoints serve knows: the writer may be a
// process that knows none.
func (s *Store) announce(ctx context.Context, tx pgx.Tx, as []announcement) error {
	var chs []reconcile.AccountChange
	for _, a := range as {
		if a.change == nil {
			continue
		}
		ch := *a.change
		if a.events != nil {
			ch.Why.EventIDs = a.events
		}
		ch.Why.Events = a.n
		chs = append(chs, ch)
	}
	if len(chs) == 0 {
		return nil
	}
	keys, err := numberChanges(ctx, tx, chs)
	if err != nil {
		return err
	}
	if err := writeChanges(ctx, tx, chs, keys); err != nil {
		return err
	}
	if err := s.faults.AfterChangeWrite(); err != nil {
		return err
	}
	notes := make([]string, len(chs))
	for i, ch := range chs {
		notes[i] = `{"id":` + strconv.FormatInt(ch.ID, 10) + `,"account_id":` + strconv.FormatInt(ch.AccountID, 10) +
			`,"seq":` + strconv.FormatInt(ch.Seq, 10) + `}`
	}
	if _, err := tx.Exec(ctx, `SELECT pg_notify($1, note) FROM unnest($2::text[]) AS note`, ChangesChannel, notes); err != nil {
		return fmt.Errorf("notify changes: %w", err)
	}
	return nil
}

// numberChanges gives each change (one per account) its ID, Seq and Time
// and returns the feed's order keys (migrations/015_change_order.sql):
// this transaction's id, or the account's previous change's key if that
// is greater, so the account's changes read in seq order.
func numberChanges(ctx context.Context, tx pgx.Tx, chs []reconcile.AccountChange) ([]int64, error) {
	ids := make([]int64, len(chs))
	for i, ch := range chs {
		ids[i] = ch.AccountID
	}
	rows, _ := tx.Query(ctx, `
		UPDATE accounts a SET change_seq = a.change_seq + 1,
			change_xid = greatest(a.change_xid, pg_current_xact_id()::text::bigint)
		FROM unnest($1::bigint[]) WITH ORDINALITY AS v(id, n)
		WHERE a.id = v.id
		RETURNING v.n, a.change_seq, a.change_xid, nextval(pg_get_serial_sequence('account_changes', 'id')), now()`, ids)
	keys := make([]int64, len(chs))
	numbered := 0
	var n, seq, key, id int64
	var at time.Time
	_, err := pgx.ForEachRow(rows, []any{&n, &seq, &key, &id, &at}, func() error {
		ch := &chs[n-1]
		ch.Seq, ch.ID, ch.Time, keys[n-1] = seq, id, at.UTC(), key
		numbered++
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("number changes: %w", err)
	}
	if numbered != len(chs) {
		return nil, fmt.Errorf("number changes: %d of %d accounts found", numbered, len(chs))
	}
	return keys, nil
}

// writeChanges inserts the numbered changes' account_changes rows.
func writeChanges(ctx context.Context, tx pgx.Tx, chs []reconcile.AccountChange, keys []int64) error {
	n := len(chs)
	ids, accounts, seqs := make([]int64, n), make([]int64, n), make([]int64, n)
	times, bodies := make([]time.Time, n), make([]string, n)
	for i, ch := range chs {
		body, err := json.Marshal(ch)
		if err != nil {
			return fmt.Errorf("encode change: %w", err)
		}
		ids[i], accounts[i], seqs[i], times[i], bodies[i] = ch.ID, ch.AccountID, ch.Seq, ch.Time, string(body)
	}
	// The payload is text: a []byte is bytea in the exec modes.
	if _, err := tx.Exec(ctx, `
		INSERT INTO account_changes (id, account_id, seq, xid, created_at, payload)
		SELECT v.id, v.account_id, v.seq, v.xid, v.created_at, v.payload::jsonb
		FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bigint[], $5::timestamptz[], $6::text[])
			AS v(id, account_id, seq, xid, created_at, payload)`,
		ids, accounts, seqs, keys, times, bodies); err != nil {
		return fmt.Errorf("write changes: %w", err)
	}
	return nil
}

// readLedgers reads each account's ledger by meter in its own period and
// in periods[i] (a zero start has none), in one query, aligned with
// accounts.
func readLedgers(ctx context.Context, tx pgx.Tx, accounts []reconcile.Account, periods []time.Time) ([]reconcile.Ledger, error) {
	ids := make([]int64, len(accounts))
	own, other := make([]*time.Time, len(accounts)), make([]*time.Time, len(accounts))
	for i, a := range accounts {
		ids[i], own[i], other[i] = a.ID, nullTime(a.PeriodStart), nullTime(periods[i])
	}
	rows, _ := tx.Query(ctx, `
		SELECT p.n, l.period_start, l.meter, coalesce(sum(l.delta) FILTER (WHERE l.kind = 'grant'), 0), sum(l.delta), count(*)
		FROM ledger l
		JOIN unnest($1::bigint[], $2::timestamptz[], $3::timestamptz[]) WITH ORDINALITY AS p(account_id, a, b, n)
			ON l.account_id = p.account_id AND l.period_start IN (p.a, p.b)
		GROUP BY p.n, l.meter, l.period_start
		ORDER BY p.n, l.period_start, l.meter`, ids, own, other)
	ledgers := make([]reconcile.Ledger, len(accounts))
	var n int64
	var p reconcile.PeriodLedger
	_, err := pgx.ForEachRow(rows, []any{&n, &p.PeriodStart, &p.Meter, &p.Granted, &p.Balance, &p.Rows}, func() error {
		ledgers[n-1] = append(ledgers[n-1], p)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read ledgers: %w", err)
	}
	return ledgers, nil
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
