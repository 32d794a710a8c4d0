package kinde

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
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
	// default 1 h. The refresh runs in the background: deliveries go on
	// with the cached set meanwhile.
	RefreshInterval time.Duration
	// HTTPClient fetches the key set; default a client with a 10 s timeout.
	HTTPClient *http.Client
	Logger     *slog.Logger     // default discards
	Now        func() time.Time // default time.Now
}

// DefaultReplayWindow is the default ReplayWindow.
const DefaultReplayWindow = 72 * time.Hour

// MaxKeySetBytes is the largest key-set answer read (256 KiB). Kinde
// publishes one or two RSA keys, about 1.5 KiB each as JWKs (6 KiB with an
// x5c certificate chain): 256 KiB holds forty such keys, and a broken or
// hostile endpoint cannot make billsync hold more.
const MaxKeySetBytes = 256 << 10

// maxFutureSkew is how far in the future a token's timestamp may be
// (clocks differ); further is refused like a token too old.
const maxFutureSkew = 5 * time.Minute

// Verifier checks Kinde webhook deliveries: the body is a JWT signed RS256
// by a key of the domain's key set. It is safe for concurrent use.
//
// The key set is held here rather than in jwx's jwk.Cache: that cache
// makes every reader wait while any fetch of the set is under way, so one
// hung refetch for an unknown kid held up every delivery. Here a token
// whose kid the cached set holds never waits for a fetch.
type Verifier struct {
	jwksURL string
	http    *http.Client
	life    context.Context // background refreshes end with it
	window  time.Duration
	every   time.Duration // RefreshInterval
	spacing time.Duration // RefetchInterval
	now     func() time.Time
	log     *slog.Logger

	keys       atomic.Pointer[keySet] // the newest set fetched; nil until one is
	fetching   chan struct{}          // a one-slot lock: one fetch at a time
	refreshing atomic.Bool            // a background refresh is under way
	refetch    *rate.Limiter          // forced refetches for unknown kids
	retry      *rate.Limiter          // first fetches while none has succeeded
}

// keySet is a fetched key set and when it is due for a refresh (by the
// process's clock, not Now: it is about fetches, not token times).
type keySet struct {
	set       jwk.Set
	refreshAt time.Time
}

