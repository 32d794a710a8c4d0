package testenv

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"

	kindemock "github.com/billsync/billsync/mocks/kinde"
	"github.com/billsync/billsync/providers/kinde"
	"github.com/billsync/billsync/server"
)

// Plan codes the example plans file maps (reconcile.ExamplePlans).
const (
	FreePlan = "customer_free_plan"
	ProPlan  = "customer_pro_plan"
	TeamPlan = "customer_team_plan"
)

// KindeOptions configures the Kinde side of an Env.
type KindeOptions struct {
	// Fake configures the fake Kinde.
	Fake kindemock.Options
	// Client configures billsync's client; Domain and the M2M credentials
	// are the fake's. Verifier configures the intake's verifier; Domain is
	// the fake's. Their Loggers default to the Env's.
	Client   kinde.Config
	Verifier kinde.VerifierConfig
}

// KindeSide is the Kinde side of an Env.
type KindeSide struct {
	Fake     *kindemock.Server
	Client   *kinde.Client   // billsync's client on the fake (the Env's Client)
	Verifier *kinde.Verifier // the intake's verifier; nil without an intake

	opts KindeOptions
	url  string
	stop context.CancelFunc // ends the verifier's key-set cache
}

func newKindeSide(opts KindeOptions, logger *slog.Logger) (*KindeSide, error) {
	fake, err := kindemock.New(opts.Fake)
	if err != nil {
		return nil, err
	}
	opts.Client.Logger = cmp.Or(opts.Client.Logger, logger)
	opts.Verifier.Logger = cmp.Or(opts.Verifier.Logger, logger)
	return &KindeSide{Fake: fake, opts: opts}, nil
}

func (s *KindeSide) start(e *Env) (err error) {
	s.url = e.URL
	if s.Client, err = s.NewClient(s.opts.Client); err != nil {
		return err
	}
	e.Client = s.Client
	return nil
}

func (s *KindeSide) register(_ *Env, endpoint string) (server.Verifier, error) {
	vcfg := s.opts.Verifier
	vcfg.Domain = s.url
	ctx, stop := context.WithCancel(context.Background())
	s.stop = stop
	var err error
	if s.Verifier, err = kinde.NewVerifier(ctx, vcfg); err != nil {
		return nil, err
	}
	s.Fake.AddWebhookEndpoint(endpoint + "/webhooks/kinde")
	return s.Verifier, nil
}

func (s *KindeSide) close() {
	if s.stop != nil {
		s.stop()
	}
}

// NewClient returns billsync's Kinde client on the fake with cfg's
// settings (Domain and the M2M credentials are the fake's).
func (s *KindeSide) NewClient(cfg kinde.Config) (*kinde.Client, error) {
	cfg.Domain, cfg.ClientID, cfg.ClientSecret = s.url, kindemock.DefaultClientID, kindemock.DefaultClientSecret
	return kinde.NewClient(cfg)
}

// FastKinde fills cfg's unset rate limit and retry waits with test speeds,
// as Fast does for an Env's clients.
func FastKinde(cfg kinde.Config) kinde.Config {
	fast(&cfg.RateLimit, &cfg.Burst, &cfg.RetryWaitMin, &cfg.RetryWaitMax)
	return cfg
}

// SetPlan makes plan (a Kinde plan code) the customer's one open-ended
// agreement at the fake; an empty plan leaves the customer with none.
func (s *KindeSide) SetPlan(customer, plan string) {
	if plan == "" {
		s.Fake.SetAgreements(customer, nil)
		return
	}
	s.Fake.SetAgreements(customer, []kindemock.Agreement{{PlanCode: plan}})
}

// Send sends a webhook of type typ about customer, as Kinde would.
func (s *KindeSide) Send(typ, customer string) (kindemock.Sent, error) {
	sent, err := s.Fake.SendEvent(kindemock.Event{Type: typ, CustomerID: customer})
	if err != nil {
		return sent, fmt.Errorf("send %s for %s: %w", typ, customer, err)
	}
	return sent, nil
}
