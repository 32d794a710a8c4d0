package store

import "time"

// nullTime maps the zero time to SQL NULL: "unknown" must never be stored as
// 0001-01-01 or 1970-01-01.
func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// deref maps SQL NULL back to the zero time.
func deref(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}
