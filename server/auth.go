package server

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
)

// sameSecret returns a check that a string is token. It compares in
// constant time; hashing both sides first makes the time independent of
// the token's length too. The token never leaves the closure: no message
// or log can hold it.
func sameSecret(token string) func(string) bool {
	want := sha256.Sum256([]byte(token))
	return func(got string) bool {
		sum := sha256.Sum256([]byte(got))
		return subtle.ConstantTimeCompare(sum[:], want[:]) == 1
	}
}

// bearer returns a check that a request carries "Authorization: Bearer
// token" (see sameSecret).
func bearer(token string) func(*http.Request) bool {
	same := sameSecret(token)
	return func(r *http.Request) bool {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		return same(got) && ok
	}
}
