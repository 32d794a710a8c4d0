package stripe

import (
	"encoding/json"
	"slices"
	"strconv"
)

// indented renders v exactly as json.MarshalIndent(v, "", "  ") does (the
// shape Stripe answers in), walking the fake's rendered objects (maps and
// slices of them) itself. encoding/json reaches map entries through
// reflection, sorts their keys as reflect values and indents in a second
// pass over the output: that was most of the cost of a list page of 100
// expanded customers, the sweep bench's hottest request. Any other value
// is handed to json.MarshalIndent at its depth. sizeHint is the capacity
// to start with (the size of a like answer), so the output is not grown
// by doubling.
func indented(v any, sizeHint int) ([]byte, error) {
	return appendIndented(make([]byte, 0, sizeHint), v, "")
}

func appendIndented(b []byte, v any, prefix string) ([]byte, error) {
	var err error
	switch v := v.(type) {
	case nil:
		return append(b, "null"...), nil
	case bool:
		return strconv.AppendBool(b, v), nil
	case int:
		return strconv.AppendInt(b, int64(v), 10), nil
	case int64:
		return strconv.AppendInt(b, v, 10), nil
	case string:
		return appendString(b, v), nil
	case obj:
		if v == nil {
			return append(b, "null"...), nil
		}
		if len(v) == 0 {
			return append(b, "{}"...), nil
		}
		inner := prefix + "  "
		b = append(b, '{')
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(append(b, '\n'), inner...)
			b = append(appendString(b, k), ": "...)
			if b, err = appendIndented(b, v[k], inner); err != nil {
				return nil, err
			}
		}
		return append(append(append(b, '\n'), prefix...), '}'), nil
	case []obj:
		return appendElements(b, v, prefix)
	case []any:
		return appendElements(b, v, prefix)
	}
	out, err := json.MarshalIndent(v, prefix, "  ")
	return append(b, out...), err
}

func appendElements[T any](b []byte, elems []T, prefix string) ([]byte, error) {
	if elems == nil {
		return append(b, "null"...), nil
	}
	if len(elems) == 0 {
		return append(b, "[]"...), nil
	}
	inner := prefix + "  "
	b = append(b, '[')
	var err error
	for i, e := range elems {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(append(b, '\n'), inner...)
		if b, err = appendIndented(b, any(e), inner); err != nil {
			return nil, err
		}
	}
	return append(append(append(b, '\n'), prefix...), ']'), nil
}

// appendString quotes s as encoding/json does: printable ASCII other than
// the quote, the backslash and <, >, & (escaped for HTML) goes as it is;
// anything else is left to encoding/json.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			out, _ := json.Marshal(s) // a string always marshals
			return append(b, out...)
		}
	}
	return append(append(append(b, '"'), s...), '"')
}
