package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/billsync/billsync/reconcile"
)

// SweepLock takes the lease that lets one sweep of provider's account
// ("" the platform's own, else a Stripe Connect account's) run at a time
// across every replica, for the whole run: held ends if the lease is lost
// (see lease); a leader that dies stops renewing and the lease passes on
// within the store's lease TTL. err is reconcile.ErrLeaseHeld when another
// sweep holds it. release lets it go at once.
func (s *Store) SweepLock(ctx context.Context, provider, account string) (held context.Context, release func(), err error) {
	name := "sweep." + provider
	if account != "" {
		name += "." + account
	}
	return s.lease(ctx, name)
}

// SweepResumeWithin is how recent a dead run's heartbeat must be for the
// next sweep to resume it: a run stopped yesterday would skip every
// customer it covered then, so it is closed as failed and a new run starts.
const SweepResumeWithin = 6 * time.Hour

// StartSweep begins a run of kind (reconcile.RunSweep, RunImport) for
// provider's account ("" the platform's own), or resumes the newest one of
// the account still marked running, whatever its kind, whose heartbeat is
// within SweepResumeWithin. The caller holds SweepLock, so a running row
// is one whose sweeper died or was stopped (its lease ran out or was
// released). The account's other running rows are closed as failed.
func (s *Store) StartSweep(ctx context.Context, provider, account, kind string) (reconcile.SweepRun, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	run := reconcile.SweepRun{Provider: provider, Account: account, Kind: kind, Progress: -1}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var cursor *string
		err := tx.QueryRow(ctx, `
			UPDATE sweep_runs SET heartbeat_at = now()
			WHERE id = (SELECT max(id) FROM sweep_runs WHERE provider = $1 AND account = $3 AND status = 'running'
			            AND heartbeat_at > now() - make_interval(secs => $2))
			RETURNING id, kind, started_at, cursor, seen, changed, failed, coalesce(progress, -1)`, provider, SweepResumeWithin.Seconds(), account).
			Scan(&run.ID, &run.Kind, &run.StartedAt, &cursor, &run.Seen, &run.Healed, &run.Failed, &run.Progress)
		switch {
		case err == nil:
			run.Resumed = true
			if cursor != nil {
				run.Cursor = *cursor
			}
		case errors.Is(err, pgx.ErrNoRows):
			if err := tx.QueryRow(ctx, `INSERT INTO sweep_runs (provider, account, kind) VALUES ($1, $2, $3) RETURNING id, started_at`,
				provider, account, kind).
				Scan(&run.ID, &run.StartedAt); err != nil {
				return fmt.Errorf("insert run: %w", err)
			}
		default:
			return fmt.Errorf("find a run to resume: %w", err)
		}
		_, err = tx.Exec(ctx, `
			UPDATE sweep_runs SET status = 'failed', finished_at = now(), error = 'abandoned: its sweeper stopped and a later run did not resume it'
			WHERE provider = $1 AND account = $3 AND status = 'running' AND id <> $2`, provider, run.ID, account)
		if err != nil {
			return fmt.Errorf("close abandoned runs: %w", err)
		}
		_, err = tx.Exec(ctx, `
			DELETE FROM sweep_seen w USING sweep_runs r
			WHERE w.run_id = r.id AND r.provider = $1 AND r.account = $2 AND r.status <> 'running'`, provider, account)
		return err
	})
	if err != nil {
		return reconcile.SweepRun{}, fmt.Errorf("start %s sweep: %w", sweepName(provider, account), classify(err))
	}
	return run, nil
}

