package stripe

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestProgress: the share of the list's creation span, [floor, ceil], the
// parts no longer have to list; unknown until the span is known.
func TestProgress(t *testing.T) {
	var c *Client // Progress reads only its cursors
	enc := func(cur listCursor) string { return cur.encode() }
	for _, tc := range []struct {
		name    string
		cursors []string
		want    float64
	}{
		{"NothingListed", []string{""}, -1},
		{"NoFloorYet", []string{enc(listCursor{After: "cus_9", At: 900, Top: 1000, Pages: 1, Ceil: 1000})}, -1},
		{"Unreadable", []string{"after=cus_1&at=x"}, -1},
		{"OnePartHalfWay", []string{enc(listCursor{After: "cus_5", At: 550, Top: 1000, Pages: 5, Floor: 101, Ceil: 1000})}, 0.5},
		{"SplitNotBegun", []string{
			enc(listCursor{After: "cus_8", At: 800, Top: 1000, From: 551, Pages: 3, Floor: 101, Ceil: 1000}),
			enc(listCursor{To: 551, Floor: 101, Ceil: 1000}),
		}, 200.0 / 900},
		{"SplitBegun", []string{
			enc(listCursor{After: "cus_8", At: 800, Top: 1000, From: 551, Pages: 3, Floor: 101, Ceil: 1000}),
			enc(listCursor{After: "cus_3", At: 300, Top: 550, To: 551, Pages: 2, Floor: 101, Ceil: 1000}),
		}, 0.5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.InDelta(t, tc.want, c.Progress(tc.cursors), 0.001)
		})
	}
}
