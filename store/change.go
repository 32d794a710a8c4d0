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

// announce writes the app's change of an account in the caller's
// transaction: the account_changes row (numbered in the account's
// sequence, under the row lock the caller holds) and the NOTIFY. Its
// deliveries are not written here but by serve's deliverer (FanOut), for
// the endpoints serve knows: the writer may be a process that knows none. moves are the ledger rows it wrote,
// on any meter. A change that changes nothing the app sees writes nothing.
func (s *Store) announce(ctx context.Context, tx pgx.Tx, before *reconcile.AccountState, after reconcile.AccountState,
	moves []reconcile.LedgerMove, why reconcile.Why) error {
	ch, ok := reconcile.ChangeOf(before, after, moves, why)
	if !ok {
		return nil
	}
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

// meterSum is one meter's ledger in one period: the sum and the rows.
type meterSum struct{ sum, rows int64 }

// periodSums is a period's ledger by meter ("" the default).
type periodSums map[string]meterSum

// ledgerSums reads the account's ledger by meter for two period starts
// (a zero start has none), in one query.
func ledgerSums(ctx context.Context, tx pgx.Tx, accountID int64, a, b time.Time) (periodSums, periodSums, error) {
	rows, _ := tx.Query(ctx, `
		SELECT meter, period_start, sum(delta), count(*) FROM ledger
		WHERE account_id = $1 AND period_start IN ($2, $3) GROUP BY meter, period_start`,
		accountID, nullTime(a), nullTime(b))
	x, y := periodSums{}, periodSums{}
	var meter string
	var start time.Time
	var m meterSum
	_, err := pgx.ForEachRow(rows, []any{&meter, &start, &m.sum, &m.rows}, func() error {
		if start.Equal(a) {
			x[meter] = m
		}
		if start.Equal(b) {
			y[meter] = m
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("read balances: %w", err)
	}
	return x, y, nil
}

// add counts a ledger move n times into the period: 1 adds a move just
// written, -1 takes one the period holds back out (the sums as they were
// before it was written).
func (p periodSums) add(m reconcile.LedgerMove, n int64) {
	s := p[m.Meter]
	p[m.Meter] = meterSum{sum: s.sum + n*m.Delta, rows: s.rows + n}
}

// state is account a as the app sees it with the period's balances: the
// default meter's, and each named meter that has rows.
func (p periodSums) state(a reconcile.Account) reconcile.AccountState {
	st := reconcile.AccountState{Account: a, Balance: p[""].sum}
	for meter, m := range p {
		if meter == "" || m.rows <= 0 {
			continue
		}
		if st.Meters == nil {
			st.Meters = map[string]int64{}
		}
		st.Meters[meter] = m.sum
	}
	return st
}

// announceApply announces what a reconcile wrote: cur became next, and
// each grant added added[i] (when above 0) to its meter in next's period:
// one change with every move. The balances are read after the grants'
// writes; those before are what the ledger held for cur's period without
// them.
func (s *Store) announceApply(ctx context.Context, tx pgx.Tx, job reconcile.Job, cur, next reconcile.Account,
	grants []reconcile.Grant, added []int64, events []string, n int) error {
	was, now, err := ledgerSums(ctx, tx, cur.ID, cur.PeriodStart, next.PeriodStart)
	if err != nil {
		return err
	}
	var moves []reconcile.LedgerMove
	for i, g := range grants {
		if i >= len(added) || added[i] <= 0 {
			continue
		}
		m := reconcile.LedgerMove{Meter: g.Meter, Kind: reconcile.LedgerGrant, Key: g.Key(cur.ID), Delta: added[i],
			Plan: g.Plan, PeriodStart: g.PeriodStart}
		moves = append(moves, m)
		if g.PeriodStart.Equal(cur.PeriodStart) {
			was.add(m, -1)
		}
	}
	var before *reconcile.AccountState
	if !cur.ObservedAt.IsZero() {
		st := was.state(cur)
		before = &st
	}
	next.ID = cur.ID
	return s.announce(ctx, tx, before, now.state(next), moves,
		reconcile.Why{Trigger: job.Trigger, Actor: reconcile.ActorOf(job), EventIDs: events, Events: n})
}

const changeColumns = `id, xid, payload::text`

func scanChange(r pgx.CollectableRow) (reconcile.FeedChange, error) {
	var c reconcile.FeedChange
	var xid int64
	var body string
	if err := r.Scan(&c.Cursor.ID, &xid, &body); err != nil {
		return c, err
	}
	c.Cursor.XID = uint64(xid)
	c.Body = []byte(body)
	if err := json.Unmarshal(c.Body, &c.AppChange); err != nil {
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
func (s *Store) Changes(ctx context.Context, after reconcile.ChangeCursor, limit int) ([]reconcile.FeedChange, error) {
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
func (s *Store) AccountChanges(ctx context.Context, accountID int64, limit int) ([]reconcile.FeedChange, error) {
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
