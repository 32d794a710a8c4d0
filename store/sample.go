package store

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/billsync/billsync/reconcile"
)

// SampleLock takes the lease that lets one sampler of provider run at a
// time across every replica (see SweepLock).
func (s *Store) SampleLock(ctx context.Context, provider string) (held context.Context, release func(), err error) {
	return s.lease(ctx, "sample."+provider)
}

// The sample's picks (docs/correctness.md#which-accounts).
const (
	// sampleRecentChanges is how many of the newest account changes the
	// recent half picks among (a backward scan of account_changes' primary
	// key), within sampleRecentWindow.
	sampleRecentChanges = 10_000
	sampleRecentWindow  = "1 day"
	// sampleDraws bounds the random ids one uniform statement probes, and
	// sampleTries the statements a pick makes.
	sampleDraws = 10_000
	sampleTries = 6
)

// PickSample picks n of provider's accounts: recent of them among the
// accounts changed within the last day (of the newest
// sampleRecentChanges changes), each likelier the more recent its last
// change (weight 1 ÷ (its age + 1 min), drawn without replacement), and
// the rest uniformly: random ids between the provider's least and
// greatest, kept when an account of the provider has that id (rejection
// sampling: every account equally likely, whatever the gaps in the ids).
// A provider with n accounts or fewer gets them all. Fewer than n come
// back only when the draws run out (ids far sparser than the accounts).
func (s *Store) PickSample(ctx context.Context, provider string, n, recent int) ([]reconcile.SampleAccount, error) {
	if n <= 0 {
		return nil, nil
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	scan := func(r pgx.CollectableRow) (reconcile.SampleAccount, error) {
		var a reconcile.SampleAccount
		err := r.Scan(&a.ID, &a.CustomerID)
		return a, err
	}
	// A small base is sampled whole: a dozen accounts are all read every
	// round.
	rows, _ := s.pool.Query(ctx, `SELECT id, customer_id FROM accounts WHERE provider = $1 ORDER BY id LIMIT $2`, provider, n+1)
	all, err := pgx.CollectRows(rows, scan)
	if err != nil {
		return nil, fmt.Errorf("pick the sample: %w", classify(err))
	}
	if len(all) <= n {
		return all, nil
	}
	var picked []reconcile.SampleAccount
	if recent > 0 {
		rows, _ := s.pool.Query(ctx, `
			SELECT a.id, a.customer_id
			FROM (SELECT account_id, max(created_at) AS at
			      FROM (SELECT account_id, created_at FROM account_changes ORDER BY id DESC LIMIT $3) c
			      WHERE created_at > now() - interval '`+sampleRecentWindow+`'
			      GROUP BY account_id) r
			JOIN accounts a ON a.id = r.account_id AND a.provider = $1
			ORDER BY -ln(1 - random()) * (extract(epoch FROM now() - r.at) + 60)
			LIMIT $2`, provider, min(recent, n), sampleRecentChanges)
		if picked, err = pgx.CollectRows(rows, scan); err != nil {
			return nil, fmt.Errorf("pick the sample's recent accounts: %w", classify(err))
		}
	}
	seen := make(map[int64]bool, n)
	for _, a := range picked {
		seen[a.ID] = true
	}
	var lo, hi int64
	if err := s.pool.QueryRow(ctx, `SELECT min(id), max(id) FROM accounts WHERE provider = $1`, provider).Scan(&lo, &hi); err != nil {
		return nil, fmt.Errorf("pick the sample: %w", classify(err))
	}
	density := 1.0 // accounts per id, learnt from the draws
	for try := 0; try < sampleTries && len(picked) < n; try++ {
		need := n - len(picked)
		draws := min(sampleDraws, int(math.Ceil(2*float64(need)/density))+1)
		ids := make([]int64, draws)
		for i := range ids {
			ids[i] = lo + rand.Int64N(hi-lo+1)
		}
		rows, _ := s.pool.Query(ctx, `
			SELECT a.id, a.customer_id FROM unnest($2::bigint[]) WITH ORDINALITY AS d (id, i)
			JOIN accounts a ON a.id = d.id AND a.provider = $1 ORDER BY d.i`, provider, ids)
		found, err := pgx.CollectRows(rows, scan)
		if err != nil {
			return nil, fmt.Errorf("pick the sample's uniform accounts: %w", classify(err))
		}
		density = max(float64(len(found)), 0.5) / float64(draws)
		for _, a := range found {
			if len(picked) < n && !seen[a.ID] {
				seen[a.ID] = true
				picked = append(picked, a)
			}
		}
	}
	return picked, nil
}

// RecordSamples stores samples and queues each drifted account a
// reconcile can heal (every class but missing) with trigger sample, in
// one transaction; the workers are woken.
func (s *Store) RecordSamples(ctx context.Context, samples []reconcile.Sample) error {
	if len(samples) == 0 {
		return nil
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var providers, customers []string
	var classes []*string
	var accounts []int64
	var drifted []bool
	queued := 0
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		for _, sm := range samples {
			providers, customers, accounts, drifted = append(providers, sm.Provider), append(customers, sm.CustomerID),
				append(accounts, sm.AccountID), append(drifted, sm.Drifted)
			var class *string
			if sm.Drifted {
				class = &sm.Class
			}
			classes = append(classes, class)
			if sm.Drifted && sm.Class != reconcile.SampleClassMissing {
				if err := enqueue(ctx, tx, sm.Provider, sm.CustomerID, reconcile.TriggerSample); err != nil {
					return err
				}
				queued++
			}
		}
		_, err := tx.Exec(ctx, `
			INSERT INTO samples (provider, customer_id, account_id, drifted, class)
			SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::boolean[], $5::text[])`,
			providers, customers, accounts, drifted, classes)
		return err
	})
	if err != nil {
		return fmt.Errorf("record samples: %w", classify(err))
	}
	if queued > 0 {
		s.notify(ctx)
	}
	return nil
}

