package kinde

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	retryablehttp "github.com/hashicorp/go-retryablehttp"
	"golang.org/x/time/rate"

	"github.com/billsync/billsync/providers/internal/attempt"
	"github.com/billsync/billsync/reconcile"
)

// Config configures a Client. Zero values take the defaults.
type Config struct {
	// Domain is the Kinde business domain (https://acme.kinde.com);
	// required. The token endpoint, the API and its audience hang off it.
	Domain string
	// ClientID and ClientSecret are a machine-to-machine application's,
	// with the read:billing_agreements scope (and read:users,
	// read:organizations for FindPage: sweeps and imports); required,
	// never logged.
	ClientID, ClientSecret string
	// RateLimit is requests per second shared by every call, retries
	// included; default 10. Burst defaults to 1.
	RateLimit float64
	Burst     int
	// Timeout bounds each HTTP attempt; default 10 s. RetryMax retries
	// network errors, 429 and 5xx (default 4; negative = none), waiting
	// RetryWaitMin..RetryWaitMax (200 ms..5 s), or exactly RateLimit-Reset
	// on a 429 that carries it.
	Timeout                    time.Duration
	RetryMax                   int
	RetryWaitMin, RetryWaitMax time.Duration
	// PageSize is agreements (and entitlements, users, organisations)
	// per page; default 100 (Kinde allows 500 agreements).
	PageSize int
	// Entitlements: Fetch also reads the customer's billing entitlements
	// (GET /api/v1/billing/entitlements, scope read:billing_entitlements),
	// a source of the account's features. Off by default.
	Entitlements bool
	// OnAttempt, when set, sees every attempt's status ("200", "429", …,
	// "error"): metrics.
	OnAttempt func(status string)
	Logger    *slog.Logger
	Now       func() time.Time // default time.Now
}

// Client reads customers' billing agreements from Kinde's Management API.
// It is safe for concurrent use.
type Client struct {
	domain   string
	cfg      Config
	http     *http.Client
	log      *slog.Logger
	now      func() time.Time
	pageSize int

	latency reconcile.LatencyMeter // Fetch's, less its waits for the rate limit

	mu     sync.Mutex
	token  string
	expiry time.Time
}

// NewClient validates cfg and returns a Client. It requests no token yet.
func NewClient(cfg Config) (*Client, error) {
	return newClient(cfg, attempt.NetTransport())
}

