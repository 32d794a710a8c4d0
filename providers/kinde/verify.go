package kinde

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/lestrrat-go/jwx/v2/jwa"
	"github.com/lestrrat-go/jwx/v2/jwk"
	"github.com/lestrrat-go/jwx/v2/jws"
	"golang.org/x/time/rate"

	"github.com/billsync/billsync/reconcile"
)

// VerifierConfig configures a Verifier. Zero values take the defaults.
type VerifierConfig struct {
	// Domain is the Kinde business domain, e.g. https://acme.kinde.com;
	// required. Its key set is at Domain/.well-known/jwks.
	Domain string
	// ReplayWindow is how old a token's signed timestamp may be; default
	// 72 h, longer than Kinde's 36 h of retries, so genuine retries pass.
	ReplayWindow time.Duration
	// RefetchInterval spaces the key-set refetches that tokens with an
	// unknown key id force (a rotation); default 30 s. A flood of unknown
	// ids costs at most one fetch per interval.
	RefetchInterval time.Duration
	// RefreshInterval is how often the key set is refreshed regardless;
	// default 1 h.
	RefreshInterval time.Duration
	// HTTPClient fetches the key set; default a client with a 10 s timeout
	// (the cache's own fetches have no deadline otherwise).
	HTTPClient *http.Client
	Logger     *slog.Logger     // default discards
	Now        func() time.Time // default time.Now
}

// DefaultReplayWindow is the default ReplayWindow.
const DefaultReplayWindow = 72 * time.Hour

// maxFutureSkew is how far in the future a token's timestamp may be
// (clocks differ); further is refused like a token too old.
const maxFutureSkew = 5 * time.Minute

// Verifier checks Kinde webhook deliveries: the body is a JWT signed RS256
// by a key of the domain's key set. It is safe for concurrent use.
type Verifier struct {
	jwksURL string
	cache   *jwk.Cache
	window  time.Duration
	now     func() time.Time
	log     *slog.Logger

	refetchMu sync.Mutex // one forced refetch at a time
	refetch   *rate.Limiter
}

// NewVerifier returns a Verifier whose key-set cache lives as long as ctx.
// It fetches nothing yet: serve starts even when Kinde cannot be reached,
// and the first delivery that needs the keys fetches them.
func NewVerifier(ctx context.Context, cfg VerifierConfig) (*Verifier, error) {
	domain, err := domainURL(cfg.Domain)
	if err != nil {
		return nil, err
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{Timeout: 10 * time.Second}
	}
	v := &Verifier{
		jwksURL: domain + "/.well-known/jwks",
		cache:   jwk.NewCache(ctx),
		window:  cmp.Or(cfg.ReplayWindow, DefaultReplayWindow),
		now:     cfg.Now,
		log:     cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler)),
		refetch: rate.NewLimiter(rate.Every(cmp.Or(cfg.RefetchInterval, 30*time.Second)), 1),
	}
	if cfg.Now == nil {
		v.now = time.Now
	}
	err = v.cache.Register(v.jwksURL, jwk.WithHTTPClient(hc),
		jwk.WithRefreshInterval(cmp.Or(cfg.RefreshInterval, time.Hour)))
	if err != nil {
		return nil, fmt.Errorf("kinde: register key set %s: %w", v.jwksURL, err)
	}
	return v, nil
}

// domainURL checks a Kinde domain and returns it without a trailing slash.
func domainURL(domain string) (string, error) {
	domain = strings.TrimRight(strings.TrimSpace(domain), "/")
	u, err := url.Parse(domain)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || (u.Path != "" && u.Path != "/") {
		return "", fmt.Errorf("kinde: domain %q is not a URL like https://yourbusiness.kinde.com", domain)
	}
	return domain, nil
}

// Provider returns "kinde".
func (v *Verifier) Provider() string { return Provider }

