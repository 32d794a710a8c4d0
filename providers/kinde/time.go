package kinde

import (
	"time"
)

// parseTime reads a time Kinde writes (the claims timestamp and
// event_timestamp, an agreement's dates) in every form RFC 3339 allows,
// which time.RFC3339Nano alone refuses: a lowercase "t" or "z" (section
// 5.6's note), a space instead of "T" (same note), a leap second
// ("23:59:60", read as the next second). It also takes an offset of hours
// only ("+00", "-05"), as other Kinde integrations do, and fractional
// seconds of any length (nanoseconds kept). A refused time is a 401 that
// Kinde retries in vain for 36 hours, so the reader is lenient in form
// and strict in meaning: it reads all that time.RFC3339Nano reads, the
// result is UTC, and false means no reading names one instant.
func parseTime(s string) (time.Time, bool) {
	b := []byte(s)
	var leap time.Duration
	// The shortest RFC 3339 time: 2006-01-02T15:04:05Z.
	if n := len(b); n >= len("2006-01-02T15:04:05Z") {
		if b[10] == 't' || b[10] == ' ' {
			b[10] = 'T'
		}
		if b[n-1] == 'z' {
			b[n-1] = 'Z'
		}
		// "+05" (hours only) ends a time after its seconds; RFC 3339 writes "+05:00".
		if n-3 >= len("2006-01-02T15:04:05") && (b[n-3] == '+' || b[n-3] == '-') && isDigit(b[n-2]) && isDigit(b[n-1]) {
			b = append(b, ":00"...)
		}
		// A leap second: Go's reader stops at 59; the instant is the next second.
		if b[16] == ':' && b[17] == '6' && b[18] == '0' {
			b[17], b[18] = '5', '9'
			leap = time.Second
		}
	}
	t, err := time.Parse(time.RFC3339Nano, string(b))
	if err != nil {
		return time.Time{}, false
	}
	return t.Add(leap).UTC(), true
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }
