package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/billsync/billsync/reconcile"
)

const accountColumns = `id, provider, customer_id, coalesce(user_ref, ''), coalesce(email, ''), coalesce(plan, ''), coalesce(status, ''),
	coalesce(subscription_id, ''), period_start, period_end, cancel_at_period_end, observed_at, features::text, entitlements::text`

func scanAccount(row pgx.Row) (reconcile.Account, error) {
	var a reconcile.Account
	var start, end, observed *time.Time
	var features, ents string
	err := row.Scan(&a.ID, &a.Provider, &a.CustomerID, &a.UserRef, &a.Email, &a.Plan, &a.Status,
		&a.SubscriptionID, &start, &end, &a.CancelAtPeriodEnd, &observed, &features, &ents)
	a.PeriodStart, a.PeriodEnd, a.ObservedAt = deref(start), deref(end), deref(observed)
	if err == nil {
		err = errors.Join(unmarshalList(features, &a.Features), unmarshalList(ents, &a.Entitlements))
	}
	return a, err
}

// unmarshalList reads a jsonb list column, selected as text so that every
// query mode reads the same bytes; [] is nil, as the domain writes an empty
// list.
func unmarshalList[T any](s string, v *[]T) error {
	if err := json.Unmarshal([]byte(s), v); err != nil {
		return fmt.Errorf("read %T: %w", v, err)
	}
	if len(*v) == 0 {
		*v = nil
	}
	return nil
}

// marshalList writes a list for a jsonb column: nil is []. It is text, and
// the statement casts it (::jsonb): in the exec and simple_protocol query
// modes the server does not describe the statement first, so a []byte goes
// out as bytea ('\x5b…'), which is not JSON.
func marshalList[T any](v []T) string {
	if len(v) == 0 {
		return "[]"
	}
	b, _ := json.Marshal(v) // plain structs: cannot fail
	return string(b)
}

// Account returns the account of a provider's customer.
func (s *Store) Account(ctx context.Context, provider, customerID string) (reconcile.Account, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	a, err := scanAccount(s.pool.QueryRow(ctx,
		`SELECT `+accountColumns+` FROM accounts WHERE provider = $1 AND customer_id = $2`, provider, customerID))
	if err != nil {
		return reconcile.Account{}, fmt.Errorf("account %s/%s: %w", provider, customerID, classify(err))
	}
	return a, nil
}

// Balance returns the sum of the account's ledger rows for its current
// period.
func (s *Store) Balance(ctx context.Context, accountID int64) (int64, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var b int64
	err := s.pool.QueryRow(ctx, `
		SELECT coalesce(sum(l.delta), 0) FROM accounts a
		JOIN ledger l ON l.account_id = a.id AND l.period_start = a.period_start AND l.meter = ''
		WHERE a.id = $1`, accountID).Scan(&b)
	if err != nil {
		return 0, fmt.Errorf("balance of account %d: %w", accountID, classify(err))
	}
	return b, nil
}

// Apply runs one reconcile's writes in one transaction (see
// reconcile.Store): the domain decides, the store executes.
func (s *Store) Apply(ctx context.Context, job reconcile.Job, observedAt time.Time, d reconcile.Decider) (reconcile.Outcome, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var out reconcile.Outcome
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) (err error) {
		out, err = s.apply(ctx, tx, job, observedAt, d)
		return err
	})
	if err != nil {
		return reconcile.Outcome{}, fmt.Errorf("apply %s/%s: %w", job.Provider, job.CustomerID, classify(err))
	}
	return out, nil
}

// errPreview rolls a preview's transaction back.
var errPreview = errors.New("preview: roll back")

// Preview runs exactly Apply's transaction and rolls it back: the outcome
// is what Apply would do now (a dry run), and nothing is written. A new
// customer's account is created and rolled back too, so its id is not
// kept (a sequence value is used up; sequences are not data).
func (s *Store) Preview(ctx context.Context, job reconcile.Job, observedAt time.Time, d reconcile.Decider) (reconcile.Outcome, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var out reconcile.Outcome
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		if out, err = s.apply(ctx, tx, job, observedAt, d); err != nil {
			return err
		}
		return errPreview
	})
	if !errors.Is(err, errPreview) {
		return reconcile.Outcome{}, fmt.Errorf("preview %s/%s: %w", job.Provider, job.CustomerID, classify(err))
	}
	return out, nil
}