// SweepPage records a page the run has applied, in one transaction: its
// customers as resolved by the run (EnqueueUnswept leaves them out) and the
// run's heartbeat, counts and cursor (the last page it finished), so a run
// that dies resumes after that page. It returns how many customers the run
// has resolved, each counted once.
//
// Its commit does not wait for the disk (synchronous_commit off, for this
// transaction only): a crash can lose only the last such records, never a
// later one (the WAL is replayed in order, and every account write after
// it waits for the disk, flushing it too), and losing one only means its
// page is listed and applied again, which writes nothing where it was
// applied.
func (s *Store) SweepPage(ctx context.Context, run reconcile.SweepRun, customers []string) (seen int, err error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL synchronous_commit = off`); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `
			WITH fresh AS (
				INSERT INTO sweep_seen (run_id, customer_id) SELECT $1, unnest($2::text[])
				ON CONFLICT DO NOTHING RETURNING 1)
			UPDATE sweep_runs SET heartbeat_at = now(), seen = seen + (SELECT count(*) FROM fresh),
				changed = $3, failed = $4, cursor = NULLIF($5, ''), progress = $6
			WHERE id = $1
			RETURNING seen`, run.ID, customers, run.Healed, run.Failed, run.Cursor, progress(run)).Scan(&seen)
	})
	if err != nil {
		return 0, fmt.Errorf("record sweep %d page: %w", run.ID, classify(err))
	}
	return seen, nil
}

// progress is the run's progress for sweep_runs.progress: NULL when
// unknown, else within 0..1.
func progress(run reconcile.SweepRun) *float64 {
	if run.Progress < 0 {
		return nil
	}
	p := min(run.Progress, 1)
	return &p
}

// Imported reports whether a run of provider's account ("" the
// platform's own; an import, or a sweep: both list every customer) ever
// succeeded.
func (s *Store) Imported(ctx context.Context, provider, account string) (bool, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var done bool
	if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM sweep_runs WHERE provider = $1 AND account = $2 AND status = 'succeeded')`,
		provider, account).Scan(&done); err != nil {
		return false, fmt.Errorf("imported %s: %w", sweepName(provider, account), classify(err))
	}
	return done, nil
}

// sweepName names the sweep of provider's account in errors: the
// provider, or "stripe acct_X" for a connected account's.
func sweepName(provider, account string) string {
	if account == "" {
		return provider
	}
	return provider + " " + account
}

// FinishSweep ends the run: succeeded, or failed with failure's text when
// failure is not nil. The run's memory of customers goes with it.
func (s *Store) FinishSweep(ctx context.Context, run reconcile.SweepRun, failure error) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	status, text := "succeeded", ""
	if failure != nil {
		status, text = "failed", failure.Error()
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `
			UPDATE sweep_runs SET status = $2, error = NULLIF($3, ''), finished_at = now(), heartbeat_at = now(),
				seen = $4, changed = $5, failed = $6, cursor = NULLIF($7, '')
			WHERE id = $1`, run.ID, status, text, run.Seen, run.Healed, run.Failed, run.Cursor); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `DELETE FROM sweep_seen WHERE run_id = $1`, run.ID)
		return err
	})
	if err != nil {
		return fmt.Errorf("finish sweep %d: %w", run.ID, classify(err))
	}
	return nil
}

// EnqueueUnswept makes every account of provider held for the run's
// account ("" the platform's own customers, else a Stripe Connect
// account's: each is its own sweep's) that the run did not resolve due
// (trigger sweep: customers with no subscription, deleted or unreadable
// ones, or every account of a provider swept without a bulk listing), the
// first at the later of now and from (zero: now) and each next one pace
// later, and revives the dead queue rows of the same customers. A row
// already due sooner keeps its time. It returns how many rows it queued.
func (s *Store) EnqueueUnswept(ctx context.Context, runID int64, provider, account string, from time.Time, pace time.Duration) (int, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	// sweep_seen is filled in bulk during the run, so its statistics, taken
	// before, do not know the run: the planner expects one row for its id
	// and checks every account against all of the run's rows (a nested
	// loop: 6-10 s for 20,000 accounts in the sweep bench, past the store's
	// timeout long before a million). ANALYZE reads a sample (at most
	// 30,000 rows), and the anti-join below is planned as a hash join.
	if _, err := s.pool.Exec(ctx, `ANALYZE sweep_seen`); err != nil {
		return 0, fmt.Errorf("%s sweep %d: analyze sweep_seen: %w", provider, runID, classify(err))
	}
	of, arg := ofAccount("a.customer_id", "$5"), ofAccountParam(account)
	if account != "" {
		// A connected account's customers, found through its index
		// (accounts_connected), not by reading every account.
		of, arg = `a.customer_id LIKE 'acct\_%/%' AND split_part(a.customer_id, '/', 1) = $5`, account
	}
	var n int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, enqueueSQL(`
			SELECT a.provider, a.customer_id, (SELECT kind FROM sweep_runs WHERE id = $2), now(),
				greatest(now(), $4::timestamptz) + (row_number() OVER (ORDER BY a.id) - 1) * make_interval(secs => $3), `+noHints+`
			FROM accounts a
			WHERE a.provider = $1 AND `+of+`
			  AND NOT EXISTS (SELECT 1 FROM sweep_seen w WHERE w.run_id = $2 AND w.customer_id = a.customer_id)`),
			provider, runID, pace.Seconds(), nullTime(from), arg)
		if err != nil {
			return fmt.Errorf("enqueue unswept accounts: %w", err)
		}
		n = tag.RowsAffected()
		tag, err = tx.Exec(ctx, `
			UPDATE reconcile_queue SET status = 'pending', attempts = 0, due_at = now(), trigger = 'sweep'
			WHERE provider = $1 AND status = 'dead' AND `+ofAccount("customer_id", "$2"), provider, ofAccountParam(account))
		if err != nil {
			return fmt.Errorf("revive dead queue rows: %w", err)
		}
		n += tag.RowsAffected()
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("%s sweep %d: %w", provider, runID, classify(err))
	}
	s.notify(ctx)
	return int(n), nil
}

