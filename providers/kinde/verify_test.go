package kinde_test

import (
	"bytes"
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lestrrat-go/jwx/v2/jwa"
	"github.com/lestrrat-go/jwx/v2/jws"
	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/mocks/inproc"
	kindemock "github.com/billsync/billsync/mocks/kinde"
	"github.com/billsync/billsync/providers/kinde"
	"github.com/billsync/billsync/reconcile"
)

var now = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// jwksServer serves keys' key set at /.well-known/jwks; down makes it
// answer 503.
type jwksServer struct {
	*httptest.Server
	keys *kindemock.Keys
	mu   sync.Mutex
	down bool
}

func newJWKS(t *testing.T) *jwksServer {
	t.Helper()
	keys, err := kindemock.NewKeys()
	require.NoError(t, err)
	s := &jwksServer{keys: keys}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		down := s.down
		s.mu.Unlock()
		if down || r.URL.Path != "/.well-known/jwks" {
			http.Error(w, "unavailable", http.StatusServiceUnavailable)
			return
		}
		keys.ServeJWKS(w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *jwksServer) setDown(down bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = down
}

func newVerifier(t *testing.T, s *jwksServer, refetch ...time.Duration) *kinde.Verifier {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cfg := kinde.VerifierConfig{Domain: s.URL, Now: func() time.Time { return now }}
	if len(refetch) > 0 {
		cfg.RefetchInterval = refetch[0]
	}
	v, err := kinde.NewVerifier(ctx, cfg)
	require.NoError(t, err)
	return v
}

// claims is a customer.plan_changed webhook's claims as Kinde sends them.
func claims(eventID string, sent time.Time) map[string]any {
	return map[string]any{
		"type": "customer.plan_changed", "event_id": eventID, "source": "admin",
		"timestamp": sent.Format(time.RFC3339), "event_timestamp": sent.Add(-time.Second).Format(time.RFC3339),
		"data": map[string]any{"customer_id": "customer_1", "user_id": "kp_1", "plan_code": "customer_pro_plan"},
	}
}

func sign(t *testing.T, s *jwksServer, c map[string]any) []byte {
	t.Helper()
	token, err := s.keys.Sign(c)
	require.NoError(t, err)
	return token
}

func header(webhookID string) http.Header {
	h := http.Header{"Content-Type": {"application/jwt"}}
	if webhookID != "" {
		h.Set("webhook-id", webhookID)
	}
	return h
}

func TestVerifyAcceptsAKindeToken(t *testing.T) {
	s := newJWKS(t)
	v := newVerifier(t, s)
	token := sign(t, s, claims("event_1", now.Add(-time.Hour)))
	d, err := v.Verify(context.Background(), header("msg_1"), token)
	require.NoError(t, err)
	ev := d.Event
	require.Equal(t, "kinde", ev.Provider)
	require.Equal(t, "event_1", ev.DedupeKey, "the signed event_id is the dedupe key")
	require.Equal(t, "event_1", ev.EventID)
	require.Equal(t, "msg_1", d.DeliveryID, "webhook-id is the receipt's delivery id")
	require.Equal(t, "customer.plan_changed", ev.Type)
	require.Equal(t, "customer_1", ev.CustomerID)
	require.Equal(t, "kp_1", ev.UserRef, "the app's reference, which Kinde's agreements do not carry")
	require.Equal(t, now.Add(-time.Hour-time.Second), ev.Time, "event_timestamp, the time of the change")
	require.Empty(t, ev.IgnoreReason)
	require.Equal(t, token, d.Event.Payload)

	d, err = v.Verify(context.Background(), header(""), token)
	require.NoError(t, err)
	require.Equal(t, "event_1", d.Event.DedupeKey, "without webhook-id too")
	require.EqualValues(t, 1, s.keys.Fetches(), "the key set is cached")
}

func TestVerifyReadsTheCustomerWhereverKindePutsIt(t *testing.T) {
	s := newJWKS(t)
	v := newVerifier(t, s)
	for name, tc := range map[string]struct {
		edit     func(map[string]any)
		customer string
		ignored  string
	}{
		"data.customer_id":   {func(map[string]any) {}, "customer_1", ""},
		"data.customer.id":   {func(c map[string]any) { c["data"] = map[string]any{"customer": map[string]any{"id": "customer_2"}} }, "customer_2", ""},
		"top-level":          {func(c map[string]any) { c["data"] = map[string]any{}; c["customer_id"] = "customer_3" }, "customer_3", ""},
		"data is a string":   {func(c map[string]any) { c["data"] = "surprise" }, "", "names no customer"},
		"no customer":        {func(c map[string]any) { c["data"] = map[string]any{"user_id": "kp_1"} }, "", "names no customer"},
		"not billing":        {func(c map[string]any) { c["type"] = "user.created" }, "", `"user.created" does not affect billing state`},
		"NUL in customer":    {func(c map[string]any) { c["data"] = map[string]any{"customer_id": "cus\x00tomer"} }, "", "customer id contains a NUL byte"},
		"huge event id":      {func(c map[string]any) { c["event_id"] = strings.Repeat("e", 1000) }, "", "event_id longer than 255 bytes"},
		"no event_timestamp": {func(c map[string]any) { delete(c, "event_timestamp") }, "customer_1", ""},
	} {
		t.Run(name, func(t *testing.T) {
			c := claims("event_"+name, now)
			tc.edit(c)
			d, err := v.Verify(context.Background(), header(""), sign(t, s, c))
			require.NoError(t, err, "a signed token is stored, never refused for its content")
			require.Equal(t, tc.customer, d.Event.CustomerID)
			if tc.ignored == "" {
				require.Empty(t, d.Event.IgnoreReason)
			} else {
				require.Contains(t, d.Event.IgnoreReason, tc.ignored)
			}
			require.LessOrEqual(t, len(d.Event.DedupeKey), reconcile.MaxFieldBytes)
			require.False(t, d.Event.Time.IsZero())
		})
	}
}

// rawToken builds a compact JWS by hand: header and claims as given, the
// signature computed by sign (nil = empty).
func rawToken(t *testing.T, hdr, c map[string]any, sig func(signingInput []byte) []byte) []byte {
	t.Helper()
	enc := func(v any) string {
		b, err := json.Marshal(v)
		require.NoError(t, err)
		return base64.RawURLEncoding.EncodeToString(b)
	}
	input := enc(hdr) + "." + enc(c)
	var s []byte
	if sig != nil {
		s = sig([]byte(input))
	}
	return []byte(input + "." + base64.RawURLEncoding.EncodeToString(s))
}

func TestVerifyRefusesForgedTokens(t *testing.T) {
	s := newJWKS(t)
	v := newVerifier(t, s)
	kid, key := s.keys.Current()
	good := claims("event_1", now)
	other, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	pubDER, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	require.NoError(t, err)
	signWith := func(alg jwa.SignatureAlgorithm, k any, kid string) []byte {
		hdr := jws.NewHeaders()
		require.NoError(t, hdr.Set(jws.KeyIDKey, kid))
		payload, err := json.Marshal(good)
		require.NoError(t, err)
		token, err := jws.Sign(payload, jws.WithKey(alg, k, jws.WithProtectedHeaders(hdr)))
		require.NoError(t, err)
		return token
	}
	fetchesBefore := s.keys.Fetches()
	for name, tc := range map[string]struct {
		token   []byte
		fetches bool // may the refusal fetch the key set
	}{
		"alg none":                        {rawToken(t, map[string]any{"alg": "none", "kid": kid}, good, nil), false},
		"HS256 keyed with the public key": {signWith(jwa.HS256, pubDER, kid), false},
		"RS384":                           {signWith(jwa.RS384, key, kid), false},
		"PS256":                           {signWith(jwa.PS256, key, kid), false},
		"no kid":                          {rawToken(t, map[string]any{"alg": "RS256"}, good, func([]byte) []byte { return []byte("sig") }), false},
		"JSON body":                       {[]byte(`{"type":"customer.plan_changed","data":{"customer_id":"customer_1"}}`), false},
		"empty":                           {nil, false},
		"four parts":                      {[]byte("a.b.c.d"), false},
		"signed by another key":           {signWith(jwa.RS256, other, kid), true},
		"claims altered":                  {tamper(t, signWith(jwa.RS256, key, kid)), true},
		"unknown kid after refetch":       {signWith(jwa.RS256, key, "kinde_key_unknown"), true},
	} {
		t.Run(name, func(t *testing.T) {
			before := s.keys.Fetches()
			_, err := v.Verify(context.Background(), header("msg_forged"), tc.token)
			require.ErrorIs(t, err, reconcile.ErrBadSignature)
			if !tc.fetches {
				require.Equal(t, before, s.keys.Fetches(), "refused on its face, without a key fetch")
			}
		})
	}
	require.LessOrEqual(t, s.keys.Fetches()-fetchesBefore, int64(2), "one fetch for the keys, at most one refetch for the unknown kid")
}

// tamper changes the claims of a signed token, keeping its signature.
func tamper(t *testing.T, token []byte) []byte {
	t.Helper()
	parts := strings.Split(string(token), ".")
	c := claims("event_1", now)
	c["data"] = map[string]any{"customer_id": "customer_victim"}
	b, err := json.Marshal(c)
	require.NoError(t, err)
	parts[1] = base64.RawURLEncoding.EncodeToString(b)
	return []byte(strings.Join(parts, "."))
}

func TestVerifyReplayWindow(t *testing.T) {
	s := newJWKS(t)
	v := newVerifier(t, s)
	_, err := v.Verify(context.Background(), header(""), sign(t, s, claims("e_recent", now.Add(-71*time.Hour))))
	require.NoError(t, err, "Kinde retries for 36 h: a token 71 h old is still a genuine retry")
	_, err = v.Verify(context.Background(), header(""), sign(t, s, claims("e_old", now.Add(-73*time.Hour))))
	require.ErrorIs(t, err, reconcile.ErrBadSignature)
	require.ErrorContains(t, err, "older than the replay window")
	_, err = v.Verify(context.Background(), header(""), sign(t, s, claims("e_future", now.Add(time.Hour))))
	require.ErrorIs(t, err, reconcile.ErrBadSignature)
	noTime := claims("e_none", now)
	delete(noTime, "timestamp")
	_, err = v.Verify(context.Background(), header(""), sign(t, s, noTime))
	require.ErrorIs(t, err, reconcile.ErrBadSignature, "without a signed time a token could be replayed forever")
}

// TestVerifyKeyRotation: a token signed with a key published after the set
// was cached is accepted after one refetch; a flood of unknown kids does
// not hammer the key set endpoint.
func TestVerifyKeyRotation(t *testing.T) {
	s := newJWKS(t)
	v := newVerifier(t, s)
	_, err := v.Verify(context.Background(), header(""), sign(t, s, claims("e_1", now)))
	require.NoError(t, err)
	require.EqualValues(t, 1, s.keys.Fetches())

	_, err = s.keys.Rotate()
	require.NoError(t, err)
	_, err = v.Verify(context.Background(), header(""), sign(t, s, claims("e_2", now)))
	require.NoError(t, err, "the new key is found by one refetch")
	require.EqualValues(t, 2, s.keys.Fetches())

	_, key := s.keys.Current()
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hdr := jws.NewHeaders()
			_ = hdr.Set(jws.KeyIDKey, "kid_flood_"+strings.Repeat("x", i))
			payload, _ := json.Marshal(claims("e_flood", now))
			token, err := jws.Sign(payload, jws.WithKey(jwa.RS256, key, jws.WithProtectedHeaders(hdr)))
			if err == nil {
				_, err = v.Verify(context.Background(), header(""), token)
			}
			require.ErrorIs(t, err, reconcile.ErrBadSignature)
		}()
	}
	wg.Wait()
	require.LessOrEqual(t, s.keys.Fetches(), int64(3), "50 unknown kids cost at most one more fetch")
}

