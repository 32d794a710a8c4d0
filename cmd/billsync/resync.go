package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"

	"github.com/billsync/billsync/reconcile"
)

// errAmbiguous: a search matched more than one account; the message lists
// them so the person picks one by --customer or --account.
var errAmbiguous = errors.New("ambiguous")

func runResync(ctx context.Context, args []string, stdout io.Writer, logger *slog.Logger) error {
	fs := flag.NewFlagSet("resync", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), `usage: billsync resync (--customer ID | --account ID | --user REF | --email ADDRESS) [--dry-run] [flags]

Reconciles one customer now, as the worker would: reads the customer from
the provider's API, applies it, answers the customer's stored events (dead
ones included) and logs it with trigger resync and actor cli:<your user>.
Prints the before → after diff and the outcome. --dry-run shows the diff
and writes nothing. A provider failure leaves the customer queued for the
worker and exits non-zero. Configuration as for serve (DATABASE_URL,
STRIPE_API_KEY, STRIPE_API_URL, BILLSYNC_PLANS); migrations must be applied.`)
		fs.PrintDefaults()
	}
	var cfg config
	cfg.bindCommon(fs, os.Getenv)
	cfg.bindReconcile(fs, os.Getenv)
	var sel selector
	fs.StringVar(&sel.customer, "customer", "", "the provider's customer id (cus_…); works before billsync has an account for it")
	fs.Int64Var(&sel.account, "account", 0, "billsync's account id")
	fs.StringVar(&sel.user, "user", "", "the app's user reference")
	fs.StringVar(&sel.email, "email", "", "the customer's email (case-insensitive)")
	fs.StringVar(&sel.provider, "provider", "stripe", "the customer's provider")
	dryRun := fs.Bool("dry-run", false, "show what would change, write nothing")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := sel.validate(); err != nil || fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("%w: resync: %w", errUsage, cmp.Or(err, fmt.Errorf("unexpected argument %q", fs.Arg(0))))
	}
	sup, closeDB, err := openSupport(ctx, cfg, logger)
	if err != nil {
		return err
	}
	defer closeDB()
	customerID, err := sel.resolve(ctx, sup)
	if err != nil {
		return err
	}
	return sup.reconcileNow(ctx, reconcile.Request{Provider: sel.provider, CustomerID: customerID,
		Trigger: reconcile.TriggerResync, Actor: cliActor(), DryRun: *dryRun}, stdout)
}

// selector is how a person names one customer.
type selector struct {
	provider, customer, user, email string
	account                         int64
}

func (s selector) validate() error {
	n := 0
	for _, set := range []bool{s.customer != "", s.account != 0, s.user != "", s.email != ""} {
		if set {
			n++
		}
	}
	if n != 1 {
		return errors.New("name the customer with exactly one of --customer, --account, --user or --email")
	}
	return nil
}

// resolve returns the provider customer id the selector names: one
// account, or an error saying none or which several match.
func (s selector) resolve(ctx context.Context, sup *support) (string, error) {
	if s.customer != "" {
		return s.customer, nil
	}
	q, what := s.user, "user reference"
	match := func(a reconcile.Account) bool { return a.UserRef == s.user }
	switch {
	case s.account != 0:
		q, what = strconv.FormatInt(s.account, 10), "id"
		match = func(a reconcile.Account) bool { return a.ID == s.account }
	case s.email != "":
		q, what = s.email, "email"
		match = func(a reconcile.Account) bool { return strings.EqualFold(a.Email, s.email) }
	}
	found, err := sup.st.FindAccounts(ctx, q)
	if err != nil && !errors.Is(err, reconcile.ErrNotFound) {
		return "", err
	}
	var matches []reconcile.Account
	for _, a := range found {
		if match(a) && a.Provider == s.provider {
			matches = append(matches, a)
		}
	}
	switch len(matches) {
	case 0:
		return "", fmt.Errorf("no %s account with %s %q (a customer billsync has no account for yet: use --customer): %w",
			s.provider, what, q, reconcile.ErrNotFound)
	case 1:
		return matches[0].CustomerID, nil
	}
	return "", fmt.Errorf("%w: %d accounts have %s %q; pick one with --customer or --account:%s",
		errAmbiguous, len(matches), what, q, describeAccounts(matches))
}