// EnqueueFound queues the customers a reconcile.Finder found (known or
// not) for the worker with trigger, in one statement (enqueueSQL, as the
// intake queues): the first due at the later of now and from (zero: now),
// each next one pace later, in the order found; a row already due sooner
// keeps its time; a dead row is revived. A customer found twice in found
// is queued once, with its first place. A found user reference is settled
// on the row as of now: newer than every event stored so far, older than
// the events that follow. It returns how many rows it queued and when the
// customer after them would be due.
func (s *Store) EnqueueFound(ctx context.Context, provider, trigger string, found []reconcile.Found, from time.Time,
	pace time.Duration) (int, time.Time, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	customers, refs := make([]string, len(found)), make([]string, len(found))
	for i, f := range found {
		customers[i], refs[i] = f.CustomerID, f.UserRef
	}
	var n int
	var next time.Time
	err := s.pool.QueryRow(ctx, `
		WITH queued AS (
			`+enqueueSQL(`
			SELECT DISTINCT ON (f.customer_id) $1::text, f.customer_id, $2::text, now(),
				greatest(now(), $5::timestamptz) + (f.n - 1) * make_interval(secs => $6),
				NULLIF(f.user_ref, ''), CASE WHEN f.user_ref <> '' THEN now() END, NULL::bigint,
				NULL::jsonb, NULL::timestamptz, NULL::bigint
			FROM unnest($3::text[], $4::text[]) WITH ORDINALITY AS f(customer_id, user_ref, n)
			WHERE f.customer_id <> ''
			ORDER BY f.customer_id, f.n`)+`
			RETURNING 1)
		SELECT (SELECT count(*) FROM queued), greatest(now(), $5::timestamptz) + cardinality($3::text[]) * make_interval(secs => $6)`,
		provider, trigger, customers, refs, nullTime(from), pace.Seconds()).Scan(&n, &next)
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("%s: queue %d customers found: %w", provider, len(found), classify(err))
	}
	if n > 0 {
		s.notify(ctx)
	}
	return n, next, nil
}

// ApplySweptPage applies a page of swept snapshots, deciders[i] deciding
// jobs[i] (customers of one provider, each once), in one transaction:
// Apply's decision and guarded writes for each, without queue rows (the
// sweep holds none; an event that arrives meanwhile keeps its own row and
// is reconciled by a worker). Each kind of write is one statement for the
// whole page, which is what lets an import write thousands of accounts a
// second. It writes only what changes something: an applied change
// (account, grants, log row, the customer's events received at or before
// observedAt, the app's change) or an ignored one (log row, events); an
// unchanged account is left untouched unless its period's grant is
// missing, and a stale snapshot writes nothing. Any failure (a guarded
// write that matches a newer observation, a keyed ledger row already
// written) rolls the whole page back. The outcomes are aligned with jobs.
func (s *Store) ApplySweptPage(ctx context.Context, jobs []reconcile.Job, observedAt time.Time,
	deciders []reconcile.Decider) ([]reconcile.SweptOutcome, error) {
	if err := checkPage(jobs, deciders); err != nil {
		return nil, err
	}
	if len(jobs) == 0 {
		return nil, nil
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var outs []reconcile.SweptOutcome
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) (err error) {
		outs, err = s.applySweptPage(ctx, tx, jobs, observedAt, deciders)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("apply swept page of %d %s customers (%s…): %w",
			len(jobs), jobs[0].Provider, jobs[0].CustomerID, classify(err))
	}
	return outs, nil
}

// checkPage refuses a page the statements cannot apply as one: deciders
// not aligned with jobs, several providers, a customer twice.
func checkPage(jobs []reconcile.Job, deciders []reconcile.Decider) error {
	if len(jobs) != len(deciders) {
		return fmt.Errorf("apply swept page: %d jobs, %d deciders", len(jobs), len(deciders))
	}
	seen := make(map[string]bool, len(jobs))
	for _, j := range jobs {
		if j.Provider != jobs[0].Provider {
			return fmt.Errorf("apply swept page: providers %s and %s in one page", jobs[0].Provider, j.Provider)
		}
		if seen[j.CustomerID] {
			return fmt.Errorf("apply swept page: customer %s/%s twice", j.Provider, j.CustomerID)
		}
		seen[j.CustomerID] = true
	}
	return nil
}