// TestVerifyWhenKindeIsDown: a token that may be valid but whose keys
// cannot be fetched is reconcile.ErrProviderUnavailable (503, Kinde retries), never accepted
// and never refused as forged; a token refused on its face is still 401.
//
// It runs in a testing/synctest bubble, the key set served in-process: the
// wait for the next fetch is the bubble's clock, exact, not a sleep that
// races the machine's load.
func TestVerifyWhenKindeIsDown(t *testing.T) {
	s := newJWKS(t)
	s.setDown(true)
	synctest.Test(t, func(t *testing.T) {
		const spacing = 30 * time.Second // RefetchInterval's default
		v, err := kinde.NewVerifier(t.Context(), kinde.VerifierConfig{Domain: s.URL, Now: func() time.Time { return now },
			HTTPClient: &http.Client{Transport: inproc.Transport{Handler: s.Config.Handler}}})
		require.NoError(t, err)
		_, err = v.Verify(context.Background(), header(""), sign(t, s, claims("e_1", now)))
		require.ErrorIs(t, err, reconcile.ErrProviderUnavailable)
		require.NotErrorIs(t, err, reconcile.ErrBadSignature)
		kid, _ := s.keys.Current()
		_, err = v.Verify(context.Background(), header(""), rawToken(t, map[string]any{"alg": "none", "kid": kid}, claims("e_2", now), nil))
		require.ErrorIs(t, err, reconcile.ErrBadSignature)
		require.EqualValues(t, 0, s.keys.Fetches())

		s.setDown(false)
		_, err = v.Verify(context.Background(), header(""), sign(t, s, claims("e_1", now)))
		require.ErrorIs(t, err, reconcile.ErrProviderUnavailable, "refetches are spaced by RefetchInterval, even once Kinde is back")
		time.Sleep(spacing - time.Nanosecond)
		_, err = v.Verify(context.Background(), header(""), sign(t, s, claims("e_1", now)))
		require.ErrorIs(t, err, reconcile.ErrProviderUnavailable, "not a moment before")
		time.Sleep(time.Nanosecond)
		_, err = v.Verify(context.Background(), header(""), sign(t, s, claims("e_1", now)))
		require.NoError(t, err, "Kinde's retry succeeds once the keys can be fetched")
		require.EqualValues(t, 1, s.keys.Fetches())
	})
}

