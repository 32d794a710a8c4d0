package server

import (
	"strings"
	"testing"
	"time"
)

// FuzzSession: no cookie value an attacker sends is a session unless this
// key issued it, and none panics; no CSRF token is valid for another
// session.
func FuzzSession(f *testing.F) {
	// The fuzzer's workers are processes of their own: the session they
	// check must be the same in each, so it is made here without a random
	// nonce, as issue makes it.
	s := newSessions("fuzz-admin-token-0123456789")
	s.now = func() time.Time { return time.Unix(1_800_000_000, 0) }
	payload := "1800003600.FUZZNONCE"
	issued := payload + "." + s.mac("session", payload)
	if !s.valid(issued) {
		f.Fatal("the session made as issue makes it is not valid")
	}
	other := newSessions("another-admin-token-012345").issue()
	for _, seed := range []string{issued, other, "", ".", "..", "...", "9999999999999999999.x.y", "-1.a.b",
		issued + "x", strings.Replace(issued, ".", "..", 1), issued[:len(issued)-1], "1.2." + issued} {
		f.Add(seed, s.csrf(issued))
	}
	f.Fuzz(func(t *testing.T, session, csrf string) {
		if s.valid(session) && session != issued {
			t.Fatalf("session %q accepted: never issued", session)
		}
		if session != issued && s.validCSRF(issued, csrf) && csrf != s.csrf(issued) {
			t.Fatalf("CSRF token %q accepted", csrf)
		}
		if s.validCSRF(session, csrf) && session != issued && csrf == s.csrf(issued) {
			t.Fatalf("the CSRF token of one session is valid for %q", session)
		}
	})
}

// TestSessionExpires: a session is valid until its expiry, then never.
func TestSessionExpires(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	s := newSessions("test-admin-token-0123456789")
	s.now = func() time.Time { return now }
	session := s.issue()
	if !s.valid(session) {
		t.Fatal("a new session is not valid")
	}
	now = now.Add(sessionTTL - time.Second)
	if !s.valid(session) {
		t.Fatal("a session is not valid before its expiry")
	}
	now = now.Add(time.Second)
	if s.valid(session) {
		t.Fatal("an expired session is valid")
	}
	if newSessions("a-changed-admin-token-012345").valid(session) {
		t.Fatal("a session outlived a change of the admin token")
	}
}

// FuzzSafeNext: after sign-in the console only ever goes to one of its
// own pages.
func FuzzSafeNext(f *testing.F) {
	for _, seed := range []string{"/admin/", "/admin/sweeps", "https://evil.example/", "//evil.example/", "/admin//evil",
		"/admin/\\evil", "/admin/%2F%2Fevil", "/admin/\r\nLocation: x", "/admin/signin", "", "javascript:alert(1)"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, next string) {
		got := safeNext(next)
		if !strings.HasPrefix(got, "/admin/") || strings.Contains(got, "//") || strings.ContainsAny(got, "\\\r\n") {
			t.Fatalf("safeNext(%q) = %q", next, got)
		}
	})
}
