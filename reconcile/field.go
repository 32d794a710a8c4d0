package reconcile

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// MaxFieldBytes bounds every text field billsync stores from an event (ids,
// type, API version, customer). Providers' own are under 100 bytes;
// PostgreSQL cannot index a key of more than about 2,700 bytes, and the
// dedupe key has a unique index.
const MaxFieldBytes = 255

// Storable returns s fit for a PostgreSQL text column: NUL bytes escaped as
// \x00 and at most MaxFieldBytes (cut on a rune boundary). problem says what
// had to change; it is empty when s is returned as is. Invalid UTF-8 is the
// JSON decoder's to replace before.
func Storable(s string) (clean, problem string) {
	if strings.IndexByte(s, 0) >= 0 {
		s, problem = strings.ReplaceAll(s, "\x00", `\x00`), "contains a NUL byte"
	}
	if len(s) > MaxFieldBytes {
		if problem == "" {
			problem = fmt.Sprintf("longer than %d bytes", MaxFieldBytes)
		}
		cut := MaxFieldBytes
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut]
	}
	return s, problem
}

// DedupeKeyOf returns the dedupe key of a provider's event id: the id
// itself when it is storable as is, else "sha256:" and its hash, so copies
// of an id that had to be cut or escaped still meet.
func DedupeKeyOf(id string) string {
	if clean, problem := Storable(id); problem == "" {
		return clean
	}
	return "sha256:" + SHA256Hex([]byte(id))
}

// SHA256Hex is the hex SHA-256 of b.
func SHA256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Event times outside [MinEventTime, MaxEventTime) are absurd: no provider
// billsync reads existed before 2000, and PostgreSQL's timestamptz cannot
// hold most int64 seconds at all.
var (
	MinEventTime = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	MaxEventTime = time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)
)

// SaneEventTime reports whether t can be an event's time.
func SaneEventTime(t time.Time) bool {
	return !t.Before(MinEventTime) && t.Before(MaxEventTime)
}

// Fields cleans an event's text fields with Storable and keeps the first
// problem, as the reason to store the event as ignored.
type Fields struct {
	Problem string // "event id contains a NUL byte"; empty while all were fine
}

// Clean returns s made storable, noting its problem under name.
func (f *Fields) Clean(name, s string) string {
	clean, problem := Storable(s)
	if problem != "" && f.Problem == "" {
		f.Problem = name + " " + problem
	}
	return clean
}