func TestNewVerifierRefusesABadDomain(t *testing.T) {
	for _, domain := range []string{"", "acme.kinde.com", "ftp://acme.kinde.com", "https://acme.kinde.com/path"} {
		_, err := kinde.NewVerifier(context.Background(), kinde.VerifierConfig{Domain: domain})
		require.Error(t, err, domain)
	}
}

// FuzzVerify: whatever arrives, Verify either refuses it or returns an
// event that can be stored; it never panics. The seeds run as a test.
func FuzzVerify(f *testing.F) {
	s := &jwksServer{}
	keys, err := kindemock.NewKeys()
	require.NoError(f, err)
	s.keys = keys
	s.Server = httptest.NewServer(http.HandlerFunc(keys.ServeJWKS))
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	v, err := kinde.NewVerifier(ctx, kinde.VerifierConfig{Domain: s.URL, Now: func() time.Time { return now }})
	require.NoError(f, err)
	for _, c := range []map[string]any{
		claims("e_1", now),
		{"type": "customer.payment_succeeded", "timestamp": now.Format(time.RFC3339), "customer_id": "c"},
		{"type": 7, "timestamp": now.Format(time.RFC3339), "data": []int{1}},
	} {
		token, err := keys.Sign(c)
		require.NoError(f, err)
		f.Add(token, "msg_1")
	}
	f.Add([]byte("eyJhbGciOiJub25lIn0.e30."), "")
	f.Add([]byte("..."), "")
	f.Add([]byte(`{"not":"a jwt"}`), "x")
	f.Fuzz(func(t *testing.T, body []byte, webhookID string) {
		d, err := v.Verify(context.Background(), header(webhookID), body)
		if err != nil {
			require.True(t, errorsIsAny(err, reconcile.ErrBadSignature, reconcile.ErrProviderUnavailable), err)
			return
		}
		ev := d.Event
		require.NotEmpty(t, ev.DedupeKey)
		require.LessOrEqual(t, len(ev.DedupeKey), reconcile.MaxFieldBytes)
		require.LessOrEqual(t, len(ev.CustomerID), reconcile.MaxFieldBytes)
		require.NotContains(t, ev.CustomerID+ev.Type+ev.EventID+ev.DedupeKey, "\x00")
		require.True(t, ev.Time.IsZero() || reconcile.SaneEventTime(ev.Time))
	})
}