// apply is Apply's transaction body: it reads the locked state, decides
// once (d.Decide), and executes the Write it gets back.
func (s *Store) apply(ctx context.Context, tx pgx.Tx, job reconcile.Job, observedAt time.Time, d reconcile.Decider) (reconcile.Outcome, error) {
	if err := lockJob(ctx, tx, job); err != nil {
		return reconcile.Outcome{}, err
	}
	sts, err := lockStates(ctx, tx, job.Provider, []string{job.CustomerID}, []time.Time{d.Period})
	if err != nil {
		return reconcile.Outcome{}, err
	}
	w := d.Decide(sts[0])
	if err := s.writeDecided(ctx, tx, []decided{{job: job, accountID: sts[0].Account.ID, w: w}}); err != nil {
		return reconcile.Outcome{}, err
	}
	events, err := finish(ctx, tx, job, observedAt, w.Actor, w.EventStatus, &w.Outcome)
	if err != nil {
		return w.Outcome, err
	}
	return w.Outcome, s.announce(ctx, tx, []announcement{{w.Change, events, w.Outcome.Events}})
}

// lockStates returns what reconciles of provider's customers are decided
// on, aligned with customers (each named once): each customer's account,
// locked (and created if new), and its ledger in its own period and in
// periods[i]. The ledgers are read after the locks are held, by a
// statement of their own: under READ COMMITTED a statement that waited
// for a lock would read in the snapshot it started with, missing the rows
// the holder wrote.
func lockStates(ctx context.Context, tx pgx.Tx, provider string, customers []string, periods []time.Time) ([]reconcile.Locked, error) {
	accounts, err := lockAccounts(ctx, tx, provider, customers)
	if err != nil {
		return nil, err
	}
	ledgers, err := readLedgers(ctx, tx, accounts, periods)
	if err != nil {
		return nil, err
	}
	sts := make([]reconcile.Locked, len(accounts))
	for i, a := range accounts {
		sts[i] = reconcile.Locked{Account: a, Ledger: ledgers[i]}
	}
	return sts, nil
}

// decided is one account's decision as the store writes it: its job, the
// account the decision was taken on (locked), and the Write formed.
type decided struct {
	job       reconcile.Job
	accountID int64
	w         reconcile.Write
}

// writeDecided writes the decisions' accounts (guarded) and ledger rows,
// each kind in one statement.
func (s *Store) writeDecided(ctx context.Context, tx pgx.Tx, ds []decided) error {
	var accounts []reconcile.Account
	var owners []int64
	var rows []reconcile.LedgerRow
	for _, d := range ds {
		if d.w.Account != nil {
			accounts = append(accounts, *d.w.Account)
		}
		for _, r := range d.w.Ledger {
			owners = append(owners, d.accountID)
			rows = append(rows, r)
		}
	}
	if len(accounts) > 0 {
		if err := writeAccounts(ctx, tx, accounts); err != nil {
			return err
		}
		if err := s.faults.AfterAccountWrite(); err != nil {
			return err
		}
	}
	return writeLedger(ctx, tx, owners, rows)
}

// Ignore records a permanent failure for the job's customer.
func (s *Store) Ignore(ctx context.Context, job reconcile.Job, observedAt time.Time, out reconcile.Outcome) (reconcile.Outcome, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := lockJob(ctx, tx, job); err != nil {
			return err
		}
		_, err := finish(ctx, tx, job, observedAt, reconcile.ActorOf(job), out.EventStatus(), &out)
		return err
	})
	if err != nil {
		return reconcile.Outcome{}, fmt.Errorf("ignore %s/%s: %w", job.Provider, job.CustomerID, classify(err))
	}
	return out, nil
}

// finish writes the log row (recorded as actor's), gives the customer's
// events status and completes the job: the common tail of Apply and
// Ignore. It returns the provider ids of the first reconcile.MaxWhyEvents
// events it answered.
func finish(ctx context.Context, tx pgx.Tx, job reconcile.Job, observedAt time.Time, actor string, status reconcile.EventStatus,
	out *reconcile.Outcome) ([]string, error) {
	if err := writeLog(ctx, tx, job, actor, observedAt, *out); err != nil {
		return nil, err
	}
	m, err := markEvents(ctx, tx, job, observedAt, status, out.Text)
	if err != nil {
		return nil, err
	}
	out.Events, out.Answered = m.n, m.answered
	return m.ids, finishJob(ctx, tx, job, observedAt)
}

// Retry records a failed attempt: the job runs again after delay, or,
// when out says dead, stays visible as dead with its pending events until
// a sweep, resync or new webhook revives it.
func (s *Store) Retry(ctx context.Context, job reconcile.Job, observedAt time.Time, out reconcile.Outcome, delay time.Duration) (reconcile.Outcome, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	status := queuePending
	if out.Result == reconcile.ResultDead {
		status = queueDead
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `
			UPDATE reconcile_queue
			SET attempts = attempts + 1, due_at = now() + make_interval(secs => $2), status = $3,
			    last_error = $4, locked_by = NULL, locked_until = NULL
			WHERE id = $1`, job.ID, delay.Seconds(), status, out.Text); err != nil {
			return fmt.Errorf("reschedule job: %w", err)
		}
		if err := writeLog(ctx, tx, job, reconcile.ActorOf(job), observedAt, out); err != nil {
			return err
		}
		if status != queueDead {
			return nil
		}
		tag, err := tx.Exec(ctx, `
			UPDATE inbox_events SET status = $3, outcome = $4, processed_at = now()
			WHERE provider = $1 AND customer_id = $2 AND status = $5`,
			job.Provider, job.CustomerID, reconcile.EventDead, out.Text, reconcile.EventPending)
		if err != nil {
			return err
		}
		out.Events = int(tag.RowsAffected())
		// No event is pending now: none expects anything.
		_, err = tx.Exec(ctx, `UPDATE reconcile_queue SET expect = NULL, expect_at = NULL, expect_event = NULL WHERE id = $1`, job.ID)
		return err
	})
	if err != nil {
		return reconcile.Outcome{}, fmt.Errorf("retry %s/%s: %w", job.Provider, job.CustomerID, classify(err))
	}
	return out, nil
}

// lockJob locks the job's queue row first thing in a reconcile's
// transaction. An intake statement that is storing a new event for this
// customer holds that row until it commits, so waiting here makes its event
// visible to markEvents; one that comes later waits for this commit and
// then queues the customer again. Without it, an event committed between
// this transaction's statements could be left pending with no queue row.
func lockJob(ctx context.Context, tx pgx.Tx, job reconcile.Job) error {
	if _, err := tx.Exec(ctx, `SELECT 1 FROM reconcile_queue WHERE id = $1 FOR UPDATE`, job.ID); err != nil {
		return fmt.Errorf("lock job: %w", err)
	}
	return nil
}

// lockAccounts returns provider's customers' account rows (each customer
// named once), locked for this transaction and aligned with customers,
// creating those that are new. New rows are created in customer order
// and every row is locked in id order, so two transactions locking
// overlapping sets wait for each other instead of deadlocking; a worker
// locks a single account (after its queue row, which this never waits
// for).
func lockAccounts(ctx context.Context, tx pgx.Tx, provider string, customers []string) ([]reconcile.Account, error) {
	if _, err := tx.Exec(ctx, `
		INSERT INTO accounts (provider, customer_id) SELECT $1, c FROM unnest($2::text[]) AS c ORDER BY c
		ON CONFLICT (provider, customer_id) DO NOTHING`, provider, customers); err != nil {
		return nil, fmt.Errorf("create accounts: %w", err)
	}
	rows, _ := tx.Query(ctx, `SELECT `+accountColumns+` FROM accounts
		WHERE provider = $1 AND customer_id = ANY($2::text[]) ORDER BY id FOR UPDATE`, provider, customers)
	locked, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (reconcile.Account, error) { return scanAccount(r) })
	if err != nil {
		return nil, fmt.Errorf("lock accounts: %w", err)
	}
	byCustomer := make(map[string]reconcile.Account, len(locked))
	for _, a := range locked {
		byCustomer[a.CustomerID] = a
	}
	accounts := make([]reconcile.Account, len(customers))
	for i, c := range customers {
		a, ok := byCustomer[c]
		if !ok {
			return nil, fmt.Errorf("lock account %s/%s: created, yet not found", provider, c)
		}
		accounts[i] = a
	}
	return accounts, nil
}

// errStaleWrite means a guarded write found a newer snapshot applied:
// impossible while the row lock is held, so it aborts the transaction.
var errStaleWrite = errors.New("guarded account write matched no row")

// writeAccounts writes the accounts' states (each account once) in one
// statement, each guarded so that only a later snapshot can overwrite an
// earlier one.
func writeAccounts(ctx context.Context, tx pgx.Tx, accounts []reconcile.Account) error {
	n := len(accounts)
	ids, observed := make([]int64, n), make([]time.Time, n)
	userRefs, plans, statuses, subs, emails := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	starts, ends := make([]*time.Time, n), make([]*time.Time, n)
	cancels := make([]bool, n)
	features, ents := make([]string, n), make([]string, n)
	for i, a := range accounts {
		ids[i], observed[i] = a.ID, a.ObservedAt
		userRefs[i], plans[i], statuses[i], subs[i], emails[i] = a.UserRef, a.Plan, a.Status, a.SubscriptionID, a.Email
		starts[i], ends[i], cancels[i] = nullTime(a.PeriodStart), nullTime(a.PeriodEnd), a.CancelAtPeriodEnd
		features[i], ents[i] = marshalList(a.Features), marshalList(a.Entitlements)
	}
	tag, err := tx.Exec(ctx, `
		UPDATE accounts a SET user_ref = NULLIF(v.user_ref, ''), plan = v.plan, status = NULLIF(v.status, ''),
			subscription_id = NULLIF(v.subscription_id, ''), period_start = v.period_start, period_end = v.period_end,
			cancel_at_period_end = v.cancel_at_period_end, observed_at = v.observed_at, email = NULLIF(v.email, ''),
			features = v.features::jsonb, entitlements = v.entitlements::jsonb, updated_at = now()
		FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::text[], $6::timestamptz[], $7::timestamptz[],
			$8::bool[], $9::timestamptz[], $10::text[], $11::text[], $12::text[])
			AS v(id, user_ref, plan, status, subscription_id, period_start, period_end,
			     cancel_at_period_end, observed_at, email, features, entitlements)
		WHERE a.id = v.id AND (a.observed_at IS NULL OR a.observed_at < v.observed_at)`,
		ids, userRefs, plans, statuses, subs, starts, ends, cancels, observed, emails, features, ents)
	if err != nil {
		return fmt.Errorf("write accounts: %w", err)
	}
	if tag.RowsAffected() != int64(n) {
		return fmt.Errorf("%d of %d accounts: %w", int64(n)-tag.RowsAffected(), n, errStaleWrite)
	}
	return nil
}

// errLedgerDisagrees means a keyed ledger row was already written
// although the ledger read under the lock said it was due: impossible
// while grants only add (a key names its allowance, and once written the
// period holds at least that), so it aborts the transaction rather than
// announce a move that was not made.
var errLedgerDisagrees = errors.New("ledger row already written, though the period's ledger said it was due")

// writeLedger inserts the decided ledger rows (rows[i] of account
// owners[i]) in one statement, each under its key: at most once each,
// whatever repeats.
func writeLedger(ctx context.Context, tx pgx.Tx, owners []int64, rows []reconcile.LedgerRow) error {
	if len(rows) == 0 {
		return nil
	}
	n := len(rows)
	keys, kinds, plans, notes, meters := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	starts, ends := make([]time.Time, n), make([]*time.Time, n)
	deltas := make([]int64, n)
	for i, r := range rows {
		keys[i], kinds[i], plans[i], notes[i], meters[i] = r.Key, r.Kind, r.Plan, r.Note, r.Meter
		starts[i], ends[i], deltas[i] = r.PeriodStart, nullTime(r.PeriodEnd), r.Delta
	}
	written, err := tx.Query(ctx, `
		INSERT INTO ledger (account_id, entry_key, kind, period_start, period_end, plan, delta, note, meter)
		SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::timestamptz[], $5::timestamptz[],
			$6::text[], $7::bigint[], $8::text[], $9::text[])
		ON CONFLICT (entry_key) DO NOTHING
		RETURNING entry_key`, owners, keys, kinds, starts, ends, plans, deltas, notes, meters)
	if err != nil {
		return fmt.Errorf("write ledger: %w", err)
	}
	got, err := pgx.CollectRows(written, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("write ledger: %w", err)
	}
	if len(got) == n {
		return nil
	}
	inserted := make(map[string]bool, len(got))
	for _, k := range got {
		inserted[k] = true
	}
	for _, k := range keys {
		if !inserted[k] {
			return fmt.Errorf("write ledger %s: %w", k, errLedgerDisagrees)
		}
	}
	return fmt.Errorf("write ledger: a key repeats: %w", errLedgerDisagrees)
}

// accountJSON is an account as reconcile_log keeps it (before/after).
type accountJSON struct {
	Plan              string     `json:"plan,omitempty"`
	Status            string     `json:"status,omitempty"`
	SubscriptionID    string     `json:"subscription_id,omitempty"`
	PeriodStart       *time.Time `json:"period_start,omitempty"`
	PeriodEnd         *time.Time `json:"period_end,omitempty"`
	CancelAtPeriodEnd bool       `json:"cancel_at_period_end,omitempty"`
	UserRef           string     `json:"user_ref,omitempty"`
	Email             string     `json:"email,omitempty"`
	// Features: what the account may do, with sources (none before
	// features, and then absent, as before).
	Features []reconcile.Feature `json:"features,omitempty"`
}

