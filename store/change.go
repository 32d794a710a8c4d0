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
// sequence, under the row lock the caller holds), one pending delivery
// per app endpoint, and the NOTIFY. A change that changes nothing the app
// sees writes nothing.
func (s *Store) announce(ctx context.Context, tx pgx.Tx, before *reconcile.AccountState, after reconcile.AccountState,
	ledger *reconcile.LedgerMove, why reconcile.Why) error {
	ch, ok := reconcile.ChangeOf(before, after, ledger, why)
	if !ok {
		return nil
	}
	if err := tx.QueryRow(ctx, `
		UPDATE accounts SET change_seq = change_seq + 1 WHERE id = $1
		RETURNING change_seq, nextval(pg_get_serial_sequence('account_changes', 'id')), now()`,
		ch.AccountID).Scan(&ch.Seq, &ch.ID, &ch.Time); err != nil {
		return fmt.Errorf("number change: %w", err)
	}
	ch.Time = ch.Time.UTC()
	body, err := json.Marshal(ch)
	if err != nil {
		return fmt.Errorf("encode change: %w", err)
	}
	if _, err := tx.Exec(ctx, `
		INSERT INTO account_changes (id, account_id, seq, created_at, payload) VALUES ($1, $2, $3, $4, $5)`,
		ch.ID, ch.AccountID, ch.Seq, ch.Time, body); err != nil {
		return fmt.Errorf("write change: %w", err)
	}
	if err := s.faults.AfterChangeWrite(); err != nil {
		return err
	}
	if len(s.endpoints) > 0 {
		if _, err := tx.Exec(ctx, `
			INSERT INTO app_deliveries (change_id, endpoint, account_id, seq)
			SELECT $1, e, $2, $3 FROM unnest($4::text[]) e`, ch.ID, ch.AccountID, ch.Seq, s.endpoints); err != nil {
			return fmt.Errorf("queue change deliveries: %w", err)
		}
	}
	note := `{"id":` + strconv.FormatInt(ch.ID, 10) + `,"account_id":` + strconv.FormatInt(ch.AccountID, 10) +
		`,"seq":` + strconv.FormatInt(ch.Seq, 10) + `}`
	if _, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, ChangesChannel, note); err != nil {
		return fmt.Errorf("notify change: %w", err)
	}
	return nil
}

// balances returns the account's ledger sums for two period starts (a
// zero start sums to 0).
func balances(ctx context.Context, tx pgx.Tx, accountID int64, a, b time.Time) (int64, int64, error) {
	var x, y int64
	err := tx.QueryRow(ctx, `
		SELECT coalesce(sum(delta) FILTER (WHERE period_start = $2), 0),
		       coalesce(sum(delta) FILTER (WHERE period_start = $3), 0)
		FROM ledger WHERE account_id = $1 AND meter = ''`, accountID, nullTime(a), nullTime(b)).Scan(&x, &y)
	if err != nil {
		return 0, 0, fmt.Errorf("read balances: %w", err)
	}
	return x, y, nil
}

// announceApply announces what a reconcile wrote: cur became next, and
// the grant (when granted > 0) added granted to next's period. The
// balances are read after the grant's write; the one before is what the
// ledger held for cur's period without the grant.
func (s *Store) announceApply(ctx context.Context, tx pgx.Tx, job reconcile.Job, cur, next reconcile.Account,
	grants []reconcile.Grant, added []int64, events []string, n int) error {
	balBefore, balAfter, err := balances(ctx, tx, cur.ID, cur.PeriodStart, next.PeriodStart)
	if err != nil {
		return err
	}
	// The change's ledger move and balance are the default meter's (the
	// plan's allowance); named meters' grants are not announced yet.
	var g *reconcile.Grant
	var granted int64
	for i := range grants {
		if grants[i].Meter == "" && i < len(added) {
			g, granted = &grants[i], added[i]
		}
	}
	var move *reconcile.LedgerMove
	if g != nil && granted > 0 {
		move = &reconcile.LedgerMove{Kind: reconcile.LedgerGrant, Key: g.Key(cur.ID), Delta: granted, Plan: g.Plan,
			PeriodStart: g.PeriodStart.UTC()}
		if g.PeriodStart.Equal(cur.PeriodStart) {
			balBefore -= granted
		}
	}
	var before *reconcile.AccountState
	if !cur.ObservedAt.IsZero() {
		before = &reconcile.AccountState{Account: cur, Balance: balBefore}
	}
	next.ID = cur.ID
	return s.announce(ctx, tx, before, reconcile.AccountState{Account: next, Balance: balAfter}, move,
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
// order: (writing transaction id, id). Only changes whose transaction is
// older than every transaction still in flight are shown: each of those
// has ended, so no change can later commit before the last one returned,
// and a reader that moves its cursor past a change never skips another.
// A change waits to be shown while any older transaction is open.
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