// Verify checks the delivery's token and reads the event from its claims.
// A token refused on its face (not a JWT, alg other than RS256, no key id)
// is ErrBadSignature without any key fetch. A key set that cannot be
// fetched is ErrUnavailable (503: Kinde retries), never a 200. Errors wrap
// one of those two.
func (v *Verifier) Verify(header http.Header, body []byte) (reconcile.Delivery, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	token := bytes.TrimSpace(body)
	kid, err := unverifiedKeyID(token)
	if err != nil {
		return reconcile.Delivery{}, fmt.Errorf("%w: %w", reconcile.ErrBadSignature, err)
	}
	key, err := v.key(ctx, kid)
	if err != nil {
		return reconcile.Delivery{}, err
	}
	claims, err := jws.Verify(token, jws.WithKey(jwa.RS256, key))
	if err != nil {
		return reconcile.Delivery{}, fmt.Errorf("%w: kinde token signature: %w", reconcile.ErrBadSignature, err)
	}
	ev, err := parseClaims(claims, header.Get("webhook-id"), v.now(), v.window)
	if err != nil {
		return reconcile.Delivery{}, fmt.Errorf("%w: %w", reconcile.ErrBadSignature, err)
	}
	ev.Payload = body
	return reconcile.Delivery{Event: ev, DeliveryID: storableOrEmpty(header.Get("webhook-id"))}, nil
}

// unverifiedKeyID reads the token's protected header and refuses, before
// any key is looked up, what can never be valid: anything but a compact JWS
// with one RS256 signature and a key id. (An HMAC token keyed with the
// public key, alg none, RS384 and PS256 all end here.)
func unverifiedKeyID(token []byte) (string, error) {
	if bytes.Count(token, []byte(".")) != 2 {
		return "", errors.New("body is not a compact JWT (want three dot-separated parts)")
	}
	msg, err := jws.Parse(token)
	if err != nil {
		return "", fmt.Errorf("kinde token: %w", err)
	}
	sigs := msg.Signatures()
	if len(sigs) != 1 {
		return "", fmt.Errorf("kinde token has %d signatures, want 1", len(sigs))
	}
	h := sigs[0].ProtectedHeaders()
	if alg := h.Algorithm(); alg != jwa.RS256 {
		return "", fmt.Errorf("kinde token alg %q refused: only RS256 is accepted", alg)
	}
	if h.KeyID() == "" {
		return "", errors.New("kinde token has no kid")
	}
	return h.KeyID(), nil
}

// key returns the RS256 public key with id kid. An id the cached set lacks
// forces one refetch (a key rotation), at most one per RefetchInterval
// however many such tokens arrive.
func (v *Verifier) key(ctx context.Context, kid string) (jwk.Key, error) {
	var key jwk.Key
	var ok bool
	set, err := v.cache.Get(ctx, v.jwksURL)
	if err == nil {
		key, ok = set.LookupKeyID(kid)
	}
	if !ok {
		// A set never fetched (Kinde was down) is fetched again the same
		// way, within the same limit.
		if key, ok, err = v.refetchFor(ctx, kid); err != nil {
			return nil, err
		}
	}
	if !ok {
		return nil, fmt.Errorf("%w: no key with kid %q in the kinde key set", reconcile.ErrBadSignature, kid)
	}
	if key.KeyType() != jwa.RSA {
		return nil, fmt.Errorf("%w: kinde key %q is %s, not RSA", reconcile.ErrBadSignature, kid, key.KeyType())
	}
	if alg := key.Algorithm(); alg != nil && alg.String() != "" && alg != jwa.RS256 {
		return nil, fmt.Errorf("%w: kinde key %q is for %s, not RS256", reconcile.ErrBadSignature, kid, alg)
	}
	if use := key.KeyUsage(); use != "" && use != string(jwk.ForSignature) {
		return nil, fmt.Errorf("%w: kinde key %q is for %q, not signatures", reconcile.ErrBadSignature, kid, use)
	}
	return key, nil
}

func (v *Verifier) refetchFor(ctx context.Context, kid string) (jwk.Key, bool, error) {
	v.refetchMu.Lock()
	defer v.refetchMu.Unlock()
	// Another delivery may have refetched while this one waited.
	set, err := v.cache.Get(ctx, v.jwksURL)
	if err == nil {
		if key, ok := set.LookupKeyID(kid); ok {
			return key, true, nil
		}
	}
	if !v.refetch.Allow() {
		if err != nil {
			return nil, false, fmt.Errorf("%w: kinde key set %s: %w", reconcile.ErrUnavailable, v.jwksURL, err)
		}
		return nil, false, nil
	}
	v.log.InfoContext(ctx, "kinde key set refetched: unknown key id or no set yet", "kid", kid)
	if set, err = v.cache.Refresh(ctx, v.jwksURL); err != nil {
		return nil, false, fmt.Errorf("%w: kinde key set %s: %w", reconcile.ErrUnavailable, v.jwksURL, err)
	}
	key, ok := set.LookupKeyID(kid)
	return key, ok, nil
}

