package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
)

func runMigrate(ctx context.Context, args []string, stdout io.Writer, logger *slog.Logger) error {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: billsync migrate [flags]\n\nApplies pending migrations (each in its own transaction, under a transaction-scoped advisory lock) and exits.")
		fs.PrintDefaults()
	}
	var cfg config
	cfg.bindCommon(fs, os.Getenv)
	if err := fs.Parse(args); err != nil {
		return err
	}
	st, closeDB, err := openDatabase(ctx, cfg, logger)
	if err != nil {
		return err
	}
	defer closeDB()
	if err := prepareSchema(ctx, st, false, logger); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "schema is up to date")
	return nil
}