// DriftedSamples returns the last limit drifted samples, newest first.
func (s *Store) DriftedSamples(ctx context.Context, limit int) ([]reconcile.DriftedSample, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, _ := s.pool.Query(ctx, `
		SELECT provider, customer_id, account_id, class, sampled_at FROM samples
		WHERE drifted ORDER BY id DESC LIMIT $1`, limit)
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (reconcile.DriftedSample, error) {
		d := reconcile.DriftedSample{Sample: reconcile.Sample{Drifted: true}}
		err := r.Scan(&d.Provider, &d.CustomerID, &d.AccountID, &d.Class, &d.SampledAt)
		return d, err
	})
	if err != nil {
		return nil, fmt.Errorf("drifted samples: %w", classify(err))
	}
	return out, nil
}

// SampleWindows counts the samples of each window (reconcile.SampleWindows)
// back from now, and the drifted among them, in one scan of the longest.
func (s *Store) SampleWindows(ctx context.Context, windows []time.Duration) ([]reconcile.SampleWindow, error) {
	if len(windows) == 0 {
		return nil, nil
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	secs := make([]float64, len(windows))
	for i, w := range windows {
		secs[i] = w.Seconds()
	}
	rows, err := s.pool.Query(ctx, `
		SELECT w, count(sm.id) FILTER (WHERE sm.sampled_at > now() - make_interval(secs => w)),
			count(sm.id) FILTER (WHERE sm.drifted AND sm.sampled_at > now() - make_interval(secs => w))
		FROM unnest($1::float8[]) w
		LEFT JOIN samples sm ON sm.sampled_at > now() - make_interval(secs => (SELECT max(x) FROM unnest($1::float8[]) x))
		GROUP BY w ORDER BY w`, secs)
	if err != nil {
		return nil, fmt.Errorf("sample windows: %w", classify(err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (reconcile.SampleWindow, error) {
		var w reconcile.SampleWindow
		var sec float64
		err := r.Scan(&sec, &w.Sampled, &w.Drifted)
		w.Window = time.Duration(sec * float64(time.Second))
		return w, err
	})
	if err != nil {
		return nil, fmt.Errorf("sample windows: %w", classify(err))
	}
	return out, nil
}
