// Package dburl points a PostgreSQL connection string at another database
// on the same server: the workshop (store/scratch) and the test helpers
// (store/storetest) make databases next to the one they were given.
package dburl

import (
	"net/url"
	"strings"
)

// WithDatabase returns base (a URL or a keyword/value string) pointed at
// database db.
func WithDatabase(base, db string) string {
	if strings.HasPrefix(base, "postgres://") || strings.HasPrefix(base, "postgresql://") {
		if u, err := url.Parse(base); err == nil {
			u.Path, u.RawPath = "/"+db, ""
			return u.String()
		}
	}
	// In keyword/value strings the last setting wins.
	return base + " dbname=" + db
}

// Has reports whether the connection string s (a URL or a keyword/value
// string) sets the parameter key.
func Has(s, key string) bool {
	if strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://") {
		u, err := url.Parse(s)
		return err == nil && u.Query().Has(key)
	}
	for _, f := range strings.Fields(s) {
		if k, _, ok := strings.Cut(f, "="); ok && strings.TrimSpace(k) == key {
			return true
		}
	}
	return false
}

// WithParam returns s (a URL or a keyword/value string) with the parameter
// key set to value, replacing any value s had.
func WithParam(s, key, value string) string {
	if strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://") {
		if u, err := url.Parse(s); err == nil {
			q := u.Query()
			q.Set(key, value)
			u.RawQuery = q.Encode()
			return u.String()
		}
	}
	// In keyword/value strings the last setting wins.
	return s + " " + key + "=" + value
}