// newClient is NewClient sending each attempt through base: tests put an
// in-process transport there to run the client on a fake clock.
func newClient(cfg Config, base http.RoundTripper) (*Client, error) {
	domain, err := domainURL(cfg.Domain)
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	if strings.TrimSpace(cfg.ClientID) == "" || strings.TrimSpace(cfg.ClientSecret) == "" {
		errs = append(errs, errors.New("kinde: the M2M client id and secret are required"))
	}
	if cfg.RateLimit < 0 || cfg.Burst < 0 || cfg.PageSize < 0 || cfg.PageSize > 500 {
		errs = append(errs, errors.New("kinde: rate limit and burst must not be negative, page size 0-500"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	cfg.RateLimit = cmp.Or(cfg.RateLimit, 10)
	cfg.Burst = cmp.Or(cfg.Burst, 1)
	cfg.Timeout = cmp.Or(cfg.Timeout, 10*time.Second)
	switch {
	case cfg.RetryMax == 0:
		cfg.RetryMax = 4
	case cfg.RetryMax < 0:
		cfg.RetryMax = 0
	}
	cfg.RetryWaitMin = cmp.Or(cfg.RetryWaitMin, 200*time.Millisecond)
	cfg.RetryWaitMax = cmp.Or(cfg.RetryWaitMax, 5*time.Second)
	log := cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler)).With("provider", Provider)
	rc := retryablehttp.NewClient()
	limiter := rate.NewLimiter(rate.Limit(cfg.RateLimit), cfg.Burst)
	// Finding customers (FindPage) takes at most half of the rate: the
	// worker's fetches keep the rest.
	finding := rate.NewLimiter(rate.Limit(cfg.RateLimit/2), 1)
	c := &Client{domain: domain, cfg: cfg, log: log, now: cfg.Now, pageSize: cmp.Or(cfg.PageSize, 100)}
	rc.HTTPClient = &http.Client{Transport: &attempt.Transport{
		Base: base,
		Limits: func(req *http.Request) []attempt.Limit {
			if findPaths[req.URL.Path] {
				return []attempt.Limit{{Name: "kinde-find", Limiter: finding}, {Name: "kinde", Limiter: limiter}}
			}
			return []attempt.Limit{{Name: "kinde", Limiter: limiter}}
		},
		Timeout:   cfg.Timeout,
		OnAttempt: cfg.OnAttempt,
	}}
	rc.RetryMax, rc.RetryWaitMin, rc.RetryWaitMax = cfg.RetryMax, cfg.RetryWaitMin, cfg.RetryWaitMax
	rc.Backoff = backoff
	rc.ErrorHandler = retryablehttp.PassthroughErrorHandler
	rc.Logger = nil
	c.http = rc.StandardClient()
	if c.now == nil {
		c.now = time.Now
	}
	return c, nil
}

// findPaths are the requests of FindPage, which wait for the finding's
// share of the rate too.
var findPaths = map[string]bool{"/api/v1/users": true, "/api/v1/organizations": true, "/api/v1/organization": true}

// Name returns "kinde".
func (c *Client) Name() string { return Provider }

// Budget returns the client's rate limit and its recent fetches' latency
// (token requests included): the worker keeps as many Kinde fetches in
// flight as they call for.
func (c *Client) Budget() reconcile.Budget {
	return reconcile.Budget{Rate: c.cfg.RateLimit, Latency: c.latency.Latency()}
}

// backoff waits exactly RateLimit-Reset (seconds) on a 429 that carries it,
// else retryablehttp's default (Retry-After, or doubling).
func backoff(lo, hi time.Duration, attempt int, resp *http.Response) time.Duration {
	if resp != nil && resp.StatusCode == http.StatusTooManyRequests {
		if s, err := strconv.Atoi(strings.TrimSpace(resp.Header.Get("RateLimit-Reset"))); err == nil && s >= 0 {
			return time.Duration(s) * time.Second
		}
	}
	return retryablehttp.DefaultBackoff(lo, hi, attempt, resp)
}

// accessToken returns a cached M2M token, renewed a minute (or a tenth of
// its life) before it expires; renew forces a new one.
func (c *Client) accessToken(ctx context.Context, renew bool) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !renew && c.token != "" && c.now().Before(c.expiry) {
		return c.token, nil
	}
	form := url.Values{
		"grant_type": {"client_credentials"}, "client_id": {c.cfg.ClientID},
		"client_secret": {c.cfg.ClientSecret}, "audience": {c.domain + "/api"},
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.domain+"/oauth2/token", strings.NewReader(form.Encode()))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	var tok struct {
		AccessToken string `json:"access_token"`
		ExpiresIn   int64  `json:"expires_in"`
	}
	status, err := c.do(req, &tok)
	switch {
	case err != nil:
		return "", fmt.Errorf("kinde token: %w", err)
	case status == http.StatusUnauthorized || status == http.StatusBadRequest || status == http.StatusForbidden:
		// Wrong credentials are an outage to fix, not a reason to ignore
		// events: transient, retried, alerted on by the dead count.
		return "", fmt.Errorf("kinde token: %d: the M2M application's id, secret or audience was refused", status)
	case status != http.StatusOK || tok.AccessToken == "":
		return "", fmt.Errorf("kinde token: answer %d without an access token", status)
	}
	life := time.Duration(max(tok.ExpiresIn, 1)) * time.Second
	c.token, c.expiry = tok.AccessToken, c.now().Add(life-min(time.Minute, life/10))
	return c.token, nil
}

// errNotFound is a 404: transient to every caller but the finder, for
// which it means an organisation deleted since it was listed.
var errNotFound = errors.New("answer 404")

// get requests path under the API with the bearer token, renewing it once
// on a 401, and decodes a 200's JSON into v.
func (c *Client) get(ctx context.Context, path string, query url.Values, v any) error {
	for renew := range 2 {
		token, err := c.accessToken(ctx, renew == 1)
		if err != nil {
			return err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.domain+path+"?"+query.Encode(), nil)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Accept", "application/json")
		status, err := c.do(req, v)
		switch {
		case err != nil:
			return fmt.Errorf("kinde GET %s: %w", path, err)
		case status == http.StatusOK:
			return nil
		case status == http.StatusUnauthorized && renew == 0:
			c.log.DebugContext(ctx, "kinde token refused; renewing it once")
			continue
		case status == http.StatusBadRequest:
			return reconcile.Permanent("kinde GET %s: 400: the request was refused", path)
		case status == http.StatusNotFound:
			return fmt.Errorf("kinde GET %s: %w", path, errNotFound)
		}
		return fmt.Errorf("kinde GET %s: answer %d", path, status)
	}
	return fmt.Errorf("kinde GET %s: refused even with a new token", path)
}

