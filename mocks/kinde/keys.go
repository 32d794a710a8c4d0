package kinde

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/lestrrat-go/jwx/v2/jwa"
	"github.com/lestrrat-go/jwx/v2/jwk"
	"github.com/lestrrat-go/jwx/v2/jws"
)

// Keys is a Kinde business's webhook signing keys: the newest signs, the
// older ones stay published until retired, as during a rotation.
type Keys struct {
	mu      sync.Mutex
	keys    []signingKey // newest first
	next    int
	fetches atomic.Int64
}

type signingKey struct {
	kid string
	key *rsa.PrivateKey
}

// NewKeys returns a key set with one key.
func NewKeys() (*Keys, error) {
	k := &Keys{}
	if _, err := k.Rotate(); err != nil {
		return nil, err
	}
	return k, nil
}

// Rotate adds a new signing key and returns its key id; the previous keys
// stay published.
func (k *Keys) Rotate() (string, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return "", fmt.Errorf("kinde fake: generate key: %w", err)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.next++
	kid := fmt.Sprintf("kinde_key_%d", k.next)
	k.keys = append([]signingKey{{kid: kid, key: key}}, k.keys...)
	return kid, nil
}

// Retire stops publishing every key but the newest.
func (k *Keys) Retire() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.keys = k.keys[:1]
}

// Current returns the signing key's id and private key.
func (k *Keys) Current() (kid string, key *rsa.PrivateKey) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.keys[0].kid, k.keys[0].key
}

// Sign returns claims (marshalled to JSON) as a compact JWT signed RS256
// with the current key, as Kinde signs a webhook.
func (k *Keys) Sign(claims any) ([]byte, error) {
	kid, key := k.Current()
	payload, err := json.Marshal(claims)
	if err != nil {
		return nil, fmt.Errorf("kinde fake: claims: %w", err)
	}
	hdr := jws.NewHeaders()
	if err := hdr.Set(jws.KeyIDKey, kid); err != nil {
		return nil, err
	}
	if err := hdr.Set(jws.TypeKey, "JWT"); err != nil {
		return nil, err
	}
	return jws.Sign(payload, jws.WithKey(jwa.RS256, key, jws.WithProtectedHeaders(hdr)))
}

// ServeJWKS answers GET with the published public keys (kid, kty, alg,
// use, n, e) and counts the fetch.
func (k *Keys) ServeJWKS(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	k.fetches.Add(1)
	k.mu.Lock()
	set := jwk.NewSet()
	var err error
	for _, sk := range k.keys {
		var pub jwk.Key
		if pub, err = jwk.FromRaw(sk.key.Public()); err != nil {
			break
		}
		for name, v := range map[string]any{jwk.KeyIDKey: sk.kid, jwk.AlgorithmKey: jwa.RS256, jwk.KeyUsageKey: "sig"} {
			if err = pub.Set(name, v); err != nil {
				break
			}
		}
		if err == nil {
			err = set.AddKey(pub)
		}
	}
	k.mu.Unlock()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(set)
}

// Fetches is how many times the key set was fetched.
func (k *Keys) Fetches() int64 { return k.fetches.Load() }
