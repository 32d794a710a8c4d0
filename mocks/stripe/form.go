package stripe

import (
	"net/url"
	"sort"
	"strconv"
	"strings"
)

// form reads Stripe's form encoding: nested keys in brackets
// (metadata[user_id]=u1, items[0][price]=price_x) and arrays either indexed
// (lookup_keys[0]=a, what stripe-go sends) or bare (lookup_keys[]=a, what
// people type in curl).
type form url.Values

// splitKey turns "items[0][price]" into ["items" "0" "price"] and
// "lookup_keys[]" into ["lookup_keys" ""].
func splitKey(key string) []string {
	i := strings.IndexByte(key, '[')
	if i < 0 {
		return []string{key}
	}
	parts := []string{key[:i]}
	rest := key[i:]
	for len(rest) > 0 && rest[0] == '[' {
		j := strings.IndexByte(rest, ']')
		if j < 0 {
			break
		}
		parts = append(parts, rest[1:j])
		rest = rest[j+1:]
	}
	return parts
}

// allow rejects any top-level parameter not named, as Stripe does.
func (f form) allow(names ...string) error {
	for key := range f {
		top := splitKey(key)[0]
		if top == "expand" || contains(names, top) {
			continue
		}
		return &stripeError{status: 400, Type: typeInvalidRequest, Code: "parameter_unknown", Param: top,
			Message: "Received unknown parameter: " + top}
	}
	return nil
}

func (f form) has(name string) bool {
	for key := range f {
		if splitKey(key)[0] == name {
			return true
		}
	}
	return false
}

func (f form) str(name string) (string, bool) {
	v, ok := f[name]
	if !ok || len(v) == 0 {
		return "", false
	}
	return v[0], true
}

func (f form) require(name string) (string, error) {
	v, ok := f.str(name)
	if !ok || v == "" {
		return "", missingParam(name)
	}
	return v, nil
}

func (f form) boolean(name string) (val, ok bool, err error) {
	s, ok := f.str(name)
	if !ok {
		return false, false, nil
	}
	switch s {
	case "true":
		return true, true, nil
	case "false":
		return false, true, nil
	}
	return false, false, invalidParam(name, "Invalid boolean: "+s)
}

func (f form) integer(name string) (int64, bool, error) {
	s, ok := f.str(name)
	if !ok {
		return 0, false, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, false, invalidParam(name, "Invalid integer: "+s)
	}
	return n, true, nil
}

// hash collects name[key]=value pairs (metadata, recurring, product_data).
func (f form) hash(name string) map[string]string {
	out := map[string]string{}
	for key, vals := range f {
		parts := splitKey(key)
		if len(parts) == 2 && parts[0] == name && parts[1] != "" && len(vals) > 0 {
			out[parts[1]] = vals[0]
		}
	}
	return out
}

// list collects name[]=v and name[i]=v values, indexed ones in index order
// followed by bare ones in the order they were sent.
func (f form) list(name string) ([]string, error) {
	type entry struct {
		i int
		v string
	}
	var indexed []entry
	var bare []string
	for key, vals := range f {
		parts := splitKey(key)
		if len(parts) != 2 || parts[0] != name {
			continue
		}
		if parts[1] == "" {
			bare = append(bare, vals...)
			continue
		}
		i, err := strconv.Atoi(parts[1])
		if err != nil || i < 0 || len(vals) == 0 {
			return nil, invalidParam(name, "Invalid array")
		}
		indexed = append(indexed, entry{i, vals[0]})
	}
	sort.Slice(indexed, func(a, b int) bool { return indexed[a].i < indexed[b].i })
	out := make([]string, 0, len(indexed)+len(bare))
	for _, e := range indexed {
		out = append(out, e.v)
	}
	return append(out, bare...), nil
}

// objects collects name[i][field]=v into one map per index, in index order.
// Deeper nesting (items[0][metadata][k]) is ignored.
func (f form) objects(name string) ([]map[string]string, error) {
	byIndex := map[int]map[string]string{}
	for key, vals := range f {
		parts := splitKey(key)
		if parts[0] != name {
			continue
		}
		if len(parts) < 3 {
			return nil, invalidParam(name, "Invalid array")
		}
		i, err := strconv.Atoi(parts[1])
		if err != nil || i < 0 {
			return nil, invalidParam(name, "Invalid array")
		}
		if len(parts) != 3 || len(vals) == 0 {
			continue
		}
		if byIndex[i] == nil {
			byIndex[i] = map[string]string{}
		}
		byIndex[i][parts[2]] = vals[0]
	}
	idx := make([]int, 0, len(byIndex))
	for i := range byIndex {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	out := make([]map[string]string, 0, len(idx))
	for _, i := range idx {
		out = append(out, byIndex[i])
	}
	return out, nil
}

// mergeMetadata applies Stripe's metadata update rule: keys are merged into
// the existing set and an empty value deletes the key.
func mergeMetadata(dst, update map[string]string) map[string]string {
	out := make(map[string]string, len(dst)+len(update))
	for k, v := range dst {
		out[k] = v
	}
	for k, v := range update {
		if v == "" {
			delete(out, k)
		} else {
			out[k] = v
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