// accountDoc is a's reconcile_log document, text for a ::jsonb cast (see
// marshalList); nil (NULL) when a was never observed.
func accountDoc(a reconcile.Account) *string {
	if a.ObservedAt.IsZero() && a.Plan == "" {
		return nil
	}
	b, _ := json.Marshal(accountJSON{a.Plan, a.Status, a.SubscriptionID, nullTime(a.PeriodStart),
		nullTime(a.PeriodEnd), a.CancelAtPeriodEnd, a.UserRef, a.Email, a.Features}) // plain struct: cannot fail
	doc := string(b)
	return &doc
}

func writeLog(ctx context.Context, tx pgx.Tx, job reconcile.Job, actor string, observedAt time.Time, out reconcile.Outcome) error {
	return writeLogs(ctx, tx, observedAt, []logEntry{{job, actor, out}})
}

// logEntry is one reconcile_log row: the job's outcome, recorded as
// actor's.
type logEntry struct {
	job   reconcile.Job
	actor string
	out   reconcile.Outcome
}

// writeLogs writes the entries' reconcile_log rows, observed at
// observedAt, in one statement and in their order.
func writeLogs(ctx context.Context, tx pgx.Tx, observedAt time.Time, entries []logEntry) error {
	n := len(entries)
	accountIDs := make([]*int64, n)
	providers, customers, triggers, actors := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	results, texts := make([]string, n), make([]string, n)
	befores, afters := make([]*string, n), make([]*string, n)
	for i, e := range entries {
		if e.out.AccountID != 0 {
			accountIDs[i] = &e.out.AccountID
		}
		providers[i], customers[i], triggers[i], actors[i] = e.job.Provider, e.job.CustomerID, e.job.Trigger, e.actor
		results[i], texts[i] = string(e.out.Result), e.out.Text
		befores[i], afters[i] = accountDoc(e.out.Before), accountDoc(e.out.After)
	}
	// observed_at is unknown when the failure came before the clock was
	// read: the row then says when it was written.
	_, err := tx.Exec(ctx, `
		INSERT INTO reconcile_log (account_id, provider, customer_id, trigger, actor, observed_at, result, outcome, before, after)
		SELECT v.account_id, v.provider, v.customer_id, v.trigger, v.actor, coalesce($1::timestamptz, clock_timestamp()),
			v.result, v.outcome, v.before::jsonb, v.after::jsonb
		FROM unnest($2::bigint[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[], $10::text[])
			WITH ORDINALITY AS v(account_id, provider, customer_id, trigger, actor, result, outcome, before, after, n)
		ORDER BY v.n`,
		nullTime(observedAt), accountIDs, providers, customers, triggers, actors, results, texts, befores, afters)
	if err != nil {
		return fmt.Errorf("write reconcile log: %w", err)
	}
	return nil
}

// FindAccounts returns the accounts q names, oldest first (at most 50): by
// account id (digits), provider customer id, app user reference, or email
// (case-insensitive), or a Stripe Connect account id (its customers). None
// is reconcile.ErrNotFound.
func (s *Store) FindAccounts(ctx context.Context, q string) ([]reconcile.Account, error) {
	q = strings.TrimSpace(q)
	if q == "" {
		return nil, fmt.Errorf("find accounts: empty query: %w", reconcile.ErrNotFound)
	}
	if strings.ContainsRune(q, 0) || !utf8.ValidString(q) {
		return nil, fmt.Errorf("%w: search for UTF-8 text without NUL bytes: billsync stores no other", reconcile.ErrInvalid)
	}
	var id *int64
	if n, err := strconv.ParseInt(q, 10, 64); err == nil {
		id = &n
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, `SELECT `+accountColumns+` FROM accounts
		WHERE id = $1 OR customer_id = $2 OR user_ref = $2 OR lower(email) = lower($2)
			OR ($3 AND customer_id >= $2 || '/' AND customer_id < $2 || '0')
		ORDER BY id LIMIT 50`, id, q, reconcile.IsConnectedAccount(q))
	if err != nil {
		return nil, fmt.Errorf("find accounts %q: %w", q, classify(err))
	}
	accounts, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (reconcile.Account, error) { return scanAccount(r) })
	if err != nil {
		return nil, fmt.Errorf("find accounts %q: %w", q, classify(err))
	}
	if len(accounts) == 0 {
		return nil, fmt.Errorf("no account matches %q: %w", q, reconcile.ErrNotFound)
	}
	return accounts, nil
}