func errorsIsAny(err error, targets ...error) bool {
	for _, target := range targets {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

// TestVerifyKeySetOutageSaysSo: a key set that cannot be fetched is named
// as such (not as the database), and is a provider outage for the intake
// (503, Kinde retries).
func TestVerifyKeySetOutageSaysSo(t *testing.T) {
	s := newJWKS(t)
	s.setDown(true)
	v := newVerifier(t, s)
	_, err := v.Verify(context.Background(), header(""), sign(t, s, claims("e_1", now)))
	require.ErrorIs(t, err, reconcile.ErrProviderUnavailable, "the intake's contract for a provider that cannot be asked")
	require.NotErrorIs(t, err, reconcile.ErrStoreUnavailable, "reconcile.ErrStoreUnavailable is the store's")
	require.NotErrorIs(t, err, reconcile.ErrBadSignature)
	require.Contains(t, err.Error(), "kinde key set")
	require.NotContains(t, err.Error(), "store")
}

// TestVerifyDedupesOnTheSignedEventID: the webhook-id header is not
// signed, so one captured token sent with fresh webhook-ids is still one
// event: its signed event_id, or without one a hash of its signed claims,
// is its identity.
func TestVerifyDedupesOnTheSignedEventID(t *testing.T) {
	s := newJWKS(t)
	v := newVerifier(t, s)
	token := sign(t, s, claims("event_1", now))
	for _, id := range []string{"msg_1", "msg_2", ""} {
		d, err := v.Verify(context.Background(), header(id), token)
		require.NoError(t, err)
		require.Equal(t, "event_1", d.Event.DedupeKey, "webhook-id %q", id)
		require.Equal(t, "event_1", d.Event.EventID)
		if id != "" {
			require.Equal(t, id, d.DeliveryID, "the webhook-id is still the receipt's delivery id")
		}
	}

	noID := claims("", now)
	delete(noID, "event_id")
	token = sign(t, s, noID)
	first, err := v.Verify(context.Background(), header("msg_3"), token)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(first.Event.DedupeKey, "claims:"), first.Event.DedupeKey)
	again, err := v.Verify(context.Background(), header("msg_4"), token)
	require.NoError(t, err)
	require.Equal(t, first.Event.DedupeKey, again.Event.DedupeKey, "the same signed claims, whatever the webhook-id")
}

// rs256 signs a JWS signing input as RS256 does.
func rs256(t *testing.T, key *rsa.PrivateKey) func([]byte) []byte {
	return func(input []byte) []byte {
		sum := sha256.Sum256(input)
		sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, sum[:])
		require.NoError(t, err)
		return sig
	}
}