// claimsJSON is what billsync reads of a Kinde webhook's claims. Kinde
// documents few of them and varies the shape of data, so every field is
// optional and read leniently.
type claimsJSON struct {
	Type           string          `json:"type"`
	EventID        string          `json:"event_id"`
	Timestamp      string          `json:"timestamp"`
	EventTimestamp string          `json:"event_timestamp"`
	CustomerID     string          `json:"customer_id"`
	Data           json.RawMessage `json:"data"`
}

type dataJSON struct {
	UserID     string `json:"user_id"`
	OrgCode    string `json:"org_code"`
	CustomerID string `json:"customer_id"`
	Customer   struct {
		ID string `json:"id"`
	} `json:"customer"`
}

// parseClaims reads a verified token's claims into an event. Only a token
// outside the replay window (or without the signed time that window is
// measured on) is an error: everything else that is wrong is stored as an
// ignored event with the reason, so nothing Kinde signed is lost.
func parseClaims(claims []byte, webhookID string, now time.Time, window time.Duration) (reconcile.Event, error) {
	var c claimsJSON
	err := json.Unmarshal(claims, &c)
	var typeErr *json.UnmarshalTypeError
	if err != nil && !errors.As(err, &typeErr) {
		return reconcile.Event{}, fmt.Errorf("kinde token claims are not a JSON object: %w", err)
	}
	sent, ok := parseTime(c.Timestamp)
	switch {
	case !ok:
		return reconcile.Event{}, errors.New("kinde token has no readable timestamp claim (RFC 3339): its age cannot be checked")
	case now.Sub(sent) > window:
		return reconcile.Event{}, fmt.Errorf("kinde token timestamp %s is older than the replay window (%s)", c.Timestamp, window)
	case sent.Sub(now) > maxFutureSkew:
		return reconcile.Event{}, fmt.Errorf("kinde token timestamp %s is in the future", c.Timestamp)
	}

	ev := reconcile.Event{Provider: Provider}
	var fields reconcile.Fields
	field := fields.Clean
	switch {
	case webhookID != "":
		ev.DedupeKey = reconcile.DedupeKeyOf(webhookID)
	case c.EventID != "":
		ev.DedupeKey = reconcile.DedupeKeyOf(c.EventID)
	default:
		ev.DedupeKey = "claims:" + reconcile.SHA256Hex(claims)
	}
	ev.EventID = cmp.Or(field("event_id", c.EventID), ev.DedupeKey)
	ev.Type = cmp.Or(field("event type", c.Type), "unknown")
	ev.Time = sent
	if at, ok := parseTime(c.EventTimestamp); ok {
		ev.Time = at
	}
	if !reconcile.SaneEventTime(ev.Time) {
		ev.Time = time.Time{}
	}
	if fields.Problem != "" {
		ev.IgnoreReason = fields.Problem
		return ev, nil
	}
	if !strings.HasPrefix(c.Type, "customer.") {
		ev.IgnoreReason = fmt.Sprintf("event type %q does not affect billing state", c.Type)
		return ev, nil
	}
	var d dataJSON
	if len(c.Data) > 0 {
		_ = json.Unmarshal(c.Data, &d) // a data of another shape names no customer
	}
	customer, problem := reconcile.Storable(cmp.Or(d.CustomerID, d.Customer.ID, c.CustomerID))
	switch {
	case problem != "":
		ev.IgnoreReason = "customer id " + problem
	case customer == "":
		ev.IgnoreReason = "event names no customer (no data.customer_id, data.customer.id or customer_id)"
	default:
		ev.CustomerID = customer
		if ref, problem := reconcile.Storable(cmp.Or(d.UserID, d.OrgCode)); problem == "" {
			ev.UserRef = ref
		}
	}
	return ev, nil
}

func parseTime(s string) (time.Time, bool) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, false
	}
	return t.UTC(), true
}

func storableOrEmpty(s string) string {
	clean, problem := reconcile.Storable(s)
	if problem != "" {
		return ""
	}
	return clean
}