// applySweptPage is ApplySweptPage's transaction body: it locks and reads
// every account of the page, decides each once, and executes the Writes
// that change something, one statement per kind of row.
func (s *Store) applySweptPage(ctx context.Context, tx pgx.Tx, jobs []reconcile.Job, observedAt time.Time,
	deciders []reconcile.Decider) ([]reconcile.SweptOutcome, error) {
	provider := jobs[0].Provider
	customers, periods := make([]string, len(jobs)), make([]time.Time, len(jobs))
	for i, j := range jobs {
		customers[i], periods[i] = j.CustomerID, deciders[i].Period
	}
	sts, err := lockStates(ctx, tx, provider, customers, periods)
	if err != nil {
		return nil, err
	}
	outs := make([]reconcile.SweptOutcome, len(jobs))
	var ds []decided
	var at []int // the index in jobs of each of ds
	var previous []time.Time
	for i, st := range sts {
		w := deciders[i].Decide(st)
		outs[i].Outcome = w.Outcome
		// Stale, or unchanged with its period granted in full (an unchanged
		// account whose ledger moves is applied): nothing to write.
		if w.Outcome.Result == reconcile.ResultStale || w.Outcome.Result == reconcile.ResultUnchanged {
			continue
		}
		ds = append(ds, decided{job: jobs[i], accountID: st.Account.ID, w: w})
		at = append(at, i)
		previous = append(previous, st.Account.ObservedAt)
	}
	if len(ds) == 0 {
		return outs, nil
	}
	written := make([]string, len(ds))
	for k, d := range ds {
		written[k] = d.job.CustomerID
	}
	since, err := webhooksSince(ctx, tx, provider, written, previous)
	if err != nil {
		return nil, err
	}
	if err := s.writeDecided(ctx, tx, ds); err != nil {
		return nil, err
	}
	entries := make([]logEntry, len(ds))
	answers := make([]answer, len(ds))
	for k, d := range ds {
		entries[k] = logEntry{job: d.job, actor: d.w.Actor, out: d.w.Outcome}
		answers[k] = answer{customerID: d.job.CustomerID, status: d.w.EventStatus, outcome: d.w.Outcome.Text}
	}
	if err := writeLogs(ctx, tx, observedAt, entries); err != nil {
		return nil, err
	}
	marks, err := markEventsOf(ctx, tx, provider, observedAt, answers)
	if err != nil {
		return nil, err
	}
	var answered []string
	as := make([]announcement, len(ds))
	for k, d := range ds {
		outs[at[k]].Events, outs[at[k]].WebhookSince = marks[k].n, since[k]
		outs[at[k]].Answered = marks[k].answered
		if marks[k].n > 0 {
			answered = append(answered, d.job.CustomerID)
		}
		as[k] = announcement{change: d.w.Change, events: marks[k].ids, n: marks[k].n}
	}
	if err := refreshExpects(ctx, tx, provider, answered); err != nil {
		return nil, err
	}
	return outs, s.announce(ctx, tx, as)
}

// webhooksSince reports, for each of provider's customers, whether a
// webhook for it was stored after previous[i] (zero: ever), aligned with
// customers.
func webhooksSince(ctx context.Context, tx pgx.Tx, provider string, customers []string, previous []time.Time) ([]bool, error) {
	after := make([]*time.Time, len(previous))
	for i, t := range previous {
		after[i] = nullTime(t)
	}
	rows, _ := tx.Query(ctx, `
		SELECT p.n FROM unnest($2::text[], $3::timestamptz[]) WITH ORDINALITY AS p(customer_id, since, n)
		WHERE EXISTS (SELECT 1 FROM inbox_events e
			WHERE e.provider = $1 AND e.customer_id = p.customer_id AND (p.since IS NULL OR e.received_at > p.since))`,
		provider, customers, after)
	since := make([]bool, len(customers))
	var n int64
	if _, err := pgx.ForEachRow(rows, []any{&n}, func() error { since[n-1] = true; return nil }); err != nil {
		return nil, fmt.Errorf("find webhooks since: %w", err)
	}
	return since, nil
}

var _ reconcile.SweepStore = (*Store)(nil)

