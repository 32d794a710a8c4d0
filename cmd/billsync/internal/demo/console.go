package demo

import (
	"context"
	"crypto/rand"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/server"
)

// console is the support console served next to the demo, with an admin
// token of its own, on the demo's worker and store.
type console struct {
	url, token string
	srv        *http.Server
	stopSweeps func() // stops a sweep started from the console, and waits for it
}

// startConsole serves the support console (and the admin API) on addr.
func (d *Demo) startConsole(addr string, plans *reconcile.Plans) error {
	var lister reconcile.Lister
	if l, ok := d.w.client().(reconcile.Lister); ok {
		lister = l
	}
	sweeper, err := reconcile.NewSweeper(reconcile.SweeperConfig{Store: d.st, Provider: d.w.provider(),
		Lister: lister, Pace: 100 * time.Millisecond, Plans: plans, Logger: d.logger})
	if err != nil {
		return err
	}
	sweeps, err := reconcile.NewSweepRunner(reconcile.SweepRunnerConfig{Sweepers: []*reconcile.Sweeper{sweeper}, Logger: d.logger})
	if err != nil {
		return err
	}
	token := rand.Text()
	h := server.New(server.Config{Logger: d.logger, Inbox: d.st, Ready: d.st.Ping,
		Admin: server.Admin{Token: token, Store: d.st, Reconciler: d.worker, Sweeps: sweeps, Changes: d.st}})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	ctx, stopSweeps := context.WithCancel(context.Background())
	sweepsDone := make(chan struct{})
	go func() { sweeps.Run(ctx); close(sweepsDone) }()
	c := &console{url: "http://" + ln.Addr().String() + "/admin/", token: token,
		srv:        &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second},
		stopSweeps: func() { stopSweeps(); <-sweepsDone }}
	go func() {
		if err := c.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			d.logger.Error("demo console stopped", slog.Any("error", err))
		}
	}()
	d.console = c
	return nil
}
