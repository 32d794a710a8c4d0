package server

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRequestRatesLastMinute: the last 60 whole seconds, oldest first; a
// second older than that is forgotten, even when its slot is reused.
func TestRequestRatesLastMinute(t *testing.T) {
	r := newRequestRates()
	t0 := time.Unix(1_700_000_000, 0)
	for range 3 {
		r.add("stripe", t0)
	}
	r.add("stripe", t0.Add(time.Second+500*time.Millisecond))
	r.add("stripe", t0.Add(59*time.Second))
	got := r.lastMinute("stripe", t0.Add(60*time.Second))
	require.Len(t, got, 60)
	require.Equal(t, []int{3, 1}, got[:2])
	require.Equal(t, 1, got[59])
	require.Equal(t, 5, sum(got))
	require.Equal(t, 2, sum(r.lastMinute("stripe", t0.Add(61*time.Second))), "t0's second has left the minute")
	r.add("stripe", t0.Add(60*time.Second)) // t0's slot, reused
	later := r.lastMinute("stripe", t0.Add(61*time.Second))
	require.Equal(t, 1, later[59])
	require.Equal(t, 3, sum(later))
	require.Equal(t, make([]int, 60), r.lastMinute("kinde", t0), "a provider never asked")
	require.Equal(t, []string{"stripe"}, r.providers())
}

func sum(ns []int) (s int) {
	for _, n := range ns {
		s += n
	}
	return s
}

// TestChartsEscapeAndScale: a chart's text is escaped, its tallest bar
// fills the plot, and an empty series draws no bar.
func TestChartsEscapeAndScale(t *testing.T) {
	svg := string(stackedBars(`<b>"x"</b>`, [][]int{{1, 1}, {4, 0}, {0, 0}}, []string{"new", "copy"}, []string{"<a>", "b", "c"}))
	require.NotContains(t, svg, "<b>")
	require.NotContains(t, svg, "<a>")
	require.Contains(t, svg, "&lt;b&gt;")
	require.Equal(t, 3, strings.Count(svg, "<rect "))
	require.Contains(t, svg, `height="120.0"`, "the 4 fills the plot (150 - 14 - 16)")
	require.Contains(t, svg, "max 4/h")
	require.NotContains(t, string(stackedBars("t", [][]int{{0}, {0}}, []string{"new"}, []string{"a", "b"})), "<rect ")

	rate := string(rateBars("t", []int{0, 10, 30}, 25))
	require.Equal(t, 2, strings.Count(rate, "<rect "))
	require.Contains(t, rate, `<line class="limit"`)
	require.Contains(t, rate, "limit 25/s")
}
