package stripe

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestFormReadsStripeEncoding(t *testing.T) {
	t.Parallel()
	v, err := url.ParseQuery("items[1][price]=b&items[0][price]=a&items[0][quantity]=2&metadata[user_id]=u1" +
		"&lookup_keys[1]=y&lookup_keys[0]=x&lookup_keys[]=z&expand[]=customer")
	require.NoError(t, err)
	f := form(v)

	items, err := f.objects("items")
	require.NoError(t, err)
	require.Equal(t, []map[string]string{{"price": "a", "quantity": "2"}, {"price": "b"}}, items)
	require.Equal(t, map[string]string{"user_id": "u1"}, f.hash("metadata"))
	keys, err := f.list("lookup_keys")
	require.NoError(t, err)
	require.Equal(t, []string{"x", "y", "z"}, keys)
	require.NoError(t, f.allow("items", "metadata", "lookup_keys"), "expand is always allowed")
	require.Error(t, f.allow("items", "metadata"))

	_, err = form(url.Values{"items[x][price]": {"a"}}).objects("items")
	require.Error(t, err)
	_, _, err = form(url.Values{"cancel_at_period_end": {"yes"}}).boolean("cancel_at_period_end")
	require.Error(t, err)
}

func TestAddIntervalClampsToMonthEnd(t *testing.T) {
	t.Parallel()
	jan31 := time.Date(2024, 1, 31, 9, 30, 0, 0, time.UTC)
	for n, want := range map[int]time.Time{
		1:  time.Date(2024, 2, 29, 9, 30, 0, 0, time.UTC),
		2:  time.Date(2024, 3, 31, 9, 30, 0, 0, time.UTC),
		3:  time.Date(2024, 4, 30, 9, 30, 0, 0, time.UTC),
		13: time.Date(2025, 2, 28, 9, 30, 0, 0, time.UTC),
	} {
		require.Equal(t, want, addInterval(jan31, "month", 1, n), "n=%d", n)
	}
	require.Equal(t, time.Date(2025, 1, 31, 9, 30, 0, 0, time.UTC), addInterval(jan31, "year", 1, 1))
	require.Equal(t, time.Date(2024, 2, 14, 9, 30, 0, 0, time.UTC), addInterval(jan31, "week", 2, 1))
}

func FuzzForm(f *testing.F) {
	f.Add("items[0][price]=a&metadata[k]=v&lookup_keys[]=x")
	f.Add("items[=1&a]]=2&[]=3&items[99999999999999999999][x]=1")
	f.Fuzz(func(t *testing.T, query string) {
		v, err := url.ParseQuery(query)
		if err != nil {
			return
		}
		fm := form(v)
		for key := range v {
			parts := splitKey(key)
			require.True(t, strings.HasPrefix(key, parts[0]))
			_, _ = fm.objects(parts[0])
			_, _ = fm.list(parts[0])
			_ = fm.hash(parts[0])
		}
	})
}
