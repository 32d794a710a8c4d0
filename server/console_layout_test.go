package server_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestConsoleCardTablesAreLabelled checks every template's tables: on a
// phone a table of records is drawn as one card per row (issue 26), and a
// cell shows its column's heading from its data-label, so each cell of each
// row must carry the heading of its column, in order. The browser test
// (cmd/billsync/internal/demo) measures the pages the demo fills; this one
// also covers the tables the demo leaves empty (deliveries, sweeps, retries).
func TestConsoleCardTablesAreLabelled(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("console", "*.html"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	var (
		table = regexp.MustCompile(`(?s)<table id="([^"]+)"( class="cards")?>(.*?)</table>`)
		head  = regexp.MustCompile(`(?s)<thead>(.*?)</thead>`)
		th    = regexp.MustCompile(`(?s)<th[^>]*>(.*?)</th>`)
		tag   = regexp.MustCompile(`<[^>]+>`)
		td    = regexp.MustCompile(`<td(\s[^>]*)?>`)
		label = regexp.MustCompile(`\sdata-label="([^"]*)"`)
	)
	cards := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range table.FindAllStringSubmatch(string(b), -1) {
			id, isCards, body := m[1], m[2] != "", m[3]
			if id == "diff" {
				// Before and after side by side: three narrow columns,
				// read across, so it stays a table.
				require.False(t, isCards, "%s: #diff", f)
				continue
			}
			require.True(t, isCards, "%s: #%s is not laid out as cards on a phone", f, id)
			cards++
			h := head.FindStringSubmatch(body)
			require.NotNil(t, h, "%s: #%s has no thead", f, id)
			var want []string
			for _, c := range th.FindAllStringSubmatch(h[1], -1) {
				want = append(want, strings.TrimSpace(tag.ReplaceAllString(c[1], "")))
			}
			rows := strings.Split(body[strings.Index(body, "<tbody>"):], "<tr")[1:]
			require.NotEmpty(t, rows, "%s: #%s has no row", f, id)
			for _, r := range rows {
				var got []string
				for _, c := range td.FindAllStringSubmatch(r, -1) {
					l := label.FindStringSubmatch(c[1])
					if l == nil {
						l = []string{"", "(none)"}
					}
					got = append(got, l[1])
				}
				require.Equal(t, want, got, "%s: #%s: the cells' data-label are not the headings", f, id)
			}
		}
	}
	require.GreaterOrEqual(t, cards, 12, "fewer tables found than the console has")
}