// SweepStats sums the platform's sweep_runs by provider and status (for
// /metrics): a Stripe Connect account's runs are its own (see
// ConnectSweepStats), so a thousand accounts' sweeps never hide that the
// platform's did not run.
func (s *Store) SweepStats(ctx context.Context) ([]reconcile.SweepStat, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, `
		SELECT provider, status, count(*), coalesce(sum(changed) FILTER (WHERE kind = 'sweep'), 0), coalesce(sum(seen), 0), max(finished_at)
		FROM sweep_runs WHERE account = '' GROUP BY provider, status ORDER BY provider, status`)
	if err != nil {
		return nil, fmt.Errorf("sweep stats: %w", classify(err))
	}
	stats, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (reconcile.SweepStat, error) {
		var st reconcile.SweepStat
		var last *time.Time
		err := r.Scan(&st.Provider, &st.Status, &st.Runs, &st.Healed, &st.Seen, &last)
		st.LastFinished = deref(last)
		return st, err
	})
	if err != nil {
		return nil, fmt.Errorf("sweep stats: %w", classify(err))
	}
	return stats, nil
}

// RunningImports returns the platform's imports running now (for
// /metrics: their progress and ETA, the same on every replica).
func (s *Store) RunningImports(ctx context.Context) ([]reconcile.SweepRecord, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, `
		SELECT `+sweepRecordColumns+`
		FROM sweep_runs WHERE kind = 'import' AND status = 'running' AND account = '' ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("running imports: %w", classify(err))
	}
	runs, err := pgx.CollectRows(rows, scanSweepRecord)
	if err != nil {
		return nil, fmt.Errorf("running imports: %w", classify(err))
	}
	return runs, nil
}

// SweepRuns returns the newest sweeps, newest first.
func (s *Store) SweepRuns(ctx context.Context, limit int) ([]reconcile.SweepRecord, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, `
		SELECT `+sweepRecordColumns+`
		FROM sweep_runs ORDER BY id DESC LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("sweep runs: %w", classify(err))
	}
	runs, err := pgx.CollectRows(rows, scanSweepRecord)
	if err != nil {
		return nil, fmt.Errorf("sweep runs: %w", classify(err))
	}
	return runs, nil
}

// sweepRecordColumns are what scanSweepRecord reads of a sweep_runs row.
const sweepRecordColumns = `id, provider, account, kind, status, started_at, heartbeat_at, finished_at, seen, changed, failed,
	coalesce(error, ''), progress::float8`

func scanSweepRecord(r pgx.CollectableRow) (reconcile.SweepRecord, error) {
	var run reconcile.SweepRecord
	err := r.Scan(&run.ID, &run.Provider, &run.Account, &run.Kind, &run.Status, &run.StartedAt, &run.HeartbeatAt, &run.FinishedAt,
		&run.Seen, &run.Healed, &run.Failed, &run.Error, &run.Progress)
	return run, err
}

// SweptAccounts returns the accounts provider holds for customers, by
// customer id, read without locks: the sweep decides from them which
// customers are already right, and applies the rest under the row lock.
func (s *Store) SweptAccounts(ctx context.Context, provider string, customers []string) (map[string]reconcile.Account, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, `SELECT `+accountColumns+` FROM accounts
		WHERE provider = $1 AND customer_id = ANY($2)`, provider, customers)
	if err != nil {
		return nil, fmt.Errorf("read swept accounts: %w", classify(err))
	}
	accounts, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (reconcile.Account, error) { return scanAccount(r) })
	if err != nil {
		return nil, fmt.Errorf("read swept accounts: %w", classify(err))
	}
	byCustomer := make(map[string]reconcile.Account, len(accounts))
	for _, a := range accounts {
		byCustomer[a.CustomerID] = a
	}
	return byCustomer, nil
}

// Granted returns what each grant's period already holds for its account
// (the sum writeGrant tops up from), aligned with grants.
func (s *Store) Granted(ctx context.Context, accountIDs []int64, grants []reconcile.Grant) ([]int64, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	starts := make([]time.Time, len(grants))
	meters := make([]string, len(grants))
	for i, g := range grants {
		starts[i], meters[i] = g.PeriodStart, g.Meter
	}
	rows, err := s.pool.Query(ctx, `
		SELECT coalesce((SELECT sum(l.delta) FROM ledger l
			WHERE l.account_id = p.account_id AND l.period_start = p.period_start AND l.kind = 'grant' AND l.meter = p.meter), 0)
		FROM unnest($1::bigint[], $2::timestamptz[], $3::text[]) WITH ORDINALITY AS p(account_id, period_start, meter, n)
		ORDER BY p.n`, accountIDs, starts, meters)
	if err != nil {
		return nil, fmt.Errorf("read grants: %w", classify(err))
	}
	granted, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("read grants: %w", classify(err))
	}
	return granted, nil
}
