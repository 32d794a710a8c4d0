package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/user"
	"strings"

	"github.com/billsync/billsync/app"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store"
)

// support is what resync, replay and sweep share: the database, the
// configured providers' clients and plans, and a worker built as serve
// builds it, whose ReconcileNow takes the worker's own path.
type support struct {
	st        *store.Store
	providers app.Providers
	plans     *reconcile.Plans
	worker    *reconcile.Worker
	cfg       config
}

// openSupport opens the database serve uses and a worker on every
// configured provider (Stripe with STRIPE_API_KEY, Kinde with KINDE_DOMAIN
// and its M2M credentials). It never migrates: a support command run
// against a database a newer billsync has not migrated yet says so
// instead.
func openSupport(ctx context.Context, cfg config, logger *slog.Logger) (*support, func(), error) {
	key, err := secret(os.Getenv, "STRIPE_API_KEY")
	cfg.StripeAPIKey = key
	err = errors.Join(err, cfg.loadKinde(os.Getenv), cfg.validateKinde())
	// The connected accounts served, as serve reads them: a command that
	// resyncs or sweeps a connected account's customer reads on its behalf.
	connect, cerr := reconcile.ParseConnectPolicy(cfg.connectMode, cfg.connectAccounts)
	if cerr != nil {
		err = errors.Join(err, fmt.Errorf("-stripe-connect: %w", cerr))
	}
	cfg.StripeConnect = connect
	if err == nil && key == "" && !cfg.KindeOn() {
		err = errors.New("STRIPE_API_KEY is not set: billsync reads customers from the Stripe API (or set STRIPE_API_KEY_FILE; for Kinde set KINDE_DOMAIN, KINDE_CLIENT_ID and KINDE_CLIENT_SECRET)")
	}
	if err != nil {
		return nil, nil, fmt.Errorf("configuration: %w", err)
	}
	plans, err := loadPlans(cfg.PlansPath)
	if err != nil {
		return nil, nil, err
	}
	provs, err := app.NewProviders(cfg.Config, plans, logger, nil)
	if err != nil {
		return nil, nil, err
	}
	st, closeDB, err := openDatabase(ctx, cfg, logger)
	if err != nil {
		return nil, nil, err
	}
	pending, err := st.Pending(ctx)
	if err == nil && len(pending) > 0 {
		err = fmt.Errorf("migrations are pending (%s first): run 'billsync migrate' (or start serve, which applies them)", pending[0].Name)
	}
	if err != nil {
		closeDB()
		return nil, nil, err
	}
	w, err := reconcile.NewWorker(reconcile.WorkerConfig{Name: app.WorkerName(), Store: st,
		Providers: provs.List(), Plans: plans, Logger: logger, Concurrency: 1})
	if err != nil {
		closeDB()
		return nil, nil, err
	}
	stopSpending := func() {}
	if provs.Stripe != nil {
		// What a command reads counts toward the allocation like serve's
		// reads; it takes no share of the rates (it runs no worker).
		if _, stopSpending, err = app.SpendStripe(ctx, st, provs.Stripe, false, nil, logger); err != nil {
			closeDB()
			return nil, nil, err
		}
	}
	closeAll := func() { stopSpending(); closeDB() }
	return &support{st: st, providers: provs, plans: plans, worker: w, cfg: cfg}, closeAll, nil
}

// cliActor is the audit log's actor for a person at a terminal.
func cliActor() string {
	name := os.Getenv("USER")
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	return "cli:" + cmp.Or(name, "unknown")
}

// balance returns the account's balance, or -1 when it cannot be read (no
// account yet): the diff then shows no balance.
func (s *support) balance(ctx context.Context, accountID int64) int64 {
	if accountID == 0 {
		return -1
	}
	b, err := s.st.Balance(ctx, accountID)
	if err != nil {
		return -1
	}
	return b
}

// reconcileNow runs req and prints the before → after diff and the
// outcome in words.
func (s *support) reconcileNow(ctx context.Context, req reconcile.Request, stdout io.Writer) error {
	var before int64 = -1
	if a, err := s.st.Account(ctx, req.Provider, req.CustomerID); err == nil {
		before = s.balance(ctx, a.ID)
	}
	out, err := s.worker.ReconcileNow(ctx, req)
	if err != nil && out.Result == "" {
		return err
	}
	after := before
	if !req.DryRun {
		after = s.balance(ctx, out.AccountID)
	}
	printOutcome(stdout, req, out, before, after)
	return err
}

// printOutcome writes what a resync or replay did (or, dry, would do).
func printOutcome(w io.Writer, req reconcile.Request, out reconcile.Outcome, balanceBefore, balanceAfter int64) {
	verb := "reconciled"
	if req.DryRun {
		verb = "dry run (nothing written) for"
	}
	fmt.Fprintf(w, "%s %s customer %s", verb, req.Provider, req.CustomerID)
	if out.AccountID != 0 && !req.DryRun {
		fmt.Fprintf(w, " (account %d)", out.AccountID)
	}
	fmt.Fprintln(w)
	if out.Result != reconcile.ResultRetry && out.Result != reconcile.ResultDead && out.Result != reconcile.ResultIgnored {
		for _, d := range reconcile.Diff(out.Before, out.After) {
			diffLine(w, d.Field, d.Before, d.After)
		}
		if req.DryRun {
			fmt.Fprintf(w, "  %-8s %s now, a grant would add +%d\n", "balance", amount(balanceBefore), out.Granted)
		} else {
			diffLine(w, "balance", amount(balanceBefore), amount(balanceAfter))
		}
	}
	result := string(out.Result)
	if req.DryRun {
		result = "would be " + result
	}
	fmt.Fprintf(w, "outcome: %s: %s\n", result, out.Text)
	if out.Events > 0 {
		fmt.Fprintf(w, "events answered: %d\n", out.Events)
	}
}

func diffLine(w io.Writer, name, before, after string) {
	if before == after {
		fmt.Fprintf(w, "  %-8s %s (unchanged)\n", name, after)
		return
	}
	fmt.Fprintf(w, "  %-8s %s → %s\n", name, before, after)
}

func orDash(s string) string { return cmp.Or(s, "-") }

func amount(b int64) string {
	if b < 0 {
		return "-"
	}
	return fmt.Sprint(b)
}

// describeAccounts lists candidates of an ambiguous match, one a line.
func describeAccounts(accounts []reconcile.Account) string {
	var b strings.Builder
	for _, a := range accounts {
		fmt.Fprintf(&b, "\n  account %d: %s %s user=%s email=%s plan=%s", a.ID, a.Provider, a.CustomerID,
			orDash(a.UserRef), orDash(a.Email), orDash(a.Plan))
	}
	return b.String()
}
