package reconcile

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// The limits billsync puts on what it keeps from outside, and why. They are
// the domain's: a verified event that breaks one is still stored, as
// ignored with the reason, and the store then never sees text or a time it
// cannot hold.

// MaxFieldBytes bounds every text field billsync keeps from an event (ids,
// type, API version, customer). Providers' own are under 100 bytes, so a
// longer one names nothing billsync could look up; the bound also keeps the
// dedupe key small enough for a unique index.
const MaxFieldBytes = 255

// Storable returns s as billsync keeps outside text: without NUL bytes
// (escaped as \x00: a database's text type holds none) and at most
// MaxFieldBytes (cut on a rune boundary). problem says what had to change;
// it is empty when s is returned as is. Invalid UTF-8 is the JSON decoder's
// to replace before.
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

// Event times outside [MinEventTime, MaxEventTime) are absurd: no provider
// billsync reads existed before 2000, none dates a change two centuries
// ahead, and most int64 seconds are beyond any database's time type.
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
