package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/billsync/billsync/store"
	"github.com/billsync/billsync/store/pgembed"
)

// databaseURL returns DATABASE_URL, or starts (or shares) the embedded
// cluster under cfg.DataDir when it is unset and returns its URL. It logs
// where the database is. stop ends this process's use of the cluster,
// stopping it only when pgembed says this process may: never while another
// billsync process uses it (a no-op for DATABASE_URL).
func databaseURL(ctx context.Context, cfg config, logger *slog.Logger) (url string, stop func(), err error) {
	if cfg.DatabaseURL != "" {
		return cfg.DatabaseURL, func() {}, nil
	}
	cluster, err := pgembed.Start(ctx, pgembed.Config{DataDir: cfg.DataDir, Logger: logger,
		FallbackDir: fallbackDataDir(cfg.DataDir), Adopt: cfg.ownsCluster})
	if err != nil {
		return "", nil, fmt.Errorf("DATABASE_URL is unset and the embedded PostgreSQL did not start: %w", err)
	}
	url = cluster.URL("billsync")
	logger.Info("database: embedded PostgreSQL", slog.String("data_dir", cluster.DataDir()), slog.String("at", describeDatabase(url)))
	return url, func() {
		// The caller's ctx is usually done by now (SIGTERM): stop on a fresh one.
		stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := cluster.Stop(stopCtx); err != nil {
			logger.Error("stop embedded PostgreSQL", slog.Any("error", err))
		}
	}, nil
}

// describeDatabase says where url leads, for the logs: the socket or host
// and port, the database and the user. Never the password, nor any other
// parameter: url is only parsed, never quoted.
func describeDatabase(url string) string {
	cfg, err := pgconn.ParseConfig(url)
	if err != nil {
		return "(unparsable connection string)"
	}
	where := "host=" + cfg.Host + " port=" + strconv.Itoa(int(cfg.Port))
	if strings.HasPrefix(cfg.Host, "/") {
		where = "socket=" + filepath.Join(cfg.Host, ".s.PGSQL."+strconv.Itoa(int(cfg.Port)))
	}
	return where + " database=" + cfg.Database + " user=" + cfg.User
}

// openDatabase connects to DATABASE_URL, or starts the embedded cluster
// under cfg.DataDir when it is unset. close releases both.
func openDatabase(ctx context.Context, cfg config, logger *slog.Logger) (st *store.Store, close func(), err error) {
	if cfg.poolingErr != nil {
		return nil, nil, cfg.poolingErr
	}
	url, stopCluster, err := databaseURL(ctx, cfg, logger)
	if err != nil {
		return nil, nil, err
	}
	st, err = store.Open(ctx, url, store.Options{Timeout: cfg.DBTimeout, MaxConns: store.ServePoolSize(url),
		Pooling: cfg.Pooling, DirectURL: cfg.DatabaseDirectURL, Schema: cfg.DatabaseSchema})
	if err != nil {
		stopCluster()
		return nil, nil, err
	}
	logConnection(logger, st.Connection())
	return st, func() { st.Close(); stopCluster() }, nil
}

// prepareSchema applies pending migrations, or with refuse set, fails when
// any are pending.
func prepareSchema(ctx context.Context, st *store.Store, refuse bool, logger *slog.Logger) error {
	if refuse {
		pending, err := st.Pending(ctx)
		if err != nil {
			return err
		}
		if len(pending) > 0 {
			return errors.New("migrations are pending and -no-migrate is set: run 'billsync migrate' first")
		}
		return nil
	}
	applied, err := st.Migrate(ctx)
	for _, name := range applied {
		logger.Info("migration applied", slog.String("name", name))
	}
	return err
}

// fallbackDataDir is where the default data directory's cluster goes when
// billsync runs as root in a checkout PostgreSQL's user cannot reach (under
// /root, say), so the README's run command works anywhere. An explicitly
// chosen directory gets no fallback: the operator said where the data goes.
func fallbackDataDir(dataDir string) string {
	if dataDir != defaultDataDir {
		return ""
	}
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256([]byte(abs))
	base := "/var/tmp"
	if _, err := os.Stat(base); err != nil {
		base = os.TempDir()
	}
	return filepath.Join(base, "billsync-"+hex.EncodeToString(sum[:6]))
}

// logConnection says, once at start, what the store found: where the
// database is (never the password), the pooling and how it was learned,
// the query mode, and whether LISTEN wake-ups work or the store polls.
func logConnection(logger *slog.Logger, c store.Connection) {
	mode := c.QueryMode
	if c.QueryModeChosen {
		mode += " (chosen for the transaction pooler; the URL named none)"
	}
	listen := "off: polling every " + store.PollWithoutListen.String() +
		" (a transaction pooler drops LISTEN; set BILLSYNC_DATABASE_DIRECT_URL for wake-ups at commit)"
	if c.Listen {
		listen = "on, via the " + c.ListenVia
	}
	logger.Info("database", slog.String("host", c.Host), slog.String("database", c.Database), slog.String("user", c.User),
		slog.String("pooling", string(c.Pooling)), slog.String("pooling_from", c.Detected),
		slog.String("query_mode", mode), slog.String("listen", listen))
}
