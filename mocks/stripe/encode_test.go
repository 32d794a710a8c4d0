package stripe

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestIndentedIsMarshalIndent: the fake's encoder answers the very bytes
// json.MarshalIndent gives, for every kind of value its objects hold.
func TestIndentedIsMarshalIndent(t *testing.T) {
	t.Parallel()
	type nested struct {
		A string `json:"a"`
		B []int  `json:"b,omitempty"`
	}
	values := []any{
		nil, true, 0, int64(-7), 1.5, "", "plain", "quote \" slash \\ <b>&</b> \u2028 é \x01 \xff",
		obj{}, obj(nil), []obj{}, []obj(nil), []any{}, []any(nil), []string{"x"}, map[string]string{},
		obj{
			"z": 1, "a": obj{"nested": []obj{{"k": "v"}, {}}, "empty": obj{}}, "<key>": "v",
			"list": []any{1, "two", nil, obj{"x": true}, []any{}, []string{"a", "b"}},
			"meta": map[string]string{"user_id": "u_1", "b": "&"}, "struct": nested{A: "x", B: []int{1, 2}},
			"raw": json.RawMessage(`{"b": 1,  "a": [1, 2]}`), "float": 0.1, "null": nil, "none": []obj(nil),
		},
		[]obj{{"id": "cus_1", "subscriptions": obj{"data": []obj{{"items": obj{"data": []obj{{"price": obj{"id": "p"}}}}}}}}},
	}
	for _, v := range values {
		want, err := json.MarshalIndent(v, "", "  ")
		require.NoError(t, err)
		got, err := indented(v, 0)
		require.NoError(t, err)
		require.Equal(t, string(want), string(got))
	}
}
