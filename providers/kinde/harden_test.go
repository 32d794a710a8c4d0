package kinde_test

import (
	"bytes"
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	kindemock "github.com/billsync/billsync/mocks/kinde"
	"github.com/billsync/billsync/providers/kinde"
	"github.com/billsync/billsync/reconcile"
)

// TestVerifyKeySetOutageSaysSo: a key set that cannot be fetched is named
// as such (not as the database), and is a provider outage for the intake
// (503, Kinde retries).
func TestVerifyKeySetOutageSaysSo(t *testing.T) {
	s := newJWKS(t)
	s.setDown(true)
	v := newVerifier(t, s)
	_, err := v.Verify(header(""), sign(t, s, claims("e_1", now)))
	require.ErrorIs(t, err, kinde.ErrKeySetUnavailable)
	require.NotErrorIs(t, err, reconcile.ErrUnavailable, "reconcile.ErrUnavailable is the store's")
	require.NotErrorIs(t, err, reconcile.ErrBadSignature)
	require.Contains(t, err.Error(), "kinde key set")
	require.NotContains(t, err.Error(), "store")
	var u interface{ Unavailable() bool }
	require.ErrorAs(t, err, &u, "the intake's contract for a provider that cannot be asked")
	require.True(t, u.Unavailable())
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
		d, err := v.Verify(header(id), token)
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
	first, err := v.Verify(header("msg_3"), token)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(first.Event.DedupeKey, "claims:"), first.Event.DedupeKey)
	again, err := v.Verify(header("msg_4"), token)
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
	_, err = v.Verify(header(""), good)
	require.NoError(t, err, "the same claims in a plain compact JWS are accepted")

	for name, token := range map[string][]byte{
		"crit names an unknown extension": rawToken(t,
			map[string]any{"alg": "RS256", "kid": kid, "crit": []string{"exp_unknown"}, "exp_unknown": true}, plain, rs256(t, key)),
		"b64 false, listed in crit": unencoded(map[string]any{"alg": "RS256", "kid": kid, "b64": false, "crit": []string{"b64"}}),
		"b64 false":                 unencoded(map[string]any{"alg": "RS256", "kid": kid, "b64": false}),
		"flattened JSON":            flattened(),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := v.Verify(header(""), token)
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
	_, err := v.Verify(header(""), s.sign(t, claims("e_big", now)))
	require.ErrorIs(t, err, kinde.ErrKeySetUnavailable)
	require.ErrorContains(t, err, "larger than")

	s = newKeySetServer(t)
	s.padding.Store(kinde.MaxKeySetBytes / 2)
	v = s.verifier(t)
	_, err = v.Verify(header(""), s.sign(t, claims("e_padded", now)))
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
	_, err := v.Verify(header(""), known)
	require.NoError(t, err, "the key set is fetched and cached")

	_, err = s.keys.Rotate()
	require.NoError(t, err)
	rotated := s.sign(t, claims("e_rotated", now))
	s.hold.Store(true)
	refetched := make(chan error, 1)
	go func() {
		_, err := v.Verify(header(""), rotated)
		refetched <- err
	}()
	<-s.entered // the refetch for the new kid is at the key set, held

	_, err = v.Verify(header(""), known)
	require.NoError(t, err)
	select {
	case err := <-refetched:
		t.Fatalf("the known kid was verified only after the refetch ended (%v)", err)
	default:
	}
	close(s.release)
	require.NoError(t, <-refetched, "the new kid is found once the refetch answers")
}