// do sends req and decodes a 200's JSON body into v; other bodies are
// read and dropped (at most 1 MiB of either).
func (c *Client) do(req *http.Request, v any) (int, error) {
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body := io.LimitReader(resp.Body, 1<<20)
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, body)
		return resp.StatusCode, nil
	}
	if err := json.NewDecoder(body).Decode(v); err != nil {
		return resp.StatusCode, reconcile.Permanent("kinde %s: unreadable JSON: %v", req.URL.Path, err)
	}
	return resp.StatusCode, nil
}

// agreement is one billing agreement as billsync reads it. Kinde does not
// document the object's shape beyond id and plan_code and varies it, so
// each field is read by a lenient helper and may be absent.
type agreement struct {
	ID          string
	PlanCode    string
	Created     time.Time
	Expires     time.Time // zero: open-ended
	PeriodStart time.Time
	PeriodEnd   time.Time
}

// agreements returns every agreement of the customer, following has_more.
func (c *Client) agreements(ctx context.Context, customerID string) ([]agreement, error) {
	var all []agreement
	after := ""
	for {
		q := url.Values{"customer_id": {customerID}, "page_size": {strconv.Itoa(c.pageSize)}}
		if after != "" {
			q.Set("starting_after", after)
		}
		var page struct {
			HasMore    bool              `json:"has_more"`
			Agreements []json.RawMessage `json:"agreements"`
		}
		if err := c.get(ctx, "/api/v1/billing/agreements", q, &page); err != nil {
			return nil, err
		}
		for _, raw := range page.Agreements {
			a, err := readAgreement(raw)
			if err != nil {
				return nil, fmt.Errorf("kinde customer %s: %w", customerID, err)
			}
			all = append(all, a)
		}
		if !page.HasMore || len(page.Agreements) == 0 {
			return all, nil
		}
		after = all[len(all)-1].ID
	}
}

// readAgreement reads one agreement: id and plan code are required, the
// dates are read from the names seen in Kinde's payloads.
func readAgreement(raw json.RawMessage) (agreement, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return agreement{}, reconcile.Permanent("kinde agreement is not a JSON object")
	}
	a := agreement{ID: text(m, "id"), PlanCode: text(m, "plan_code", "plan")}
	if a.ID == "" || a.PlanCode == "" {
		return agreement{}, reconcile.Permanent("kinde agreement without id or plan_code")
	}
	a.Created = when(m, "created_on", "subscribed_on", "created_at")
	a.Expires = when(m, "expires_on", "expires_at", "ended_on")
	a.PeriodStart = when(m, "current_period_start", "period_start")
	a.PeriodEnd = when(m, "current_period_end", "period_end")
	return a, nil
}

// text returns the first of names holding a non-empty string.
func text(m map[string]json.RawMessage, names ...string) string {
	for _, n := range names {
		var s string
		if json.Unmarshal(m[n], &s) == nil && s != "" {
			return s
		}
	}
	return ""
}

// when returns the first of names holding a time: an RFC 3339 string (in
// any form parseTime reads), a date (2006-01-02) or Unix seconds; zero
// when none does.
func when(m map[string]json.RawMessage, names ...string) time.Time {
	for _, n := range names {
		var s string
		if json.Unmarshal(m[n], &s) == nil {
			if t, ok := parseTime(s); ok && reconcile.SaneEventTime(t) {
				return t
			}
			if t, err := time.Parse(time.DateOnly, s); err == nil && reconcile.SaneEventTime(t) {
				return t
			}
		}
		var sec int64
		if json.Unmarshal(m[n], &sec) == nil && sec > 0 {
			if t := time.Unix(sec, 0).UTC(); reconcile.SaneEventTime(t) {
				return t
			}
		}
	}
	return time.Time{}
}