// TestVerifyRefusesWhatIsNotAPlainCompactJWS: a token Kinde's key signed
// is still refused when it asks for a JWS extension billsync does not
// implement (crit, RFC 7515 §4.1.11), carries its payload unencoded (b64,
// RFC 7797), or is in a JSON serialization: billsync reads compact JWTs
// only.
func TestVerifyRefusesWhatIsNotAPlainCompactJWS(t *testing.T) {
	s := newJWKS(t)
	v := newVerifier(t, s)
	kid, key := s.keys.Current()
	b64 := func(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }
	// No dot anywhere in these claims, so the unencoded payload below
	// keeps the token at three dot-separated parts.
	plain := map[string]any{"type": "billing", "event_id": "e_plain", "timestamp": now.Format(time.RFC3339)}
	payload, err := json.Marshal(plain)
	require.NoError(t, err)

	unencoded := func(hdr map[string]any) []byte {
		h, err := json.Marshal(hdr)
		require.NoError(t, err)
		input := b64(h) + "." + string(payload)
		return []byte(input + "." + b64(rs256(t, key)([]byte(input))))
	}
	flattened := func() []byte {
		h, err := json.Marshal(map[string]any{"alg": "RS256", "kid": kid})
		require.NoError(t, err)
		input := b64(h) + "." + b64(payload)
		doc, err := json.Marshal(map[string]any{"protected": b64(h), "payload": b64(payload),
			"signature": b64(rs256(t, key)([]byte(input))), "header": map[string]any{"note": "a.b.c"}})
		require.NoError(t, err)
		return doc
	}

	good := rawToken(t, map[string]any{"alg": "RS256", "kid": kid}, plain, rs256(t, key))
	_, err = v.Verify(context.Background(), header(""), good)
	require.NoError(t, err, "the same claims in a plain compact JWS are accepted")

	for name, token := range map[string][]byte{
		"crit names an unknown extension": rawToken(t,
			map[string]any{"alg": "RS256", "kid": kid, "crit": []string{"exp_unknown"}, "exp_unknown": true}, plain, rs256(t, key)),
		"b64 false, listed in crit": unencoded(map[string]any{"alg": "RS256", "kid": kid, "b64": false, "crit": []string{"b64"}}),
		"b64 false":                 unencoded(map[string]any{"alg": "RS256", "kid": kid, "b64": false}),
		"flattened JSON":            flattened(),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := v.Verify(context.Background(), header(""), token)
			require.ErrorIs(t, err, reconcile.ErrBadSignature)
		})
	}
}

