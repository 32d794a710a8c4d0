package demo

import (
	"context"
	"crypto/rand"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/billsync/billsync/app"
	"github.com/billsync/billsync/providers/kinde"
	"github.com/billsync/billsync/providers/stripe"
	"github.com/billsync/billsync/reconcile"
)

// console is billsync as serve assembles it (package app) on the demo's
// store and client, with an admin token of its own: its handler serves
// the support console, its worker is the one the scenario drains, and its
// parts (worker, sweeps) run once the demo keeps serving.
type console struct {
	url, token string
	app        *app.App
	srv        *http.Server
	stop       func(context.Context) error // stops the parts Start started; nil before
}

// startConsole assembles billsync and serves its console (and the admin
// API) on addr.
func (d *Demo) startConsole(addr string, plans *reconcile.Plans) error {
	token := rand.Text()
	parts := app.Parts{Store: d.st, Plans: plans, Logger: d.logger}
	switch c := d.w.client().(type) {
	case *stripe.Client:
		parts.Stripe = c
	case *kinde.Client:
		parts.Kinde = c
	}
	a, err := app.New(context.Background(), app.Config{AdminToken: token, Workers: 2, WorkerLease: lease,
		KindeSweepPace: 100 * time.Millisecond, ShutdownTimeout: 10 * time.Second}, parts)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	c := &console{url: "http://" + ln.Addr().String() + "/admin/", token: token, app: a,
		srv: &http.Server{Handler: a.Handler(), ReadHeaderTimeout: 10 * time.Second}}
	go func() {
		if err := c.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			d.logger.Error("demo console stopped", slog.Any("error", err))
		}
	}()
	d.console, d.worker = c, a.Worker()
	return nil
}

// close stops the console and billsync's parts; a sweep started from the
// console before they ran is stopped too (Start on an ended context stops
// every part at once).
func (c *console) close() {
	c.srv.Close()
	if c.stop == nil {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		c.stop = c.app.Start(ctx)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = c.stop(ctx) // at exit: the leases run out on their own
}