// NewVerifier returns a Verifier whose key set's background refreshes end
// with ctx. It fetches nothing yet: serve starts even when Kinde cannot be
// reached, and the first delivery that needs the keys fetches them.
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
		jwksURL:  domain + "/.well-known/jwks",
		http:     hc,
		life:     ctx,
		window:   cmp.Or(cfg.ReplayWindow, DefaultReplayWindow),
		every:    cmp.Or(cfg.RefreshInterval, time.Hour),
		spacing:  cmp.Or(cfg.RefetchInterval, 30*time.Second),
		now:      cfg.Now,
		log:      cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler)),
		fetching: make(chan struct{}, 1),
	}
	v.refetch = rate.NewLimiter(rate.Every(v.spacing), 1)
	v.retry = rate.NewLimiter(rate.Every(v.spacing), 1)
	if cfg.Now == nil {
		v.now = time.Now
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
// A token refused on its face (not a compact JWS, alg other than RS256, no
// key id, a JWS extension) is ErrBadSignature without any key fetch. A key
// set that cannot be fetched wraps reconcile.ErrProviderUnavailable (503:
// Kinde retries), never a 200. Errors wrap one of those two. Only a token
// whose key the cached set lacks waits, for one fetch: at most until ctx
// ends (the intake's deadline), each fetch at most fetchTimeout.
func (v *Verifier) Verify(ctx context.Context, header http.Header, body []byte) (reconcile.Receipt, error) {
	token := bytes.TrimSpace(body)
	kid, err := unverifiedKeyID(token)
	if err != nil {
		return reconcile.Receipt{}, fmt.Errorf("%w: %w", reconcile.ErrBadSignature, err)
	}
	key, err := v.key(ctx, kid)
	if err != nil {
		return reconcile.Receipt{}, err
	}
	claims, err := jws.Verify(token, jws.WithKey(jwa.RS256, key))
	if err != nil {
		return reconcile.Receipt{}, fmt.Errorf("%w: kinde token signature: %w", reconcile.ErrBadSignature, err)
	}
	ev, err := parseClaims(claims, v.now(), v.window)
	if err != nil {
		return reconcile.Receipt{}, fmt.Errorf("%w: %w", reconcile.ErrBadSignature, err)
	}
	ev.Payload = body
	return reconcile.Receipt{Event: ev, DeliveryID: storableOrEmpty(header.Get("webhook-id"))}, nil
}

// unverifiedKeyID reads the token's protected header and refuses, before
// any key is looked up, what can never be valid: anything but a compact JWS
// with one RS256 signature, a key id and no extension. (An HMAC token
// keyed with the public key, alg none, RS384 and PS256 all end here.)
func unverifiedKeyID(token []byte) (string, error) {
	if err := compactJWS(token); err != nil {
		return "", err
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
	// RFC 7515 §4.1.11: a JWS whose crit names an extension the recipient
	// does not implement is invalid, and billsync implements none; b64
	// (RFC 7797, an unencoded payload) is one, never used by Kinde.
	if crit, ok := h.Get(jws.CriticalKey); ok {
		return "", fmt.Errorf("kinde token header crit %v refused: no JWS extension is supported", crit)
	}
	if _, ok := h.Get("b64"); ok {
		return "", errors.New("kinde token header b64 refused: the payload must be base64url-encoded")
	}
	if h.KeyID() == "" {
		return "", errors.New("kinde token has no kid")
	}
	return h.KeyID(), nil
}

// compactJWS checks that token is in the JWS compact serialization (RFC
// 7515 §7.1): three non-empty base64url parts. jws.Parse also reads the
// JSON serializations and unencoded payloads; Kinde sends neither.
func compactJWS(token []byte) error {
	parts := bytes.Split(token, []byte("."))
	if len(parts) != 3 {
		return errors.New("body is not a compact JWT (want three dot-separated parts)")
	}
	for i, part := range parts {
		if len(part) == 0 {
			return fmt.Errorf("body is not a compact JWT: part %d is empty", i+1)
		}
		for _, c := range part {
			if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return fmt.Errorf("body is not a compact JWT: part %d is not base64url", i+1)
			}
		}
	}
	return nil
}

// key returns the RS256 public key with id kid. A kid the cached set holds
// is answered from it at once, whatever fetch is under way (a set due for
// its refresh is refreshed in the background). A kid the set lacks, or no
// set yet, waits for one refetch (a key rotation), at most one per
// RefetchInterval however many such tokens arrive.
func (v *Verifier) key(ctx context.Context, kid string) (jwk.Key, error) {
	var key jwk.Key
	var ok bool
	if ks := v.keys.Load(); ks != nil {
		if key, ok = ks.set.LookupKeyID(kid); ok && !time.Now().Before(ks.refreshAt) {
			v.refreshInBackground()
		}
	}
	if !ok {
		var err error
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

// refetchFor fetches the key set for a kid the cached set lacks.
func (v *Verifier) refetchFor(ctx context.Context, kid string) (jwk.Key, bool, error) {
	select {
	case v.fetching <- struct{}{}:
		defer func() { <-v.fetching }()
	case <-ctx.Done():
		return nil, false, v.unavailable(fmt.Errorf("wait for a fetch under way: %w", ctx.Err()))
	}
	// Another delivery may have refetched while this one waited.
	ks := v.keys.Load()
	if ks != nil {
		if key, ok := ks.set.LookupKeyID(kid); ok {
			return key, true, nil
		}
	}
	// Apart from the refetches, so that a rotation right after the first
	// fetch is found at once.
	limit := v.refetch
	if ks == nil {
		limit = v.retry
	}
	if !limit.Allow() {
		if ks == nil {
			return nil, false, v.unavailable(fmt.Errorf("not fetched yet; the next try within %s", v.spacing))
		}
		return nil, false, nil
	}
	v.log.InfoContext(ctx, "kinde key set refetched: unknown key id or no set yet", "kid", kid)
	set, err := v.fetch(ctx)
	if err != nil {
		return nil, false, err
	}
	key, ok := set.LookupKeyID(kid)
	return key, ok, nil
}

// refreshInBackground refreshes a set due for it, once at a time, without
// making the delivery that noticed wait. A failed refresh keeps the cached
// set and is tried again after RefetchInterval.
func (v *Verifier) refreshInBackground() {
	if !v.refreshing.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer v.refreshing.Store(false)
		select {
		case v.fetching <- struct{}{}:
			defer func() { <-v.fetching }()
		case <-v.life.Done():
			return
		}
		ks := v.keys.Load()
		if ks != nil && time.Now().Before(ks.refreshAt) {
			return // a refetch did it meanwhile
		}
		if _, err := v.fetch(v.life); err != nil {
			v.log.Warn("kinde key set refresh failed; the cached set stays in use", slog.Any("error", err))
			if ks != nil {
				v.keys.CompareAndSwap(ks, &keySet{set: ks.set, refreshAt: time.Now().Add(v.spacing)})
			}
		}
	}()
}

// fetchTimeout bounds one fetch of the key set.
const fetchTimeout = 10 * time.Second

// fetch reads the key set (at most MaxKeySetBytes of it) and caches it. It
// is called holding the fetching slot.
func (v *Verifier) fetch(ctx context.Context) (jwk.Set, error) {
	// Bounded here, whatever the HTTP client: a hung fetch holds the
	// fetching slot, and with it every delivery whose kid is unknown.
	ctx, cancel := context.WithTimeout(ctx, fetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, v.jwksURL, nil)
	if err != nil {
		return nil, v.unavailable(err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := v.http.Do(req)
	if err != nil {
		return nil, v.unavailable(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, v.unavailable(fmt.Errorf("answered %s", resp.Status))
	}
	tooLarge := fmt.Errorf("answer larger than %d KiB", MaxKeySetBytes>>10)
	if resp.ContentLength > MaxKeySetBytes {
		return nil, v.unavailable(tooLarge)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxKeySetBytes+1))
	if err != nil {
		return nil, v.unavailable(fmt.Errorf("read the answer: %w", err))
	}
	if len(body) > MaxKeySetBytes {
		return nil, v.unavailable(tooLarge)
	}
	set, err := jwk.Parse(body)
	if err != nil {
		return nil, v.unavailable(fmt.Errorf("parse: %w", err))
	}
	v.keys.Store(&keySet{set: set, refreshAt: time.Now().Add(v.every)})
	return set, nil
}

// unavailable wraps a failure to get the key set: Kinde's outage, not
// billsync's, and not a bad token.
func (v *Verifier) unavailable(err error) error {
	return fmt.Errorf("%w: kinde key set unavailable: %s: %w", reconcile.ErrProviderUnavailable, v.jwksURL, err)
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
func parseClaims(claims []byte, now time.Time, window time.Duration) (reconcile.Event, error) {
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
	// The event's identity is what Kinde signed: its event_id, else a hash
	// of its claims. The webhook-id header is not signed, so a captured
	// token sent again under fresh webhook-ids is still one event (the
	// header is kept as each receipt's delivery id).
	if c.EventID != "" {
		ev.DedupeKey = reconcile.DedupeKeyOf(c.EventID)
	} else {
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

func storableOrEmpty(s string) string {
	clean, problem := reconcile.Storable(s)
	if problem != "" {
		return ""
	}
	return clean
}
