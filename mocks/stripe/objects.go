package stripe

import (
	"crypto/rand"
	"encoding/json"
	"maps"
	"regexp"
	"slices"
	"strings"
)

// DefaultAPIVersion is the version answered when a request sends no
// Stripe-Version header, and the version events are created with. It is the
// version stripe-go v82 pins.
const DefaultAPIVersion = "2025-08-27.basil"

// basilVersion is the release that moved current_period_start/end from the
// subscription to its items, and invoice.subscription to
// invoice.parent.subscription_details. Older versions get the old shape.
const basilVersion = "2025-03-31"

var versionPattern = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}(\.[a-z]+)?$`)

// isBasil reports whether an API version renders the post-2025-03-31 shapes.
// Only the date prefix counts: "2025-08-27.basil" >= "2025-03-31".
func isBasil(version string) bool { return version[:10] >= basilVersion }

// obj is a rendered Stripe object; encoding/json sorts its keys.
type obj = map[string]any

// newID returns a Stripe-looking id: prefix, underscore, 14 base62 characters.
func newID(prefix string) string {
	const alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	b := make([]byte, 14)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return prefix + "_" + string(b)
}

// nullable renders Stripe's null for an unset int or string.
func nullable[T comparable](v T) any {
	var zero T
	if v == zero {
		return nil
	}
	return v
}

func metadataOf(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return maps.Clone(m)
}

// record gives each stored object its creation order: lists are newest first
// and several objects can share one clock second.
type record struct{ seq int64 }

func (r *record) order() int64     { return r.seq }
func (r *record) setOrder(n int64) { r.seq = n }

type row interface {
	id() string
	order() int64
	setOrder(int64)
}

// table keeps one kind of object by id and in creation order.
type table[T row] struct {
	byID map[string]T
	rows []T
	next int64
}

func (t *table[T]) put(v T) {
	if t.byID == nil {
		t.byID = map[string]T{}
	}
	if _, ok := t.byID[v.id()]; !ok {
		t.next++
		v.setOrder(t.next)
		t.rows = append(t.rows, v)
	}
	t.byID[v.id()] = v
}

func (t *table[T]) get(id string) (T, bool) {
	v, ok := t.byID[id]
	return v, ok
}

func (t *table[T]) remove(id string) {
	delete(t.byID, id)
	t.rows = slices.DeleteFunc(t.rows, func(v T) bool { return v.id() == id })
}

// newestFirst returns the rows keep accepts, newest first.
func (t *table[T]) newestFirst(keep func(T) bool) []T {
	out := make([]T, 0, len(t.rows))
	for i := len(t.rows) - 1; i >= 0; i-- {
		if keep == nil || keep(t.rows[i]) {
			out = append(out, t.rows[i])
		}
	}
	return out
}

// expansion is the set of expand[] paths of a request.
type expansion map[string]bool

// inList strips the "data." prefix that expands a list's elements.
func (e expansion) inList() expansion {
	out := expansion{}
	for p := range e {
		if rest, ok := strings.CutPrefix(p, "data."); ok {
			out[rest] = true
		}
	}
	return out
}

// has reports whether path, or anything below it, is expanded.
func (e expansion) has(path string) bool {
	for p := range e {
		if p == path || strings.HasPrefix(p, path+".") {
			return true
		}
	}
	return false
}

// diffTop is Stripe's data.previous_attributes, at the top level only: the
// old value of every field that changed (a changed item list is given whole).
func diffTop(before, after obj) obj {
	prev := obj{}
	for k, old := range before {
		a, _ := json.Marshal(old)
		b, _ := json.Marshal(after[k])
		if string(a) != string(b) {
			prev[k] = old
		}
	}
	return prev
}