// keySetServer serves a Kinde key set whose answer a test shapes: padding
// adds bytes to it, and a held request waits (entered is signalled) until
// release is closed.
type keySetServer struct {
	*httptest.Server
	keys    *kindemock.Keys
	padding atomic.Int64
	hold    atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func newKeySetServer(t *testing.T) *keySetServer {
	t.Helper()
	keys, err := kindemock.NewKeys()
	require.NoError(t, err)
	s := &keySetServer{keys: keys, entered: make(chan struct{}, 1), release: make(chan struct{})}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.hold.Load() {
			s.entered <- struct{}{}
			select {
			case <-s.release:
			case <-r.Context().Done():
				return
			}
		}
		rec := httptest.NewRecorder()
		keys.ServeJWKS(rec, r)
		set := rec.Body.Bytes()
		if pad := s.padding.Load(); pad > 0 {
			// A member no key set has: the set stays valid JSON, only larger.
			set = append(bytes.TrimSuffix(bytes.TrimSpace(set), []byte("}")), `,"padding":"`...)
			set = append(append(set, bytes.Repeat([]byte("x"), int(pad))...), `"}`...)
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(set)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *keySetServer) verifier(t *testing.T) *kinde.Verifier {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	v, err := kinde.NewVerifier(ctx, kinde.VerifierConfig{Domain: s.URL, Now: func() time.Time { return now }})
	require.NoError(t, err)
	return v
}

func (s *keySetServer) sign(t *testing.T, c map[string]any) []byte {
	t.Helper()
	token, err := s.keys.Sign(c)
	require.NoError(t, err)
	return token
}

// TestVerifyCapsTheKeySet: a key set answer larger than MaxKeySetBytes is
// not read whole (a hostile or broken endpoint cannot make billsync hold
// megabytes): it is a key set that cannot be had, and Kinde retries.
func TestVerifyCapsTheKeySet(t *testing.T) {
	s := newKeySetServer(t)
	s.padding.Store(4 << 20)
	v := s.verifier(t)
	_, err := v.Verify(context.Background(), header(""), s.sign(t, claims("e_big", now)))
	require.ErrorIs(t, err, reconcile.ErrProviderUnavailable)
	require.ErrorContains(t, err, "larger than")

	s = newKeySetServer(t)
	s.padding.Store(kinde.MaxKeySetBytes / 2)
	v = s.verifier(t)
	_, err = v.Verify(context.Background(), header(""), s.sign(t, claims("e_padded", now)))
	require.NoError(t, err, "a key set within the cap is read")
}

// TestVerifyKnownKidDoesNotWaitForARefetch: while a refetch forced by an
// unknown kid hangs at Kinde, a token whose kid the cached set holds is
// verified at once; the unknown kid's delivery waits for the refetch and
// is then accepted.
func TestVerifyKnownKidDoesNotWaitForARefetch(t *testing.T) {
	s := newKeySetServer(t)
	v := s.verifier(t)
	known := s.sign(t, claims("e_known", now))
	_, err := v.Verify(context.Background(), header(""), known)
	require.NoError(t, err, "the key set is fetched and cached")

	_, err = s.keys.Rotate()
	require.NoError(t, err)
	rotated := s.sign(t, claims("e_rotated", now))
	s.hold.Store(true)
	refetched := make(chan error, 1)
	go func() {
		_, err := v.Verify(context.Background(), header(""), rotated)
		refetched <- err
	}()
	<-s.entered // the refetch for the new kid is at the key set, held

	_, err = v.Verify(context.Background(), header(""), known)
	require.NoError(t, err)
	select {
	case err := <-refetched:
		t.Fatalf("the known kid was verified only after the refetch ended (%v)", err)
	default:
	}
	close(s.release)
	require.NoError(t, <-refetched, "the new kid is found once the refetch answers")
}
