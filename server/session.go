package server

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"strconv"
	"strings"
	"time"
)

// sessions issues and checks the console's session cookies and their CSRF
// tokens. A session is "expiry.nonce.mac": the MAC (HMAC-SHA256) is keyed
// by a key derived from the admin token, so changing the token ends every
// session. A session is also recorded in the store by its hash (never
// itself) from sign-in to sign-out, so signing out ends it on every
// replica, even for a copy of the cookie. The CSRF token of a session is a
// second MAC of it.
type sessions struct {
	key []byte
	now func() time.Time
}

// sessionTTL is how long a console sign-in lasts.
const sessionTTL = 12 * time.Hour

func newSessions(token string) sessions {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte("billsync console session v1"))
	return sessions{key: m.Sum(nil), now: time.Now}
}

var b64 = base64.RawURLEncoding

func (s sessions) mac(parts ...string) string {
	m := hmac.New(sha256.New, s.key)
	for _, p := range parts {
		m.Write([]byte(p))
		m.Write([]byte{0})
	}
	return b64.EncodeToString(m.Sum(nil))
}

// issue returns a new session.
func (s sessions) issue() string {
	payload := strconv.FormatInt(s.now().Add(sessionTTL).Unix(), 10) + "." + rand.Text()
	return payload + "." + s.mac("session", payload)
}

// valid reports whether session was issued with this key and has not
// expired.
func (s sessions) valid(session string) bool {
	i := strings.LastIndexByte(session, '.')
	if i < 0 {
		return false
	}
	payload, sum := session[:i], session[i+1:]
	if subtle.ConstantTimeCompare([]byte(sum), []byte(s.mac("session", payload))) != 1 {
		return false
	}
	expiry, _, _ := strings.Cut(payload, ".")
	unix, err := strconv.ParseInt(expiry, 10, 64)
	return err == nil && s.now().Before(time.Unix(unix, 0))
}

// hash is what the store keeps of a session.
func hash(session string) []byte {
	sum := sha256.Sum256([]byte(session))
	return sum[:]
}

// csrf returns the CSRF token of a valid session.
func (s sessions) csrf(session string) string { return s.mac("csrf", session) }

// validCSRF reports whether token is session's CSRF token.
func (s sessions) validCSRF(session, token string) bool {
	return token != "" && subtle.ConstantTimeCompare([]byte(token), []byte(s.csrf(session))) == 1
}
